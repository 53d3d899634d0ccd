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
//
// The module is bound part by part, one file each (ext_common.hpp declares what they share):
// ext_errors.cpp (the exception types, the parked Python exception), ext_convert.cpp (arrays in,
// JSON out), ext_accumulation.cpp, ext_epilogues.cpp (and `compare`), ext_arms.cpp (`Arm`,
// `PythonArm`), ext_operands.cpp, ext_checks.cpp. This file holds the module itself.
#include "ext_common.hpp"

#include "qconform/accumulation.hpp"
#include "core/version.hpp"

NB_MODULE(_qconform, m) {
  using namespace qc::py;
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
