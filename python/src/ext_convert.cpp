// Values across the boundary: the core's JSON documents as Python dicts, and the strict reading of
// an argument as a CPU array of one element type (zero copy when it is C-contiguous).
#include "ext_common.hpp"

#include <fmt/format.h>

#include "qconform/error.hpp"

namespace qc::py {

// ---- JSON -> Python -------------------------------------------------------------------------------

// The C++ JSON documents become plain dicts through the json module: one conversion rule for
// every result (NaN is already null there, as in the CLI's files).
nb::object json_to_py(const nlohmann::json& j) {
  // Leaked on purpose: a static `nb::object` would be released after the interpreter is gone.
  static PyObject* loads = nb::object(nb::module_::import_("json").attr("loads")).release().ptr();
  return nb::borrow(loads)(nb::str(j.dump().c_str()));
}

// ---- arrays in ------------------------------------------------------------------------------------

namespace {

const char* elem_name(Elem e) {
  switch (e) {
    case Elem::i8: return "int8";
    case Elem::code8: return "uint8 (FP8 bit patterns; int8 accepted too)";
    case Elem::f32: return "float32";
    case Elem::bf16: return "bfloat16 (as uint16/int16 bit patterns, ml_dtypes.bfloat16 or torch.bfloat16)";
    case Elem::i32: return "int32";
    case Elem::i64: return "int64";
    case Elem::u8: return "uint8 (FP8 codes; ml_dtypes.float8_e4m3fn or torch.float8_e4m3fn arrays are read as their bytes)";
  }
  return "?";
}

std::string dtype_name(nb::dlpack::dtype d) {
  using C = nb::dlpack::dtype_code;
  std::string base;
  switch (static_cast<C>(d.code)) {
    case C::Int: base = "int"; break;
    case C::UInt: base = "uint"; break;
    case C::Float: base = "float"; break;
    case C::Bfloat: base = "bfloat"; break;
    case C::Complex: base = "complex"; break;
    case C::Bool: return "bool";
    default: base = fmt::format("dlpack-code-{}-", d.code); break;
  }
  std::string s = base + std::to_string(d.bits);
  if (d.lanes != 1) s += fmt::format("x{}", d.lanes);
  return s;
}

}  // namespace

bool elem_matches(Elem e, nb::dlpack::dtype d) {
  using C = nb::dlpack::dtype_code;
  if (d.lanes != 1) return false;
  const auto is = [&](C code, int bits) { return d.code == static_cast<uint8_t>(code) && d.bits == bits; };
  switch (e) {
    case Elem::i8: return is(C::Int, 8);
    case Elem::code8: return is(C::UInt, 8) || is(C::Int, 8);
    case Elem::f32: return is(C::Float, 32);
    case Elem::bf16: return is(C::UInt, 16) || is(C::Int, 16) || is(C::Bfloat, 16);
    case Elem::i32: return is(C::Int, 32);
    case Elem::i64: return is(C::Int, 64);
    case Elem::u8: return is(C::UInt, 8);
  }
  return false;
}

std::string shape_text(const AnyArray& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += fmt::format("{}{}", i ? "," : "", a.shape(i));
  s += ']';
  return s;
}

template <class T>
HostArray<T> host_array(const AnyArray& a, const std::string& what, Elem elem, std::initializer_list<size_t> ranks) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8);
  QC_INPUT(a.is_valid(), "{}: expected an array, found an invalid array handle", what);
  QC_INPUT(a.device_type() == nb::device::cpu::value,
           "{}: expected a CPU array, found one on DLPack device type {} (id {}); the core runs on the host: "
           "move it with `.cpu()` (qconform's Python functions do that for torch tensors)",
           what, a.device_type(), a.device_id());
  QC_INPUT(elem_matches(elem, a.dtype()), "{}: expected dtype {}, found {} (shape {})", what, elem_name(elem),
           dtype_name(a.dtype()), shape_text(a));
  bool rank_ok = false;
  std::string rank_list;
  for (size_t r : ranks) {
    rank_ok |= a.ndim() == r;
    rank_list += fmt::format("{}{}", rank_list.empty() ? "" : " or ", r);
  }
  QC_INPUT(rank_ok, "{}: expected a {}-D array, found {}-D with shape {}", what, rank_list, a.ndim(), shape_text(a));
  HostArray<T> h;
  h.array = a;
  size_t count = 1;
  for (size_t i = 0; i < a.ndim(); ++i) {
    h.shape.push_back(static_cast<int64_t>(a.shape(i)));
    count *= a.shape(i);
  }
  // C-contiguous check in elements; dimensions of extent 1 may carry any stride.
  bool contiguous = true;
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) contiguous = false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  const auto* base = static_cast<const T*>(static_cast<const void*>(static_cast<const uint8_t*>(a.data_handle()) +
                                                                     a.byte_offset()));
  if (count == 0) {
    h.data = {};
  } else if (contiguous) {
    h.data = std::span<const T>(base, count);
  } else {
    h.copy.resize(count);
    if (a.ndim() == 1) {
      for (size_t i = 0; i < count; ++i) h.copy[i] = base[static_cast<int64_t>(i) * a.stride(0)];
    } else {
      QC_CHECK(a.ndim() == 2, "{}: strided copy supports rank 1 and 2, found {}", what, a.ndim());
      const size_t rows = a.shape(0), cols = a.shape(1);
      for (size_t r = 0; r < rows; ++r) {
        for (size_t c = 0; c < cols; ++c) {
          h.copy[r * cols + c] = base[static_cast<int64_t>(r) * a.stride(0) + static_cast<int64_t>(c) * a.stride(1)];
        }
      }
    }
    h.data = h.copy;
  }
  return h;
}

// The element types the binding reads (ext_common.hpp declares the template).
template HostArray<int8_t> host_array(const AnyArray&, const std::string&, Elem, std::initializer_list<size_t>);
template HostArray<uint8_t> host_array(const AnyArray&, const std::string&, Elem, std::initializer_list<size_t>);
template HostArray<uint16_t> host_array(const AnyArray&, const std::string&, Elem, std::initializer_list<size_t>);
template HostArray<int32_t> host_array(const AnyArray&, const std::string&, Elem, std::initializer_list<size_t>);
template HostArray<int64_t> host_array(const AnyArray&, const std::string&, Elem, std::initializer_list<size_t>);
template HostArray<float> host_array(const AnyArray&, const std::string&, Elem, std::initializer_list<size_t>);

AnyArray as_array(nb::handle obj, const std::string& what) {
  AnyArray a;
  if (!obj.is_valid() || obj.is_none() || !nb::try_cast(obj, a, /*convert=*/false)) {
    const std::string type_name =
        obj.is_valid() ? nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).attr("__qualname__")))
                       : "nothing";
    QC_FAIL_INPUT("{}: expected an array (NumPy, PyTorch or any DLPack / buffer-protocol object), found {}", what,
                  type_name);
  }
  return a;
}

}  // namespace qc::py
