// What the parts of the nanobind extension `qconform._qconform` share (python/src/ext_*.cpp, one
// file per part of the module; `qconform_ext.cpp` holds the module itself): the exception types and
// the GIL-less call into the core, the checked arrays in and NumPy arrays out, the operands'
// conversion, and the `bind_*` function of each part. Internal to the extension: nothing here is
// installed.
//
// Every nanobind type caster the binding uses (`std::map`, `std::optional`, `std::string`,
// `std::unique_ptr`, `std::vector`) is included here, so that every file of the module converts a
// type the same way (a caster missing from one file would make nanobind treat the type as an
// unbound class there, an error only at run time).
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <Python.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qconform/operands.hpp"

namespace nb = nanobind;

namespace qc::py {

// ---- exceptions (ext_errors.cpp) ------------------------------------------------------------------

// qconform.InputError(Error, ValueError): a Python arm's callable raising it refuses its operands.
extern PyObject* g_input_error;

// ---- calling into the core with the GIL released (ext_errors.cpp) ---------------------------------

// A Python exception raised inside a Python arm, parked (GIL held) while the C++ stack unwinds
// without the GIL, and raised again once the binding holds the GIL. A `nb::python_error` must not
// cross code that runs without the GIL: copying or destroying it touches reference counts.
extern PyObject* g_pending_exception;
struct PendingPythonError {};

// Raises the parked exception (see `g_pending_exception`) as `nb::python_error`; the GIL is held.
[[noreturn]] void reraise_pending();

template <class F>
auto without_gil(F&& f) {
  try {
    nb::gil_scoped_release nogil;
    return f();
  } catch (const PendingPythonError&) {
    reraise_pending();
  }
}

// ---- JSON -> Python (ext_convert.cpp) -----------------------------------------------------------------

nb::object json_to_py(const nlohmann::json& j);

// ---- arrays in (ext_convert.cpp) ----------------------------------------------------------------------

using AnyArray = nb::ndarray<nb::ro>;

enum class Elem { i8, code8, f32, bf16, i32, i64, u8 };

bool elem_matches(Elem e, nb::dlpack::dtype d);
std::string shape_text(const AnyArray& a);

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
// ranks. Instantiated in ext_convert.cpp for int8_t, uint8_t, uint16_t, int32_t, int64_t and float.
template <class T>
HostArray<T> host_array(const AnyArray& a, const std::string& what, Elem elem, std::initializer_list<size_t> ranks);

// `obj` as an array, or a `qconform.InputError` naming `what` and the type found.
AnyArray as_array(nb::handle obj, const std::string& what);

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

// ---- operands (ext_operands.cpp) --------------------------------------------------------------------

// One layer from a dict {name, a_q, a_scale, w_q, w_scale, bias?, ...}, every dtype and shape checked
// (the keys: ext_operands.cpp); `where` names it in messages ("layer", "layers[2]").
qc::LayerOperands operands_from_dict(nb::handle obj, const std::string& where);

struct OperandsIn {
  std::vector<qc::LayerOperands> layers;
  std::string path, sha256;
  bool from_file = false;  // read from `path` (else layer dicts: path "<python>")
};

// `operands`: a path (str; the Python layer turns PathLike into str) or a sequence of layer dicts.
OperandsIn operands_in(nb::handle operands);

// The NumPy shape of an operand's scales: [rows], or [scale rows, scale columns] when they act per K block.
std::vector<size_t> scale_dims(const qc::ScaleLayout& l, int64_t rows, int64_t k);

// A layer as the dict `load_operands` and `synth` return: NumPy views kept alive by the layer.
nb::dict layer_to_dict(const qc::LayerOperands& l);

// ---- the parts of the module, in the order NB_MODULE binds them -----------------------------------

void bind_errors(nb::module_& m);        // ext_errors.cpp
void bind_accumulation(nb::module_& m);  // ext_accumulation.cpp
void bind_epilogues(nb::module_& m);     // ext_epilogues.cpp
void bind_arms(nb::module_& m);          // ext_arms.cpp
void bind_operands(nb::module_& m);      // ext_operands.cpp
void bind_checks(nb::module_& m);        // ext_checks.cpp

}  // namespace qc::py
