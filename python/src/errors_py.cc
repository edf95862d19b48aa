#include "errors_py.h"

#include <string>

#include "plait/error.h"

namespace py = pybind11;

namespace plait::python {
namespace {

constexpr size_t kCategories = 5;
// Created once per interpreter by register_errors and never freed: exception classes live as
// long as the module, and the translator only reads them.
PyObject* g_error = nullptr;
PyObject* g_by_category[kCategories] = {};

PyObject* class_for(ErrorCategory c) {
  size_t i = static_cast<size_t>(c);
  return i < kCategories && g_by_category[i] ? g_by_category[i] : g_error;
}

// Raises the Python twin of a plait::Error, with its category and context as attributes.
void raise(const Error& e) {
  PyObject* cls = class_for(e.category());
  PyObject* exc = PyObject_CallFunction(cls, "s", e.what());
  if (!exc) return;
  const ErrorContext& c = e.context();
  auto set = [&](const char* name, PyObject* value) {
    PyObject_SetAttrString(exc, name, value);
    Py_DECREF(value);
  };
  set("category", PyUnicode_FromString(std::string(to_string(e.category())).c_str()));
  set("message", PyUnicode_FromString(e.message().c_str()));
  set("rank", PyLong_FromLong(c.rank));
  set("peer", PyLong_FromLong(c.peer));
  set("op", PyUnicode_FromString(c.op.c_str()));
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
}

}  // namespace

void register_errors(py::module_& m) {
  g_error = PyErr_NewException("plait.Error", PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::handle(g_error);
  struct Sub {
    const char* name;
    ErrorCategory category;
    PyObject* builtin;  // a matching Python built-in to also derive from, or null
  };
  for (const Sub& s : {Sub{"InvalidUsageError", ErrorCategory::kInvalidUsage, PyExc_ValueError},
                       Sub{"TimeoutError", ErrorCategory::kTimeout, PyExc_TimeoutError},
                       Sub{"RemoteError", ErrorCategory::kRemote, nullptr},
                       Sub{"SystemError", ErrorCategory::kSystem, PyExc_OSError},
                       Sub{"AbortedError", ErrorCategory::kAborted, nullptr}}) {
    PyObject* bases = s.builtin ? PyTuple_Pack(2, g_error, s.builtin) : PyTuple_Pack(1, g_error);
    PyObject* cls = PyErr_NewException((std::string("plait.") + s.name).c_str(), bases, nullptr);
    Py_DECREF(bases);
    g_by_category[static_cast<size_t>(s.category)] = cls;
    m.attr(s.name) = py::handle(cls);
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise(e);
    }
  });
}

}  // namespace plait::python
