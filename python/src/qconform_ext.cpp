// The nanobind extension `qconform._qconform`: the C++ core on NumPy / PyTorch CPU arrays, and a
// C++ `Arm` that calls a Python callable, so that verify and boundary treat a Python kernel
// exactly like a built-in one.
//
// Arrays cross the boundary without a copy when they are C-contiguous CPU arrays of the expected
// dtype (DLPack or the buffer protocol, through `nb::ndarray`); a strided array is copied once,
// element by element; any other dtype, rank, shape or device is a `qconform.InputError` naming
// the argument, what was expected and what was found. The Python layer (`qconform/__init__.py`)
// only reinterprets what nanobind cannot see (ml_dtypes bfloat16, torch CUDA tensors) before
// calling in here.
//
// Errors: `qc::Error` becomes `qconform.InputError` (a `ValueError`), `qconform.ArmFailure` or `qconform.InternalError`
// (a `RuntimeError`), both subclasses of `qconform.Error`, with the C++ message and the
// attributes `kind`, `file`, `line`, `condition`. An exception raised inside a Python arm
// travels through the C++ code as `nb::python_error` and reaches the caller unchanged.
//
// Build: `cmake -S . -B build -DQCONFORM_BUILD_PYTHON=ON && cmake --build build --target _qconform`
// (the module and a copy of the package land in build/python/qconform), or `pip install ./python`.
// Test: `QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_python_binding.py`.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <Python.h>

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "checks/c1_boundary.hpp"
#include "checks/identify.hpp"
#include "qconform/compare.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "checks/verify.hpp"
#include "checks/verify_results.hpp"
#include "accum/fp8_model.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/operands.hpp"
#include "core/operands_io.hpp"
#include "epilogue/quantize.hpp"
#include "synth/synth.hpp"
#include "stats/transfer.hpp"
#include "core/version.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// ---- exceptions -------------------------------------------------------------------------------

PyObject* g_error = nullptr;           // qconform.Error(Exception)
PyObject* g_input_error = nullptr;     // qconform.InputError(Error, ValueError)
PyObject* g_internal_error = nullptr;  // qconform.InternalError(Error, RuntimeError)
PyObject* g_arm_failure = nullptr;     // qconform.ArmFailure(Error, RuntimeError)

void raise_qc_error(const qc::Error& e) {
  PyObject* type = g_internal_error;
  const char* kind = "internal";
  switch (e.kind()) {
    case qc::ErrorKind::input: type = g_input_error, kind = "input"; break;
    case qc::ErrorKind::arm_failure: type = g_arm_failure, kind = "arm_failure"; break;
    case qc::ErrorKind::internal: break;
  }
  nb::object instance = nb::borrow(type)(nb::str(e.what()));
  instance.attr("kind") = nb::str(kind);
  instance.attr("file") = nb::str(e.file() ? e.file() : "");
  instance.attr("line") = nb::int_(e.line());
  instance.attr("condition") = nb::str(e.condition() ? e.condition() : "");
  PyErr_SetObject(type, instance.ptr());
}

// ---- JSON -> Python -------------------------------------------------------------------------------

// The C++ JSON documents become plain dicts through the json module: one conversion rule for
// every result (NaN is already null there, as in the CLI's files).
nb::object json_to_py(const nlohmann::json& j) {
  // Leaked on purpose: a static `nb::object` would be released after the interpreter is gone.
  static PyObject* loads = nb::object(nb::module_::import_("json").attr("loads")).release().ptr();
  return nb::borrow(loads)(nb::str(j.dump().c_str()));
}

// ---- arrays in ------------------------------------------------------------------------------------

using AnyArray = nb::ndarray<nb::ro>;

enum class Elem { i8, code8, f32, bf16, i32, i64, u8 };

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

// A CPU array of element type `T` seen as a contiguous row-major block: a view when the array is
// C-contiguous (zero copy; `array` keeps the Python object alive), one strided copy otherwise.
template <class T>
struct HostArray {
  AnyArray array;
  std::vector<T> copy;
  std::span<const T> data;
  std::vector<int64_t> shape;
  int64_t dim(size_t i) const { return shape[i]; }
};

// `what` names the argument in messages ("a_q", "layers[2].w_scale"). `ranks` lists the accepted
// ranks.
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

// ---- arrays out ------------------------------------------------------------------------------------

template <class T>
nb::object numpy_from_vector(std::vector<T>&& v, std::vector<size_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(heap->data(), shape.size(), shape.data(), owner));
}

// A read-only NumPy view of memory kept alive by `keepalive` (operands from a file, synth, or an
// arm's inputs). Without a keepalive the bytes are copied, so a view can never dangle.
template <class T>
nb::object numpy_view(std::span<const T> data, std::vector<size_t> shape, const std::shared_ptr<const void>& keepalive) {
  if (!keepalive) return numpy_from_vector(std::vector<T>(data.begin(), data.end()), std::move(shape));
  auto* holder = new std::shared_ptr<const void>(keepalive);
  nb::capsule owner(holder, [](void* p) noexcept { delete static_cast<std::shared_ptr<const void>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, const T>(data.data(), shape.size(), shape.data(), owner));
}

// ---- operands --------------------------------------------------------------------------------------

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

// The arrays a layer built from Python refers to. The last reference may be dropped on a thread
// that does not hold the GIL, and releasing a Python reference needs it: the deleter takes it.
struct PyLayerHold {
  HostArray<int8_t> a_q, w_q;
  HostArray<float> a_scale, w_scale;
  std::optional<HostArray<uint16_t>> bias;
};

std::shared_ptr<const void> hold(std::unique_ptr<PyLayerHold> h) {
  return std::shared_ptr<const void>(h.release(), [](const void* p) {
    auto* held = static_cast<PyLayerHold*>(const_cast<void*>(p));
    if (!Py_IsInitialized()) return;  // interpreter gone: leak rather than touch Python
    nb::gil_scoped_acquire gil;
    delete held;
  });
}

// One layer from a dict {name, a_q, a_scale, w_q, w_scale, bias?, source?, a_type?, w_type?,
// act_scale?, weight_scale?, ue8m0?}: zero-copy views of contiguous arrays, strict checks of every dtype
// and shape. `a_type`/`w_type` ("int8" by default, "e4m3", "e5m2") give the element types; an FP8 operand
// is a uint8 (or int8) array of its bit patterns (`x.view(np.uint8)` of an ml_dtypes float8 array).
// `act_scale`/`weight_scale` give the scale layouts in the operand files' spelling ("per-token" and
// "per-channel" by default; "per-token-group:128" takes a_scale [M, ceil(K/128)], "per-block:128x128"
// w_scale [ceil(N/128), ceil(K/128)]); `ue8m0` True requires every scale to be a power of two.
qc::ElementType element_type_from(const nb::dict& d, const char* key, const std::string& where) {
  if (!d.contains(key) || d[key].is_none()) return qc::ElementType::int8;
  std::string t;
  QC_INPUT(nb::try_cast(d[key], t, false), "{}.{}: expected a string (int8, e4m3 or e5m2)", where, key);
  for (qc::ElementType e : {qc::ElementType::int8, qc::ElementType::e4m3, qc::ElementType::e5m2}) {
    if (t == qc::element_type_name(e)) return e;
  }
  QC_FAIL_INPUT("{}.{}: expected int8, e4m3 or e5m2, found `{}`", where, key, t);
}

qc::LayerOperands operands_from_dict(nb::handle obj, const std::string& where) {
  nb::dict d;
  QC_INPUT(nb::try_cast(obj, d, false), "{}: expected a dict with keys name, a_q, a_scale, w_q, w_scale and optional bias, found {}",
           where, nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).attr("__qualname__"))));
  static const std::vector<std::string> known{"name",   "a_q",    "a_scale",   "w_q",          "w_scale", "bias",
                                              "source", "a_type", "w_type", "act_scale", "weight_scale", "ue8m0"};
  for (auto [key, value] : d) {
    std::string k;
    QC_INPUT(nb::try_cast(key, k, false), "{}: keys must be strings", where);
    QC_INPUT(std::find(known.begin(), known.end(), k) != known.end(),
             "{}: unknown key `{}`; expected name, a_q, a_scale, w_q, w_scale, bias (optional), source (optional), "
             "a_type and w_type (optional: int8, e4m3, e5m2), act_scale and weight_scale (optional: per-token, "
             "per-tensor, per-token-group:<g>; per-channel, per-tensor, per-block:<rows>x<cols>), ue8m0 (optional)",
             where, k);
  }
  std::string name;
  QC_INPUT(d.contains("name") && nb::try_cast(d["name"], name, false), "{}: key `name` (a string) is missing", where);
  const std::string lw = fmt::format("{} (`{}`)", where, name);
  const auto field = [&](const char* key) -> nb::object {
    QC_INPUT(d.contains(key) && !d[key].is_none(), "{}: key `{}` is missing", lw, key);
    return d[key];
  };
  const qc::ElementType a_type = element_type_from(d, "a_type", lw), w_type = element_type_from(d, "w_type", lw);
  const auto codes = [](qc::ElementType t) { return t == qc::ElementType::int8 ? Elem::i8 : Elem::code8; };
  auto h = std::make_unique<PyLayerHold>();
  h->a_q = host_array<int8_t>(as_array(field("a_q"), lw + ".a_q"), lw + ".a_q", codes(a_type), {2});
  h->w_q = host_array<int8_t>(as_array(field("w_q"), lw + ".w_q"), lw + ".w_q", codes(w_type), {2});
  h->a_scale = host_array<float>(as_array(field("a_scale"), lw + ".a_scale"), lw + ".a_scale", Elem::f32, {1, 2});
  h->w_scale = host_array<float>(as_array(field("w_scale"), lw + ".w_scale"), lw + ".w_scale", Elem::f32, {1, 2});
  const int64_t m = h->a_q.dim(0), k = h->a_q.dim(1), n = h->w_q.dim(0);
  QC_INPUT(h->w_q.dim(1) == k, "{}.w_q: expected shape [N,{}] (K of a_q [{},{}]), found [{},{}]", lw, k, m, k, n,
           h->w_q.dim(1));
  const auto layout_from = [&](const char* key, bool weights) {
    if (!d.contains(key) || d[key].is_none()) return weights ? qc::ScaleLayout::per_channel() : qc::ScaleLayout::per_token();
    std::string spec;
    QC_INPUT(nb::try_cast(d[key], spec, false), "{}.{}: expected a string such as {}", lw, key,
             weights ? "\"per-block:128x128\"" : "\"per-token-group:128\"");
    return qc::parse_scale_layout(spec, weights, fmt::format("{}.{}", lw, key));
  };
  qc::ScaleLayout a_scaling = layout_from("act_scale", false), w_scaling = layout_from("weight_scale", true);
  if (d.contains("ue8m0") && !d["ue8m0"].is_none()) {
    bool ue8m0 = false;
    QC_INPUT(nb::try_cast(d["ue8m0"], ue8m0, false), "{}.ue8m0: expected True or False", lw);
    a_scaling.ue8m0 = w_scaling.ue8m0 = ue8m0;
  }
  // A per-row vector [R] or [R,1], or the [rows, cols] matrix of a scale per K group / block.
  const auto scale_shape = [&](const HostArray<float>& s, const qc::ScaleLayout& l, int64_t rows, const char* key,
                               const char* dim) {
    const int64_t r = l.scale_rows(rows), c = l.scale_cols(k);
    if (l.k_blocked()) {
      QC_INPUT(s.shape.size() == 2 && s.dim(0) == r && s.dim(1) == c,
               "{}.{}: expected shape [{},{}] ({} scales: ceil({}/{}) by ceil({}/{})), found {}", lw, key, r, c, l.spec(),
               rows, l.block_rows, k, l.block_k, shape_text(s.array));
      return;
    }
    const bool ok = s.shape.size() == 1 ? s.dim(0) == r : (s.dim(0) == r && s.dim(1) == 1);
    QC_INPUT(ok, "{}.{}: expected shape [{}] or [{},1] ({} = {}), found {}{}", lw, key, r, r, dim, r, shape_text(s.array),
             s.shape.size() == 2 && s.dim(1) > 1 ? fmt::format("; a scale per K group or block needs the key `{}`",
                                                              std::string_view(key) == "a_scale" ? "act_scale" : "weight_scale")
                                                  : std::string());
  };
  scale_shape(h->a_scale, a_scaling, m, "a_scale", "M");
  scale_shape(h->w_scale, w_scaling, n, "w_scale", "N");
  if (d.contains("bias") && !d["bias"].is_none()) {
    h->bias = host_array<uint16_t>(as_array(d["bias"], lw + ".bias"), lw + ".bias", Elem::bf16, {1});
    QC_INPUT(h->bias->dim(0) == n, "{}.bias: expected shape [{}] (N), found [{}]", lw, n, h->bias->dim(0));
  }
  std::string source = "python";
  if (d.contains("source") && !d["source"].is_none()) {
    QC_INPUT(nb::try_cast(d["source"], source, false), "{}.source: expected a string", lw);
  }
  qc::LayerOperands ops;
  ops.name = name;
  ops.m = m;
  ops.n = n;
  ops.k = k;
  ops.a_q = h->a_q.data;
  ops.w_q = h->w_q.data;
  ops.a_scale = h->a_scale.data;
  ops.w_scale = h->w_scale.data;
  if (h->bias) ops.bias = h->bias->data;
  ops.source = source;
  ops.a_type = a_type;
  ops.w_type = w_type;
  ops.a_scaling = a_scaling;
  ops.w_scaling = w_scaling;
  ops.keepalive = hold(std::move(h));
  ops.validate();  // an INT8/FP8 mix, NaN/inf codes and scales off their layout are input errors here
  return ops;
}

struct OperandsIn {
  std::vector<qc::LayerOperands> layers;
  std::string path, sha256;
};

// `operands`: a path (str; the Python layer turns PathLike into str) or a sequence of layer dicts.
OperandsIn operands_in(nb::handle operands) {
  OperandsIn in;
  std::string path;
  if (nb::try_cast(operands, path, false)) {
    qc::OperandSet set = qc::load_operands(path);
    in.layers = std::move(set.layers);
    in.path = set.path;
    in.sha256 = set.sha256;
    return in;
  }
  nb::list list;
  QC_INPUT(nb::try_cast(operands, list, false),
           "operands: expected a path to a safetensors operands file or a list of layer dicts, found {}",
           nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(operands.ptr()))).attr("__qualname__"))));
  QC_INPUT(nb::len(list) > 0, "operands: expected at least one layer, found an empty list");
  for (size_t i = 0; i < nb::len(list); ++i) in.layers.push_back(operands_from_dict(list[i], fmt::format("layers[{}]", i)));
  in.path = "<python>";
  return in;
}

// The NumPy shape of an operand's scales: [rows], or [scale rows, scale columns] when they act per K block.
std::vector<size_t> scale_dims(const qc::ScaleLayout& l, int64_t rows, int64_t k) {
  return l.k_blocked() ? std::vector<size_t>{static_cast<size_t>(l.scale_rows(rows)), static_cast<size_t>(l.scale_cols(k))}
                       : std::vector<size_t>{static_cast<size_t>(rows)};
}

nb::dict layer_to_dict(const qc::LayerOperands& l) {
  const size_t m = static_cast<size_t>(l.m), n = static_cast<size_t>(l.n), k = static_cast<size_t>(l.k);
  nb::dict d;
  d["name"] = l.name;
  // FP8 codes come out as uint8 bit patterns (view them as ml_dtypes float8), INT8 codes as int8.
  d["a_q"] = l.fp8() ? numpy_view(l.a_codes(), {m, k}, l.keepalive) : numpy_view(l.a_q, {m, k}, l.keepalive);
  d["a_scale"] = numpy_view(l.a_scale, scale_dims(l.a_scaling, l.m, l.k), l.keepalive);
  d["w_q"] = l.fp8() ? numpy_view(l.w_codes(), {n, k}, l.keepalive) : numpy_view(l.w_q, {n, k}, l.keepalive);
  d["w_scale"] = numpy_view(l.w_scale, scale_dims(l.w_scaling, l.n, l.k), l.keepalive);
  d["bias"] = l.has_bias() ? numpy_view(l.bias, {n}, l.keepalive) : nb::none();
  d["source"] = l.source;
  d["a_type"] = std::string(qc::element_type_name(l.a_type));
  d["w_type"] = std::string(qc::element_type_name(l.w_type));
  d["act_scale"] = l.a_scaling.spec();
  d["weight_scale"] = l.w_scaling.spec();
  d["ue8m0"] = l.a_scaling.ue8m0 && l.w_scaling.ue8m0;
  return d;
}

// ---- calling into the core with the GIL released ------------------------------------------------

// A Python exception raised inside a Python arm, parked (GIL held) while the C++ stack unwinds
// without the GIL, and raised again once the binding holds the GIL. A `nb::python_error` must not
// cross code that runs without the GIL: copying or destroying it touches reference counts.
PyObject* g_pending_exception = nullptr;
struct PendingPythonError {};

[[noreturn]] void reraise_pending() {
  PyObject* exc = g_pending_exception;
  g_pending_exception = nullptr;
  QC_CHECK(exc != nullptr, "a Python arm failed but no Python exception was parked");
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(exc));
  Py_INCREF(type);
  PyErr_Restore(type, exc, PyException_GetTraceback(exc));  // steals the three references
  throw nb::python_error();
}

template <class F>
auto without_gil(F&& f) {
  try {
    nb::gil_scoped_release nogil;
    return f();
  } catch (const PendingPythonError&) {
    reraise_pending();
  }
}

// ---- arms ----------------------------------------------------------------------------------------------

nb::dict info_to_dict(const qc::ArmInfo& i) {
  nb::dict d;
  d["label"] = i.label;
  d["description"] = i.description;
  d["epilogue"] = i.epilogue;
  d["exposes_accumulator"] = i.exposes_accumulator;
  d["is_mutant"] = i.is_mutant;
  d["breaks_stage"] = i.breaks_stage;
  d["accumulation_model"] = i.accumulation_model;  // FP8 arms: the declared model (docs/accumulation.md); "" otherwise
  d["element"] = std::string(qc::element_type_name(i.element));  // "e4m3" for every FP8 arm, declared or not
  d["fp8"] = i.fp8();
  d["unscaled_entry"] = i.offers_unscaled();
  d["block_size"] = nb::make_tuple(i.block_n, i.block_k);  // block-scaled arms: the scale block they take ((0, 0): any)
  d["block_scaled"] = i.block();  // takes block-scaled layers (a block model declared, or undeclared)
  return d;
}

nb::object record_to_py(const qc::RunRecord& r) {
  nlohmann::json j;
  qc::to_json(j, r);
  return json_to_py(j);
}

std::string type_qualname(nb::handle obj) {
  return nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).attr("__qualname__")));
}

// What a Python callable is (`qconform.arm`, which reads it from the callable's signature and the
// arguments given): an INT8 kernel `fn(a_q, a_scale, w_q, w_scale, bias) -> y`; an FP8 GEMM
// `fn(a, w) -> d` (the unscaled fp32 result; qconform applies `fp8-scaled`); or an FP8 kernel with the
// INT8 signature over e4m3 codes, scales in and bf16 out (its epilogue its own), optionally with its
// unscaled GEMM beside it (`accumulate=`).
enum class PyArmKind { int8, fp8_gemm, fp8_kernel, fp8_block };

PyArmKind py_arm_kind(const std::string& kind) {
  if (kind == "int8") return PyArmKind::int8;
  if (kind == "fp8-gemm") return PyArmKind::fp8_gemm;
  if (kind == "fp8-block") return PyArmKind::fp8_block;
  QC_INPUT(kind == "fp8-kernel", "python_arm: kind: expected int8, fp8-gemm, fp8-kernel or fp8-block, found `{}`", kind);
  return PyArmKind::fp8_kernel;
}

// An arm whose kernel is a Python callable (`PyArmKind`). The operands reach `fn` as read-only NumPy
// views (no copy; FP8 codes as uint8 bit patterns); `normalize(obj)` (from the Python layer) turns
// torch tensors and ml_dtypes arrays into NumPy arrays that nanobind can read; then the output is
// checked strictly: [M,N] bf16, [M,N] int32 for an INT8 kernel's accumulator, [M,N] float32 for d.
class PythonArm final : public qc::Arm {
 public:
  PythonArm(nb::callable fn, nb::object accumulate, nb::callable normalize, qc::ArmInfo info, qc::RunRecord record,
            PyArmKind kind)
      : fn_(std::move(fn)), accumulate_(std::move(accumulate)), normalize_(std::move(normalize)), info_(std::move(info)),
        record_(std::move(record)), kind_(kind) {
    if (kind_ == PyArmKind::fp8_block) {
      // A block-scaled FP8 callable: d = fn(a, w, a_scale, w_scale, block_size) is its fp32 D, which
      // qconform rounds to bf16 (RNE) and exposes to verify; the block model must be one qconform knows.
      (void)qc::fp8_block_model(info_.accumulation_model);
      QC_INPUT(info_.epilogue.empty() && !info_.exposes_accumulator,
               "arm `{}`: a block-scaled FP8 callable (accumulation_model=\"{}\") returns its fp32 D, which qconform "
               "rounds to bf16; expected no epilogue and exposes_accumulator=False, found epilogue \"{}\" and "
               "exposes_accumulator={}",
               info_.label, info_.accumulation_model, info_.epilogue, info_.exposes_accumulator);
      info_.element = qc::ElementType::e4m3;
      return;
    }
    if (info_.block()) {
      // A block-scaled FP8 kernel of the INT8 signature (its y is bf16): a declared block model is one
      // qconform knows, and the scales and the bf16 rounding are the model's: no epilogue of its own.
      QC_INPUT(kind_ == PyArmKind::fp8_kernel && info_.epilogue.empty() && !info_.exposes_accumulator &&
                   (accumulate_.is_none() || !accumulate_.is_valid()),
               "arm `{}`: a block-scaled FP8 kernel fn(a_q, a_scale, w_q, w_scale, bias) -> y (block_size with "
               "element=\"e4m3\") takes no epilogue, exposes_accumulator or accumulate: its scales act inside the "
               "accumulation",
               info_.label);
      if (!info_.accumulation_model.empty()) (void)qc::fp8_block_model(info_.accumulation_model);
      info_.element = qc::ElementType::e4m3;
      return;
    }
    if (!info_.accumulation_model.empty()) {
      // A declared model must be one qconform can evaluate (unknown names: InputError listing them).
      (void)qc::fp8_accumulation_model(info_.accumulation_model);
    }
    if (kind_ == PyArmKind::int8) {
      if (!info_.epilogue.empty()) {
        const qc::Epilogue& e = qc::epilogue(info_.epilogue);  // unknown names: InputError listing the valid ones
        QC_INPUT(e.name != qc::fp8_epilogue().name && !(e.kind == qc::EpilogueKind::point && e.space.input == qc::FormulaInput::fp32),
                 "arm `{}`: epilogue: \"{}\" is an FP8 formula (over d); an INT8 callable's epilogue is written over acc, "
                 "or pass element=\"e4m3\" for an FP8 kernel",
                 info_.label, info_.epilogue);
      }
      return;
    }
    info_.element = qc::ElementType::e4m3;
    QC_INPUT(!info_.exposes_accumulator,
             "arm `{}`: exposes_accumulator=True: an FP8 callable has no INT32 accumulator; expected "
             "exposes_accumulator=False (an FP8 kernel offers its fp32 GEMM as accumulate=fn(a, w) -> d)",
             info_.label);
    const std::string fp8 = std::string(qc::fp8_epilogue().name);
    if (kind_ == PyArmKind::fp8_gemm) {
      // The callable returns the unscaled fp32 GEMM; qconform applies the FP8 epilogue, as every FP8 arm does.
      QC_INPUT(info_.epilogue.empty() || info_.epilogue == fp8,
               "arm `{}`: epilogue: an FP8 callable fn(a, w) -> d returns the unscaled fp32 GEMM and qconform applies the "
               "`{}` epilogue; expected no epilogue or \"{}\", found \"{}\" (a kernel with its own epilogue takes "
               "fn(a_q, a_scale, w_q, w_scale, bias) -> y)",
               info_.label, fp8, fp8, info_.epilogue);
      info_.epilogue = fp8;
      record_.epilogue = fp8;
      info_.unscaled_entry = true;
      return;
    }
    // An FP8 kernel: its epilogue is its own, declared (a formula over the fp32 `d`) or not.
    if (!info_.epilogue.empty()) {
      const qc::Epilogue& e = qc::epilogue(info_.epilogue);
      QC_INPUT(e.name == fp8 || (e.kind == qc::EpilogueKind::point && e.space.input == qc::FormulaInput::fp32),
               "arm `{}`: epilogue: \"{}\" is a formula over an integer accumulator; an FP8 kernel's epilogue is written "
               "over the fp32 GEMM result d, e.g. \"bf16(rn32(rn32(d * sa) * sw))\"",
               info_.label, info_.epilogue);
    }
    info_.unscaled_entry = accumulate_.is_valid() && !accumulate_.is_none();
  }

  qc::ArmInfo info() const override { return info_; }

  qc::ArmOutput run(const qc::LayerOperands& ops) override {
    // An INT8 callable refuses FP8 layers, as the built-in INT8 arms do.
    qc::check_arm_takes_layer(info_, ops);
    const std::string context = fmt::format("layer `{}` ({}x{}x{})", ops.name, ops.m, ops.n, ops.k);
    return guarded(context, context, [&] {
      if (kind_ == PyArmKind::fp8_block) return run_block_with_gil(ops);
      if (kind_ == PyArmKind::fp8_gemm) return run_fp8_with_gil(ops);
      return run_with_gil(ops);
    });
  }

  // FP8 callables: d = fn(a, w) (an FP8 GEMM) or accumulate(a, w) (an FP8 kernel's unscaled entry),
  // a [m,k] and w [n,k] e4m3 codes (uint8), d float32 [m,n].
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int /*threads*/) override {
    if (kind_ == PyArmKind::int8) return qc::Arm::fp8_accumulate(a, w, m, n, k, record, 0);  // the INT8 refusal
    QC_INPUT(kind_ != PyArmKind::fp8_block,
             "arm `{}` is a block-scaled FP8 callable (block model {}): its accumulation takes scales, so it has no "
             "unscaled fp8_accumulate; `run` it on a block-scaled layer (`boundary` measures it at unit scales that way)",
             info_.label, info_.accumulation_model);
    QC_INPUT(info_.unscaled_entry,
             "arm `{}` is an FP8 kernel fn(a_q, a_scale, w_q, w_scale, bias) -> y without an unscaled entry; pass "
             "accumulate=fn(a, w) -> d to qconform.arm to offer its fp32 GEMM",
             info_.label);
    const std::string context = fmt::format("FP8 GEMM {}x{}x{}", m, n, k);
    std::vector<float> d = guarded(context, context, [&] {
      const size_t mm = static_cast<size_t>(m), nn = static_cast<size_t>(n), kk = static_cast<size_t>(k);
      // Copies: the callable may keep its arguments; the caller's buffers are only borrowed.
      nb::object av = numpy_from_vector(std::vector<uint8_t>(a, a + m * k), {mm, kk});
      nb::object wv = numpy_from_vector(std::vector<uint8_t>(w, w + n * k), {nn, kk});
      return call_fp8(av, wv, m, n, fmt::format("arm `{}` on an FP8 GEMM {}x{}x{}", info_.label, m, n, k));
    });
    record = {{"arm", info_.label}, {"kernel", record_.kernel}};
    if (!info_.accumulation_model.empty()) {
      record["accumulation_model"] = info_.accumulation_model;
      record["accumulation_formula"] = qc::declared_model_formula(info_.accumulation_model);
      record["accumulation_model_declared_by"] = "the Python callable (its declaration, not a measurement)";
    }
    return d;
  }

 private:
  // Runs `f` with the GIL; turns a `qconform.InputError` raised by the callable into the C++ input
  // error, and parks any other Python exception with a note naming the arm and `what`.
  template <class F>
  auto guarded(const std::string& refused_what, const std::string& what, F&& f) -> decltype(f()) {
    nb::gil_scoped_acquire gil;
    try {
      return f();
    } catch (nb::python_error& e) {
      // A callable refuses operands it cannot take (a bias, a shape) as the built-in arms do, by
      // raising `qconform.InputError`: that becomes the C++ input error the checks expect (identify
      // reads a refused bias as "this kernel takes no bias").
      if (PyErr_GivenExceptionMatches(e.type().ptr(), g_input_error)) {
        const std::string message = nb::str(e.value()).c_str();
        throw qc::Error(qc::ErrorKind::input, fmt::format("arm `{}` refuses {}: {}", info_.label, refused_what, message),
                        __FILE__, __LINE__, "qconform.InputError raised by the callable");
      }
      // Park the exception (see `reraise_pending`), with a note naming the arm and the layer.
      nb::object value = nb::borrow(e.value());
      if (nb::hasattr(value, "add_note")) {
        value.attr("add_note")(fmt::format("raised by the Python callable of qconform arm `{}` on {}", info_.label, what));
      }
      Py_XDECREF(g_pending_exception);
      g_pending_exception = value.release().ptr();
      throw PendingPythonError{};
    }
  }

  // d = fn(a, w) (or accumulate(a, w)) checked: float32 [m, n].
  std::vector<float> call_fp8(nb::handle a, nb::handle w, int64_t m, int64_t n, const std::string& who) {
    nb::object result = kind_ == PyArmKind::fp8_kernel ? accumulate_(a, w) : fn_(a, w);
    const std::string what = who + ": output d (the unscaled fp32 GEMM)";
    const HostArray<float> d = host_array<float>(as_array(normalize_(result), what), what, Elem::f32, {2});
    QC_INPUT(d.dim(0) == m && d.dim(1) == n, "{}: expected shape [{},{}] (M,N), found {}", what, m, n, shape_text(d.array));
    return std::vector<float>(d.data.begin(), d.data.end());
  }

  // The e4m3 codes an FP8 callable receives for a layer: an FP8 layer's own, or an INT8 layer's codes
  // re-encoded exactly (`fp8_layer_codes`).
  qc::Fp8LayerCodes e4m3_codes(const qc::LayerOperands& ops) const {
    ops.validate();
    qc::Fp8LayerCodes codes = qc::fp8_layer_codes(info_.label, ops);
    QC_INPUT(codes.a_format == qc::Fp8Format::e4m3 && codes.w_format == qc::Fp8Format::e4m3,
             "arm `{}`: layer `{}`: e5m2 operands: a Python FP8 callable receives e4m3 codes only", info_.label, ops.name);
    return codes;
  }

  // An FP8 GEMM callable on a layer: its codes, d = fn(a, w), then the FP8 epilogue.
  qc::ArmOutput run_fp8_with_gil(const qc::LayerOperands& ops) {
    QC_INPUT(!ops.has_bias(), "arm `{}`: layer `{}`: an FP8 GEMM callable fn(a, w) -> d takes no bias (qconform's "
             "`fp8-scaled` epilogue adds none)", info_.label, ops.name);
    const qc::Fp8LayerCodes codes = e4m3_codes(ops);
    const size_t m = static_cast<size_t>(ops.m), n = static_cast<size_t>(ops.n), k = static_cast<size_t>(ops.k);
    nb::object av = numpy_from_vector(std::vector<uint8_t>(codes.a.begin(), codes.a.end()), {m, k});
    nb::object wv = numpy_from_vector(std::vector<uint8_t>(codes.w.begin(), codes.w.end()), {n, k});
    const std::vector<float> d = call_fp8(av, wv, ops.m, ops.n, fmt::format("arm `{}` on layer `{}`", info_.label, ops.name));
    qc::ArmOutput out;
    out.y.resize(d.size());
    qc::apply_epilogue(qc::fp8_epilogue(), d.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, ops.m, ops.n,
                       out.y.data());
    out.record = record_;
    out.record.arm = info_.label;
    if (!info_.accumulation_model.empty()) {
      out.record.extra["accumulation_model"] = info_.accumulation_model;
      out.record.extra["accumulation_model_declared_by"] = "the Python callable (its declaration, not a measurement)";
    }
    out.record.extra["operands"] = codes.description;
    return out;
  }

  // A block-scaled FP8 callable on a block-scaled layer: d = fn(a, w, a_scale, w_scale, block_size) with
  // the e4m3 codes (uint8), the scales in their layouts (a_scale [M, ceil(K/g)] or [M]; w_scale
  // [ceil(N/b_n), ceil(K/b_k)] or [N]) and block_size = [b_n, b_k] (vLLM's `w8a8_block_fp8_matmul`
  // order); d float32 [M, N] is the kernel's fp32 D, rounded here to bf16 (RNE) and exposed as `ArmOutput::d`.
  qc::ArmOutput run_block_with_gil(const qc::LayerOperands& ops) {
    QC_INPUT(!ops.has_bias(), "arm `{}`: layer `{}`: the FP8 arms take no bias (not modelled)", info_.label, ops.name);
    const qc::Fp8LayerCodes codes = e4m3_codes(ops);
    struct {
      nb::object a, w;
    } in{numpy_from_vector(std::vector<uint8_t>(codes.a.begin(), codes.a.end()),
                           {static_cast<size_t>(ops.m), static_cast<size_t>(ops.k)}),
         numpy_from_vector(std::vector<uint8_t>(codes.w.begin(), codes.w.end()),
                           {static_cast<size_t>(ops.n), static_cast<size_t>(ops.k)})};
    nb::object sa = numpy_from_vector(std::vector<float>(ops.a_scale.begin(), ops.a_scale.end()),
                                      scale_dims(ops.a_scaling, ops.m, ops.k));
    nb::object sw = numpy_from_vector(std::vector<float>(ops.w_scale.begin(), ops.w_scale.end()),
                                      scale_dims(ops.w_scaling, ops.n, ops.k));
    const int64_t block_n = ops.w_scaling.granularity == qc::ScaleGranularity::per_block ? ops.w_scaling.block_rows : 1;
    nb::list block_size;
    block_size.append(block_n);
    block_size.append(ops.scale_block_k());
    const std::string who = fmt::format("arm `{}` on layer `{}`", info_.label, ops.name);
    nb::object result = fn_(in.a, in.w, sa, sw, block_size);
    const std::string what = who + ": output d (the block-scaled fp32 D)";
    const HostArray<float> d = host_array<float>(as_array(normalize_(result), what), what, Elem::f32, {2});
    QC_INPUT(d.dim(0) == ops.m && d.dim(1) == ops.n, "{}: expected shape [{},{}] (M,N), found {}", what, ops.m, ops.n,
             shape_text(d.array));
    qc::ArmOutput out;
    out.d = std::vector<float>(d.data.begin(), d.data.end());
    out.y.resize(out.d->size());
    for (size_t i = 0; i < out.y.size(); ++i) out.y[i] = qc::f32_to_bf16((*out.d)[i]);
    out.record = record_;
    out.record.arm = info_.label;
    out.record.extra["accumulation_model"] = info_.accumulation_model;
    out.record.extra["accumulation_model_declared_by"] = "the Python callable (its declaration, not a measurement)";
    out.record.extra["operands"] = codes.description;
    out.record.extra["scales"] = ops.scaling_description();
    return out;
  }

 public:
  nb::callable callable() const { return fn_; }

 private:
  // The INT8 signature fn(a_q, a_scale, w_q, w_scale, bias): int8 codes for an INT8 kernel, the
  // layer's e4m3 codes (uint8 bit patterns) for an FP8 kernel.
  qc::ArmOutput run_with_gil(const qc::LayerOperands& ops) {
    const size_t m = static_cast<size_t>(ops.m), n = static_cast<size_t>(ops.n), k = static_cast<size_t>(ops.k);
    std::optional<qc::Fp8LayerCodes> codes;
    nb::object a_q, w_q;
    if (kind_ == PyArmKind::fp8_kernel) {
      codes.emplace(e4m3_codes(ops));
      a_q = numpy_from_vector(std::vector<uint8_t>(codes->a.begin(), codes->a.end()), {m, k});
      w_q = numpy_from_vector(std::vector<uint8_t>(codes->w.begin(), codes->w.end()), {n, k});
    } else {
      a_q = numpy_view(ops.a_q, {m, k}, ops.keepalive);
      w_q = numpy_view(ops.w_q, {n, k}, ops.keepalive);
    }
    // Scales in their layouts: [M] / [N], or a block-scaled layer's [M, ceil(K/g)] / [ceil(N/b_n), ceil(K/b_k)].
    nb::object a_scale = numpy_view(ops.a_scale, scale_dims(ops.a_scaling, ops.m, ops.k), ops.keepalive);
    nb::object w_scale = numpy_view(ops.w_scale, scale_dims(ops.w_scaling, ops.n, ops.k), ops.keepalive);
    nb::object bias = ops.has_bias() ? numpy_view(ops.bias, {n}, ops.keepalive) : nb::none();
    nb::object result = fn_(a_q, a_scale, w_q, w_scale, bias);

    const std::string who = fmt::format("arm `{}` on layer `{}`", info_.label, ops.name);
    nb::object y_obj = result, acc_obj;
    if (info_.exposes_accumulator) {
      nb::tuple t;
      QC_INPUT(nb::try_cast(result, t, false) && nb::len(t) == 2,
               "{}: the callable declares exposes_accumulator=True, so it must return a tuple (y, acc); found {}", who,
               type_qualname(result));
      y_obj = t[0];
      acc_obj = t[1];
    }
    qc::ArmOutput out;
    {
      const std::string what = who + ": output y";
      const HostArray<uint16_t> y =
          host_array<uint16_t>(as_array(normalize_(y_obj), what), what, Elem::bf16, {2});
      QC_INPUT(y.dim(0) == ops.m && y.dim(1) == ops.n, "{}: expected shape [{},{}] (M,N), found {}", what, ops.m, ops.n,
               shape_text(y.array));
      out.y.assign(y.data.begin(), y.data.end());
    }
    if (acc_obj.is_valid()) {
      const std::string what = who + ": output acc";
      const HostArray<int32_t> acc =
          host_array<int32_t>(as_array(normalize_(acc_obj), what), what, Elem::i32, {2});
      QC_INPUT(acc.dim(0) == ops.m && acc.dim(1) == ops.n, "{}: expected shape [{},{}] (M,N), found {}", what, ops.m,
               ops.n, shape_text(acc.array));
      out.acc = std::vector<int32_t>(acc.data.begin(), acc.data.end());
    }
    out.record = record_;
    out.record.arm = info_.label;
    out.record.epilogue = info_.epilogue;
    if (codes) {
      out.record.extra["operands"] = codes->description;
      if (!info_.accumulation_model.empty()) {
        out.record.extra["accumulation_model"] = info_.accumulation_model;
        out.record.extra["accumulation_model_declared_by"] = "the Python callable (its declaration, not a measurement)";
      }
    }
    return out;
  }

  nb::callable fn_;
  nb::object accumulate_;  // an FP8 kernel's unscaled entry, or None
  nb::callable normalize_;
  qc::ArmInfo info_;
  qc::RunRecord record_;
  PyArmKind kind_;
};

}  // namespace

namespace {

// qconform.Error and its three kinds, and the translation of the core's errors into them.
void bind_errors(nb::module_& m) {
  g_error = PyErr_NewExceptionWithDoc("qconform.Error",
                                      "An error reported by qconform's C++ core (message as the CLI prints it).",
                                      PyExc_Exception, nullptr);
  {
    PyObject* bases = PyTuple_Pack(2, g_error, PyExc_ValueError);
    g_input_error = PyErr_NewExceptionWithDoc("qconform.InputError",
                                              "Bad input or usage: the message names the argument or file, the field, "
                                              "what was expected and what was found.",
                                              bases, nullptr);
    Py_DECREF(bases);
    bases = PyTuple_Pack(2, g_error, PyExc_RuntimeError);
    g_internal_error = PyErr_NewExceptionWithDoc("qconform.InternalError",
                                                 "A broken invariant inside qconform (a bug: please report it).", bases,
                                                 nullptr);
    Py_DECREF(bases);
    bases = PyTuple_Pack(2, g_error, PyExc_RuntimeError);
    g_arm_failure = PyErr_NewExceptionWithDoc(
        "qconform.ArmFailure",
        "An arm failed while running (an isolated plugin crashed, hung, exited or wrote into its inputs): the "
        "message names the arm and the layer; qconform itself is intact.",
        bases, nullptr);
    Py_DECREF(bases);
  }
  m.attr("Error") = nb::borrow(g_error);
  m.attr("InputError") = nb::borrow(g_input_error);
  m.attr("InternalError") = nb::borrow(g_internal_error);
  m.attr("ArmFailure") = nb::borrow(g_arm_failure);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const qc::Error& e) {
      raise_qc_error(e);
    } catch (const PendingPythonError&) {
      // Reached only if a core call escaped `without_gil` (it should not): restore the exception.
      PyObject* exc = g_pending_exception;
      g_pending_exception = nullptr;
      if (exc) {
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
        Py_DECREF(exc);
      } else {
        PyErr_SetString(g_internal_error, "a Python arm failed and its exception was lost");
      }
    }
  });
}

// The exact accumulator, the FP8 models, comparison.
void bind_accumulation(nb::module_& m) {
  // ---- accumulation, epilogues, comparison ----
  m.def(
      "exact_accumulate",
      [](AnyArray a_arr, AnyArray w_arr, std::optional<bool> wide, int threads) -> nb::object {
        const HostArray<int8_t> a = host_array<int8_t>(a_arr, "a_q", Elem::i8, {2});
        const HostArray<int8_t> w = host_array<int8_t>(w_arr, "w_q", Elem::i8, {2});
        QC_INPUT(a.dim(1) == w.dim(1), "w_q: expected shape [N,{}] (K of a_q {}), found {}", a.dim(1),
                 shape_text(a.array), shape_text(w.array));
        const qc::AccumShape s{a.dim(0), w.dim(0), a.dim(1)};
        const bool use_wide = wide.value_or(s.k > qc::kAccumMaxKInt32);
        QC_INPUT(use_wide || s.k <= qc::kAccumMaxKInt32,
                 "wide=False: K = {} exceeds {}, the largest K for which an INT32 accumulator provably cannot "
                 "overflow; use wide=True (int64)",
                 s.k, qc::kAccumMaxKInt32);
        const std::vector<size_t> shape{static_cast<size_t>(s.m), static_cast<size_t>(s.n)};
        if (use_wide) {
          std::vector<int64_t> acc(static_cast<size_t>(s.m * s.n));
          without_gil([&] { qc::exact_accumulate_i64(a.data.data(), w.data.data(), s, acc.data(), threads); });
          return numpy_from_vector(std::move(acc), shape);
        }
        std::vector<int32_t> acc(static_cast<size_t>(s.m * s.n));
        without_gil([&] { qc::exact_accumulate_i32(a.data.data(), w.data.data(), s, acc.data(), threads); });
        return numpy_from_vector(std::move(acc), shape);
      },
      "a_q"_a, "w_q"_a, "wide"_a = nb::none(), "threads"_a = 0);

  m.def(
      "apply_epilogue",
      [](const std::string& name, AnyArray acc_arr, AnyArray sa_arr, AnyArray sw_arr, std::optional<AnyArray> bias_arr,
         int threads) -> nb::object {
        const qc::Epilogue& e = qc::epilogue(name);
        const bool wide = acc_arr.dtype() == nb::dtype<int64_t>();
        const bool fp32 = acc_arr.dtype() == nb::dtype<float>();  // an FP8 GEMM's d (an FP8 formula, `fp8-scaled`)
        const HostArray<float> sa = host_array<float>(sa_arr, "a_scale", Elem::f32, {1});
        const HostArray<float> sw = host_array<float>(sw_arr, "w_scale", Elem::f32, {1});
        const int64_t M = sa.dim(0), N = sw.dim(0);
        std::optional<HostArray<uint16_t>> bias;
        if (bias_arr) {
          bias = host_array<uint16_t>(*bias_arr, "bias", Elem::bf16, {1});
          QC_INPUT(bias->dim(0) == N, "bias: expected shape [{}] (N of w_scale), found {}", N, shape_text(bias->array));
        }
        const uint16_t* b = bias ? bias->data.data() : nullptr;
        std::vector<uint16_t> y(static_cast<size_t>(M * N));
        const auto check_acc_shape = [&](const auto& acc) {
          QC_INPUT(acc.dim(0) == M && acc.dim(1) == N, "acc: expected shape [{},{}] (len(a_scale), len(w_scale)), found {}",
                   M, N, shape_text(acc.array));
        };
        if (fp32) {
          const HostArray<float> acc = host_array<float>(acc_arr, "acc", Elem::f32, {2});
          check_acc_shape(acc);
          without_gil([&] { qc::apply_epilogue(e, acc.data.data(), sa.data.data(), sw.data.data(), b, M, N, y.data(), threads); });
        } else if (wide) {
          const HostArray<int64_t> acc = host_array<int64_t>(acc_arr, "acc", Elem::i64, {2});
          check_acc_shape(acc);
          without_gil([&] { qc::apply_epilogue(e, acc.data.data(), sa.data.data(), sw.data.data(), b, M, N, y.data(), threads); });
        } else {
          const HostArray<int32_t> acc = host_array<int32_t>(acc_arr, "acc", Elem::i32, {2});
          check_acc_shape(acc);
          without_gil([&] { qc::apply_epilogue(e, acc.data.data(), sa.data.data(), sw.data.data(), b, M, N, y.data(), threads); });
        }
        return numpy_from_vector(std::move(y), {static_cast<size_t>(M), static_cast<size_t>(N)});
      },
      "name"_a, "acc"_a, "a_scale"_a, "w_scale"_a, "bias"_a = nb::none(), "threads"_a = 0);

  m.def(
      "quantize_activations",
      [](AnyArray x_arr, const std::string& quantizer, std::optional<float> static_scale) -> nb::tuple {
        const qc::ActQuantizer kind = qc::act_quantizer(quantizer);
        QC_INPUT(kind != qc::ActQuantizer::static_ || static_scale, "quantizer `static`: expected static_scale, found none");
        const float* s = static_scale ? &*static_scale : nullptr;
        const bool f32 = elem_matches(Elem::f32, x_arr.dtype());
        std::vector<int8_t> q;
        std::vector<float> scales;
        int64_t M = 0, K = 0;
        const auto sized = [&](int64_t m, int64_t k) {
          M = m, K = k;
          q.resize(static_cast<size_t>(M * K));
          scales.resize(static_cast<size_t>(M));
        };
        if (f32) {
          const HostArray<float> x = host_array<float>(x_arr, "x", Elem::f32, {2});
          sized(x.dim(0), x.dim(1));
          without_gil([&] { qc::quantize_activations(kind, x.data.data(), M, K, q.data(), scales.data(), s); });
        } else {
          const HostArray<uint16_t> x = host_array<uint16_t>(x_arr, "x", Elem::bf16, {2});
          sized(x.dim(0), x.dim(1));
          without_gil([&] { qc::quantize_activations_bf16(kind, x.data.data(), M, K, q.data(), scales.data(), s); });
        }
        return nb::make_tuple(numpy_from_vector(std::move(q), {static_cast<size_t>(M), static_cast<size_t>(K)}),
                              numpy_from_vector(std::move(scales), {static_cast<size_t>(M)}));
      },
      "x"_a, "quantizer"_a = "vllm", "static_scale"_a = nb::none());
}

// The epilogue formulas.
void bind_epilogues(nb::module_& m) {
  m.def("epilogues", [] {
    nb::list out;
    for (const qc::Epilogue& e : qc::all_epilogues()) {
      nb::dict d;
      d["name"] = std::string(e.name);
      d["formula"] = std::string(e.formula);
      d["source"] = std::string(e.source);
      d["accepts_bias"] = e.accepts_bias();
      d["bias_after_rounding"] = e.bias_after_rounding();
      out.append(d);
    }
    return out;
  });

  m.def(
      "compare",
      [](AnyArray a_arr, AnyArray b_arr, const std::string& layer, double near_zero_fraction, size_t max_listed) {
        const HostArray<uint16_t> a = host_array<uint16_t>(a_arr, "a", Elem::bf16, {1, 2});
        const HostArray<uint16_t> b = host_array<uint16_t>(b_arr, "b", Elem::bf16, {1, 2});
        QC_INPUT(a.shape == b.shape, "b: expected the shape of a {}, found {}", shape_text(a.array), shape_text(b.array));
        const int64_t rows = a.shape.size() == 2 ? a.dim(0) : 1;
        const int64_t cols = a.shape.size() == 2 ? a.dim(1) : a.dim(0);
        qc::CompareOptions o;
        o.near_zero_fraction = near_zero_fraction;
        o.max_listed = max_listed;
        nlohmann::json j;
        without_gil([&] { qc::to_json(j, qc::compare_bf16(a.data, b.data, rows, cols, layer, o)); });
        return json_to_py(j);
      },
      "a"_a, "b"_a, "layer"_a = "", "near_zero_fraction"_a = 1e-2, "max_listed"_a = 10);
}

// Arms: the C++ ones, Python callables, plugins.
void bind_arms(nb::module_& m) {
  // ---- arms ----
  nb::class_<qc::Arm>(m, "Arm", "One implementation of the scaled-INT8 linear layer (C++ or a Python callable).")
      .def_prop_ro("info", [](const qc::Arm& a) { return info_to_dict(a.info()); })
      .def_prop_ro("label", [](const qc::Arm& a) { return a.info().label; })
      .def(
          "run",
          [](qc::Arm& a, nb::handle layer) {
            const qc::LayerOperands ops = operands_from_dict(layer, "layer");
            qc::ArmOutput out = without_gil([&] { return a.run(ops); });
            QC_INPUT(static_cast<int64_t>(out.y.size()) == ops.m * ops.n, "arm {} returned {} outputs, expected {}x{}",
                     a.info().label, out.y.size(), ops.m, ops.n);
            nb::dict d;
            const std::vector<size_t> shape{static_cast<size_t>(ops.m), static_cast<size_t>(ops.n)};
            d["y"] = numpy_from_vector(std::move(out.y), shape);
            d["acc"] = out.acc ? numpy_from_vector(std::move(*out.acc), shape) : nb::none();
            // Block-scaled FP8 arms: the fp32 accumulator D that `y` was rounded from (None when not exposed).
            d["d"] = out.d ? numpy_from_vector(std::move(*out.d), shape) : nb::none();
            d["record"] = record_to_py(out.record);
            return d;
          },
          "layer"_a)
      .def(
          "fp8_accumulate",
          [](qc::Arm& arm, nb::handle a_obj, nb::handle w_obj, int threads) {
            const HostArray<uint8_t> a = host_array<uint8_t>(as_array(a_obj, "a"), "a", Elem::u8, {2});
            const HostArray<uint8_t> w = host_array<uint8_t>(as_array(w_obj, "w"), "w", Elem::u8, {2});
            QC_INPUT(a.dim(1) == w.dim(1), "w: expected [N,K] with K = {} (the columns of a), found {}", a.dim(1),
                     shape_text(w.array));
            QC_INPUT(threads >= 0, "threads: expected 0 (all cores) or a positive count, found {}", threads);
            const int64_t M = a.dim(0), N = w.dim(0), K = a.dim(1);
            // The FP8 models take finite codes only: refuse a NaN code here, naming it, for every arm.
            qc::validate_fp8_gemm(qc::Fp8AccumModel{}, qc::Fp8Gemm{a.data.data(), qc::Fp8Format::e4m3, w.data.data(),
                                                                     qc::Fp8Format::e4m3, {M, N, K}});
            nlohmann::json record;
            std::vector<float> d = without_gil([&] { return arm.fp8_accumulate(a.data.data(), w.data.data(), M, N, K, record, threads); });
            QC_INPUT(static_cast<int64_t>(d.size()) == M * N, "arm {} returned {} outputs, expected {}x{}", arm.info().label,
                     d.size(), M, N);
            nb::dict out;
            out["d"] = numpy_from_vector(std::move(d), {static_cast<size_t>(M), static_cast<size_t>(N)});
            out["record"] = json_to_py(record);
            return out;
          },
          "a"_a, "w"_a, "threads"_a = 0)
      .def("__repr__", [](const qc::Arm& a) { return fmt::format("<qconform.Arm {}>", a.info().label); });

  nb::class_<PythonArm, qc::Arm>(m, "PythonArm", "An arm whose kernel is a Python callable.")
      .def_prop_ro("callable", &PythonArm::callable);

  m.def("make_arm", [](const std::string& label) { return qc::make_arm(label); }, "label"_a);
  m.def("list_arms", [] { return qc::list_arms(); });
  m.def(
      "python_arm",
      [](nb::callable fn, nb::callable normalize, const std::string& label, const std::string& kernel,
         const std::string& epilogue, bool exposes_accumulator, const std::string& description,
         const std::string& device, const std::string& library, const std::string& build,
         const std::string& accumulation_model, const std::string& kind, nb::object accumulate, int64_t block_n, int64_t block_k) {
        qc::ArmInfo info;
        info.label = label;
        info.accumulation_model = accumulation_model;
        QC_INPUT(block_n >= 0 && block_k >= 0, "block_size: expected non-negative (rows, cols), found ({}, {})", block_n,
                 block_k);
        // A block size marks a block-scaled callable: one that declares a block model (fn(a, w, a_scale, w_scale,
        // block_size) -> d), or an FP8 kernel with the INT8 signature that declares none (its blocks, chain and
        // promotion form measured by identify).
        const bool block_kernel = kind == "fp8-kernel" && block_n > 0 && block_k > 0;
        const bool undeclared_block = block_kernel && accumulation_model.empty();
        QC_INPUT((block_n == 0 && block_k == 0) || qc::is_block_model_name(accumulation_model) || undeclared_block,
                 "block_size: only a block-scaled FP8 callable takes one: accumulation_model=\"block-...\" (fn(a, w, "
                 "a_scale, w_scale, block_size) -> d), or element=\"e4m3\" with a kernel fn(a_q, a_scale, w_q, "
                 "w_scale, bias) -> y that declares no model");
        info.block_n = block_n;
        info.block_k = block_k;
        info.block_scaled = undeclared_block;
        info.description = description;
        info.epilogue = epilogue;
        info.exposes_accumulator = exposes_accumulator;
        qc::RunRecord record;
        record.arm = label;
        record.kernel = kernel;
        record.epilogue = epilogue;
        record.device = device;
        record.library = library;
        record.build = build;
        return std::make_unique<PythonArm>(std::move(fn), std::move(accumulate), std::move(normalize), std::move(info),
                                           std::move(record), py_arm_kind(kind));
      },
      "fn"_a, "normalize"_a, "label"_a, "kernel"_a, "epilogue"_a, "exposes_accumulator"_a, "description"_a,
      "device"_a, "library"_a, "build"_a, "accumulation_model"_a = "", "kind"_a = "int8", "accumulate"_a = nb::none(), "block_n"_a = 0, "block_k"_a = 0);
}

// Operands: synthesis, files.
void bind_operands(nb::module_& m) {
  // ---- operands ----
  m.def(
      "load_operands",
      [](const std::string& path, bool with_digest) {
        qc::OperandSet set = qc::load_operands(path, with_digest);
        nb::list layers;
        for (const qc::LayerOperands& l : set.layers) layers.append(layer_to_dict(l));
        nb::dict d;
        d["path"] = set.path;
        d["sha256"] = set.sha256;
        d["metadata"] = set.metadata;
        d["layers"] = layers;
        return d;
      },
      "path"_a, "with_digest"_a = true);
  m.def(
      "save_operands",
      [](const std::string& path, nb::handle layers, std::map<std::string, std::string> metadata) {
        const OperandsIn in = operands_in(layers);
        without_gil([&] { qc::save_operands(path, in.layers, std::move(metadata)); });
      },
      "path"_a, "layers"_a, "metadata"_a);
  m.def(
      "synth",
      [](const std::string& shapes, int64_t m_rows, uint64_t seed, bool bias, double outlier_fraction,
         double outlier_gain, double weight_sigma, const std::string& act_quantizer, int threads,
         const std::string& element, const std::string& act_scale, const std::string& weight_scale,
         const std::string& weight_quantizer, bool ue8m0) {
        qc::SynthOptions o;
        o.weight_quantizer = weight_quantizer;
        o.ue8m0 = ue8m0;
        o.shapes = shapes;
        o.m = m_rows;
        o.seed = seed;
        o.bias = bias;
        o.outlier_fraction = outlier_fraction;
        o.outlier_gain = outlier_gain;
        o.weight_sigma = weight_sigma;
        o.act_quantizer = act_quantizer;
        o.threads = threads;
        o.element = element;
        o.act_scale = act_scale;
        o.weight_scale = weight_scale;
        QC_INPUT(m_rows > 0, "m: expected a positive number of rows, found {}", m_rows);
        const std::vector<qc::LayerOperands> layers = without_gil([&] { return qc::synth_operands(o); });
        nb::list out;
        for (const qc::LayerOperands& l : layers) out.append(layer_to_dict(l));
        return out;
      },
      "shapes"_a, "m"_a, "seed"_a, "bias"_a, "outlier_fraction"_a, "outlier_gain"_a, "weight_sigma"_a,
      "act_quantizer"_a, "threads"_a, "element"_a = "int8",
      "act_scale"_a = "per-token", "weight_scale"_a = "per-channel", "weight_quantizer"_a = "deepgemm",
      "ue8m0"_a = false);
}

// The checks and procedures.
void bind_checks(nb::module_& m) {
  // ---- checks ----
  m.def(
      "predict",
      [](nb::handle operands, int threads) {
        const OperandsIn in = operands_in(operands);
        nlohmann::json j;
        without_gil([&] { j = qc::to_json(qc::predict(in.layers, in.path, in.sha256, threads)); });
        return json_to_py(j);
      },
      "operands"_a, "threads"_a = 0);
  m.def(
      "verify",
      [](qc::Arm& a, qc::Arm& b, nb::handle operands, const std::vector<std::string>& scales,
         const std::vector<int64_t>& m_sweep, int64_t tolerance_ulps, size_t max_listed, double near_zero_fraction,
         int threads, const std::string& reference) {
        const OperandsIn in = operands_in(operands);
        qc::VerifyOptions o;
        o.reference = qc::verify_reference_from_name(reference);
        o.modes.clear();
        QC_INPUT(!scales.empty(), "scales: expected at least one of real, pow2-channel, pow2-layer");
        for (const std::string& s : scales) o.modes.push_back(qc::scale_mode_from_name(s, "scales"));
        o.language = qc::UserLanguage::python;  // messages and advice name Python arguments, not CLI flags
        for (int64_t mm : m_sweep) QC_INPUT(mm > 0, "m_sweep: expected positive row counts, found {}", mm);
        o.m_sweep = m_sweep;
        QC_INPUT(tolerance_ulps >= 0, "tolerance_ulps: expected >= 0, found {}", tolerance_ulps);
        o.tolerance_ulps = tolerance_ulps;
        o.compare.max_listed = max_listed;
        o.compare.near_zero_fraction = near_zero_fraction;
        o.threads = threads;
        nlohmann::json j;
        without_gil([&] {
          const qc::PredictionSet p = qc::predict(in.layers, in.path, in.sha256, threads);
          // The document `qconform verify --json` writes; the predictions are computed here, never pinned.
          j = qc::verify_results_json(qc::verify_layers(a, b, in.layers, p, o), {in.path, in.sha256, "", "", false});
        });
        return json_to_py(j);
      },
      "arm_a"_a, "arm_b"_a, "operands"_a, "scales"_a, "m_sweep"_a, "tolerance_ulps"_a, "max_listed"_a,
      "near_zero_fraction"_a, "threads"_a, "reference"_a);
  m.def(
      "boundary",
      [](qc::Arm& arm, int64_t max_k, bool overflow_probe) {
        qc::BoundaryOptions o;
        QC_INPUT(max_k >= 512, "max_k: expected >= 512 (the accumulation sweep starts at K = 512), found {}", max_k);
        o.max_k = max_k;
        o.overflow_probe = overflow_probe;
        nlohmann::json j;
        without_gil([&] { j = qc::to_json(qc::run_boundary(arm, o)); });
        return json_to_py(j);
      },
      "arm"_a, "max_k"_a = 32768, "overflow_probe"_a = true);
  m.def(
      "identify",
      [](qc::Arm& arm, uint64_t seed) {
        qc::IdentifyOptions o;
        o.seed = seed;
        nlohmann::json j;
        std::string text;
        without_gil([&] {
          const qc::IdentifyResult r = qc::identify(arm, o);
          j = qc::to_json(r);
          text = qc::describe(r, "python");
        });
        j["printout"] = text;
        return json_to_py(j);
      },
      "arm"_a, "seed"_a = qc::IdentifyOptions{}.seed);
  m.def(
      "transfer",
      [](const std::string& a_path, const std::string& b_path, bool replay, uint64_t seed, size_t bootstrap,
         size_t min_bin_support, size_t bins, size_t folds, double ci_level) {
        qc::transfer::TransferOptions o;
        o.replay = replay;
        o.seed = seed;
        o.bootstrap = bootstrap;
        o.min_bin_support = min_bin_support;
        o.initial_bins = bins;
        o.folds = folds;
        o.ci_level = ci_level;
        QC_INPUT(min_bin_support > 0 && bins > 0 && folds > 0,
                 "min_bin_support, bins and folds: expected positive integers, found {}, {}, {}", min_bin_support, bins,
                 folds);
        QC_INPUT(ci_level >= 0.5 && ci_level < 1.0, "ci_level: expected a level in [0.5, 1), found {}", ci_level);
        nlohmann::json j;
        std::string summary;
        without_gil([&] {
          const auto a = qc::transfer::read_transfer_jsonl(a_path);
          const auto b = qc::transfer::read_transfer_jsonl(b_path);
          const auto r = qc::transfer::analyze_transfer(a, b, o);
          j = qc::transfer::to_json(r);
          summary = qc::transfer::summary(r);
        });
        nb::object d = json_to_py(j);
        return nb::make_tuple(d, summary);
      },
      "a_jsonl"_a, "b_jsonl"_a, "replay"_a, "seed"_a, "bootstrap"_a, "min_bin_support"_a, "bins"_a, "folds"_a,
      "ci_level"_a);
}

}  // namespace

NB_MODULE(_qconform, m) {
  m.doc() = "qconform's C++ core (nanobind). Use the `qconform` package, not this module directly.";
  nb::set_leak_warnings(false);  // Python arms may sit in reference cycles at exit; nothing leaks at run time
  bind_errors(m);
  m.def("version", [] { return qc::version(); }, "qconform's version (git describe of the build).");
  m.def("build_flags", [] { return qc::build_flags(); });
  m.def("accum_target", [] { return qc::accum_target_name(); },
        "The Highway target the exact accumulator dispatches to on this CPU.");
  bind_accumulation(m);
  bind_epilogues(m);
  bind_arms(m);
  bind_operands(m);
  bind_checks(m);
}
