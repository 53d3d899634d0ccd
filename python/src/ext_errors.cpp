// `qconform.Error` and its three kinds, the translation of the core's `qc::Error` into them, and the
// parked Python exception that crosses the core without the GIL (ext_common.hpp: `without_gil`).
#include "ext_common.hpp"

#include "qconform/error.hpp"

namespace qc::py {

PyObject* g_input_error = nullptr;     // qconform.InputError(Error, ValueError)
PyObject* g_pending_exception = nullptr;

namespace {

PyObject* g_error = nullptr;           // qconform.Error(Exception)
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

}  // namespace

[[noreturn]] void reraise_pending() {
  PyObject* exc = g_pending_exception;
  g_pending_exception = nullptr;
  QC_CHECK(exc != nullptr, "a Python arm failed but no Python exception was parked");
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(exc));
  Py_INCREF(type);
  PyErr_Restore(type, exc, PyException_GetTraceback(exc));  // steals the three references
  throw nb::python_error();
}

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

}  // namespace qc::py
