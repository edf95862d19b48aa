// The compiled core of the Python module: Communicator and Work over plait's C++ API, with
// errors turned into plait.Error subclasses. Buffers stay pinned until their Work is done;
// waits release the GIL, so other Python threads run meanwhile.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "plait/plait.h"

namespace py = pybind11;

namespace plait::python {
namespace {

PyObject* g_error = nullptr;
PyObject* g_by_category[5] = {};

PyObject* class_for(ErrorCategory c) {
  size_t i = static_cast<size_t>(c);
  return i < 5 && g_by_category[i] ? g_by_category[i] : g_error;
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

// A Work and the buffers it uses (released when the Work object goes away).
struct PyWork {
  WorkPtr work;
  std::vector<BufferRef> buffers;

  void wait(std::optional<double> timeout_s) {
    {
      py::gil_scoped_release nogil;
      if (timeout_s)
        work->wait(std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000.0)));
      else
        work->wait();
    }
  }
};

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

CallOptions options(const std::string& algorithm, double timeout_s) {
  return {.algorithm = algorithm, .timeout = to_ms(timeout_s)};
}

void same_type(const BufferView& a, const BufferView& b, const char* op) {
  if (a.dtype() != b.dtype())
    throw invalid_usage(std::string(op) + ": input is " + std::string(to_string(a.dtype())) +
                        " but output is " + std::string(to_string(b.dtype())));
}

class PyCommunicator {
 public:
  explicit PyCommunicator(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }

  PyWork allreduce(py::object data, py::object out, const std::string& op,
                   const std::string& algorithm, double timeout_s) {
    auto in = std::make_shared<BufferView>(data, out.is_none(), "allreduce input");
    BufferRef dst = out.is_none() ? in : std::make_shared<BufferView>(out, true, "allreduce output");
    same_type(*in, *dst, "allreduce");
    if (dst->count() != in->count()) throw invalid_usage("allreduce: output must match input");
    WorkPtr w;
    {
      py::gil_scoped_release nogil;
      w = comm_->allreduce(in->data(), dst->data(), in->count(), in->dtype(), parse_op(op),
                           options(algorithm, timeout_s));
    }
    return {w, {in, dst}};
  }

  PyWork broadcast(py::object data, int root, const std::string& algorithm, double timeout_s) {
    auto buf = std::make_shared<BufferView>(data, true, "broadcast buffer");
    WorkPtr w;
    {
      py::gil_scoped_release nogil;
      w = comm_->broadcast(buf->data(), buf->data(), buf->count(), buf->dtype(), root,
                           options(algorithm, timeout_s));
    }
    return {w, {buf}};
  }

  PyWork allgather(py::object data, py::object out, const std::string& algorithm,
                   double timeout_s) {
    auto in = std::make_shared<BufferView>(data, false, "allgather input");
    auto dst = std::make_shared<BufferView>(out, true, "allgather output");
    same_type(*in, *dst, "allgather");
    if (dst->count() != in->count() * static_cast<size_t>(size()))
      throw invalid_usage("allgather: output must hold size() x input elements");
    WorkPtr w;
    {
      py::gil_scoped_release nogil;
      w = comm_->allgather(in->data(), dst->data(), in->count(), in->dtype(),
                           options(algorithm, timeout_s));
    }
    return {w, {in, dst}};
  }

  PyWork reduce_scatter(py::object data, py::object out, const std::string& op,
                        const std::string& algorithm, double timeout_s) {
    auto in = std::make_shared<BufferView>(data, false, "reduce_scatter input");
    auto dst = std::make_shared<BufferView>(out, true, "reduce_scatter output");
    same_type(*in, *dst, "reduce_scatter");
    if (in->count() != dst->count() * static_cast<size_t>(size()))
      throw invalid_usage("reduce_scatter: input must hold size() x output elements");
    WorkPtr w;
    {
      py::gil_scoped_release nogil;
      w = comm_->reduce_scatter(in->data(), dst->data(), dst->count(), in->dtype(), parse_op(op),
                                options(algorithm, timeout_s));
    }
    return {w, {in, dst}};
  }

  PyWork alltoall(py::object data, py::object out, const std::string& algorithm,
                  double timeout_s) {
    auto in = std::make_shared<BufferView>(data, false, "alltoall input");
    auto dst = std::make_shared<BufferView>(out, true, "alltoall output");
    same_type(*in, *dst, "alltoall");
    if (in->count() != dst->count() || in->count() % static_cast<size_t>(size()) != 0)
      throw invalid_usage("alltoall: input and output must both hold size() equal blocks");
    WorkPtr w;
    {
      py::gil_scoped_release nogil;
      w = comm_->alltoall(in->data(), dst->data(), in->count() / static_cast<size_t>(size()),
                          in->dtype(), options(algorithm, timeout_s));
    }
    return {w, {in, dst}};
  }

  PyWork barrier(double timeout_s) {
    WorkPtr w;
    {
      py::gil_scoped_release nogil;
      w = comm_->barrier(options("", timeout_s));
    }
    return {w, {}};
  }

  PyWork send(py::object data, int peer, uint32_t tag, double timeout_s) {
    auto buf = std::make_shared<BufferView>(data, false, "send buffer");
    WorkPtr w;
    {
      py::gil_scoped_release nogil;
      w = comm_->send(buf->data(), buf->count(), buf->dtype(), peer, tag, options("", timeout_s));
    }
    return {w, {buf}};
  }

  PyWork recv(py::object data, int peer, uint32_t tag, double timeout_s) {
    auto buf = std::make_shared<BufferView>(data, true, "recv buffer");
    WorkPtr w;
    {
      py::gil_scoped_release nogil;
      w = comm_->recv(buf->data(), buf->count(), buf->dtype(), peer, tag, options("", timeout_s));
    }
    return {w, {buf}};
  }

  std::optional<PyCommunicator> split(int color, int key) {
    std::shared_ptr<Communicator> sub;
    {
      py::gil_scoped_release nogil;
      sub = comm_->split(color, key);
    }
    if (!sub) return std::nullopt;
    return PyCommunicator(std::move(sub));
  }

  void abort(const std::string& reason) { comm_->abort(reason); }

 private:
  std::shared_ptr<Communicator> comm_;
};

PyCommunicator init(double timeout_s) {
  py::gil_scoped_release nogil;
  return PyCommunicator(Communicator::create(bootstrap_from_env(to_ms(timeout_s))));
}

}  // namespace
}  // namespace plait::python

PYBIND11_MODULE(_plait, m) {
  using namespace plait::python;
  using plait::ErrorCategory;
  m.doc() = "plait's compiled core; import plait instead";

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
    } catch (const plait::Error& e) {
      raise(e);
    }
  });

  m.attr("ANY_SOURCE") = plait::kAnySource;

  py::class_<PyWork>(m, "Work", "A non-blocking operation; its buffers stay pinned until done.")
      .def("wait", &PyWork::wait, py::arg("timeout") = py::none(),
           "Waits (seconds; default: the operation's own limit); raises plait.Error on failure.")
      .def("test", [](PyWork& w) { return w.work->test(); }, "True once the operation is done.")
      .def_property_readonly("source", [](PyWork& w) { return w.work->source(); })
      .def_property_readonly("bytes", [](PyWork& w) { return w.work->bytes(); })
      .def_property_readonly("algorithm", [](PyWork& w) { return w.work->algorithm(); });

  py::class_<PyCommunicator>(m, "Communicator")
      .def_property_readonly("rank", &PyCommunicator::rank)
      .def_property_readonly("size", &PyCommunicator::size)
      .def("allreduce", &PyCommunicator::allreduce, py::arg("data"), py::arg("out") = py::none(),
           py::arg("op") = "sum", py::arg("algorithm") = "", py::arg("timeout") = 0.0,
           "Reduces data across ranks into out (default: in place).")
      .def("broadcast", &PyCommunicator::broadcast, py::arg("data"), py::arg("root") = 0,
           py::arg("algorithm") = "", py::arg("timeout") = 0.0)
      .def("allgather", &PyCommunicator::allgather, py::arg("data"), py::arg("out"),
           py::arg("algorithm") = "", py::arg("timeout") = 0.0)
      .def("reduce_scatter", &PyCommunicator::reduce_scatter, py::arg("data"), py::arg("out"),
           py::arg("op") = "sum", py::arg("algorithm") = "", py::arg("timeout") = 0.0)
      .def("alltoall", &PyCommunicator::alltoall, py::arg("data"), py::arg("out"),
           py::arg("algorithm") = "", py::arg("timeout") = 0.0)
      .def("barrier", &PyCommunicator::barrier, py::arg("timeout") = 0.0)
      .def("send", &PyCommunicator::send, py::arg("data"), py::arg("peer"), py::arg("tag") = 0,
           py::arg("timeout") = 0.0)
      .def("recv", &PyCommunicator::recv, py::arg("data"), py::arg("peer") = plait::kAnySource,
           py::arg("tag") = 0, py::arg("timeout") = 0.0)
      .def("split", &PyCommunicator::split, py::arg("color"), py::arg("key") = 0,
           "Ranks with equal color form a new communicator; None for a negative color.")
      .def("abort", &PyCommunicator::abort, py::arg("reason") = "aborted from Python");

  m.def("init", &init, py::arg("timeout") = 60.0,
        "A communicator over every rank of the job, from the environment that plait run, "
        "torchrun, mpirun or srun set.");
}
