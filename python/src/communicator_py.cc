// The communicator wrapper's lifetime and argument helpers, and the collectives whose
// buffers every rank supplies alike; communicator_v_py.cc has the rooted ones and per-rank
// counts.
#include "communicator_py.h"

#include <utility>

namespace py = pybind11;

namespace plait::python {

CallOptions options(const std::string& algorithm, double timeout_s) {
  return {.algorithm = algorithm, .timeout = to_ms(timeout_s)};
}

PyCommunicator::PyCommunicator(std::shared_ptr<Communicator> comm)
    : comm_(std::move(comm)), in_flight_(std::make_shared<InFlight>()) {}

PyCommunicator::~PyCommunicator() {
  if (!comm_) return;  // moved from
  {
    // The engine joins its thread and may wait for a thread that drives it: not with the GIL.
    py::gil_scoped_release nogil;
    comm_.reset();
  }
  in_flight_->close();
}

Error PyCommunicator::usage(const std::string& message, const char* op) const {
  return invalid_usage(message, {.rank = rank(), .op = op});
}

BufferRef PyCommunicator::view(py::handle object, bool writable, const char* what,
                               const char* op) const {
  try {
    return std::make_shared<BufferView>(object, writable, what);
  } catch (const Error& e) {
    throw e.with_context({.rank = rank(), .op = op});
  }
}

ReduceOp PyCommunicator::reduction(const std::string& name, const char* op) const {
  try {
    return parse_op(name);
  } catch (const Error& e) {
    throw e.with_context({.rank = rank(), .op = op});
  }
}

void PyCommunicator::same_type(const BufferView& in, const BufferView& out, const char* op) const {
  if (in.dtype() != out.dtype())
    throw usage("input is " + std::string(to_string(in.dtype())) + " but output is " +
                    std::string(to_string(out.dtype())),
                op);
}

std::vector<size_t> PyCommunicator::per_rank(const std::vector<int64_t>& values, const char* what,
                                             const char* op) const {
  if (values.size() != static_cast<size_t>(size()))
    throw usage(std::string(what) + " has " + std::to_string(values.size()) +
                    " entries, expected one per rank (" + std::to_string(size()) + ")",
                op);
  std::vector<size_t> out;
  out.reserve(values.size());
  for (size_t p = 0; p < values.size(); ++p) {
    if (values[p] < 0)
      throw usage(std::string(what) + "[" + std::to_string(p) + "] is negative (" +
                      std::to_string(values[p]) + ")",
                  op);
    out.push_back(static_cast<size_t>(values[p]));
  }
  return out;
}

PyWork PyCommunicator::allreduce(py::object data, py::object out, const std::string& op,
                                 const std::string& algorithm, double timeout_s) {
  constexpr const char* kOp = "allreduce";
  const ReduceOp redop = reduction(op, kOp);
  auto in = view(data, out.is_none(), "input", kOp);
  BufferRef dst = out.is_none() ? in : view(out, true, "output", kOp);
  same_type(*in, *dst, kOp);
  if (dst->count() != in->count())
    throw usage("output holds " + std::to_string(dst->count()) + " elements but input holds " +
                    std::to_string(in->count()),
                kOp);
  return start({in, dst}, [&](Communicator& c) {
    return c.allreduce(in->data(), dst->data(), in->count(), in->dtype(), redop,
                       options(algorithm, timeout_s));
  });
}

PyWork PyCommunicator::broadcast(py::object data, int root, const std::string& algorithm,
                                 double timeout_s) {
  auto buf = view(data, true, "buffer", "broadcast");
  return start({buf}, [&](Communicator& c) {
    return c.broadcast(buf->data(), buf->data(), buf->count(), buf->dtype(), root,
                       options(algorithm, timeout_s));
  });
}

PyWork PyCommunicator::allgather(py::object data, py::object out, const std::string& algorithm,
                                 double timeout_s) {
  constexpr const char* kOp = "allgather";
  auto in = view(data, false, "input", kOp);
  auto dst = view(out, true, "output", kOp);
  same_type(*in, *dst, kOp);
  if (dst->count() != in->count() * static_cast<size_t>(size()))
    throw usage("output holds " + std::to_string(dst->count()) +
                    " elements; it needs size() x input = " + std::to_string(size()) + " x " +
                    std::to_string(in->count()),
                kOp);
  return start({in, dst}, [&](Communicator& c) {
    return c.allgather(in->data(), dst->data(), in->count(), in->dtype(),
                       options(algorithm, timeout_s));
  });
}

PyWork PyCommunicator::reduce_scatter(py::object data, py::object out, const std::string& op,
                                      const std::string& algorithm, double timeout_s) {
  constexpr const char* kOp = "reduce_scatter";
  const ReduceOp redop = reduction(op, kOp);
  auto in = view(data, false, "input", kOp);
  auto dst = view(out, true, "output", kOp);
  same_type(*in, *dst, kOp);
  if (in->count() != dst->count() * static_cast<size_t>(size()))
    throw usage("input holds " + std::to_string(in->count()) +
                    " elements; it needs size() x output = " + std::to_string(size()) + " x " +
                    std::to_string(dst->count()),
                kOp);
  return start({in, dst}, [&](Communicator& c) {
    return c.reduce_scatter(in->data(), dst->data(), dst->count(), in->dtype(), redop,
                            options(algorithm, timeout_s));
  });
}

PyWork PyCommunicator::alltoall(py::object data, py::object out, const std::string& algorithm,
                                double timeout_s) {
  constexpr const char* kOp = "alltoall";
  auto in = view(data, false, "input", kOp);
  auto dst = view(out, true, "output", kOp);
  same_type(*in, *dst, kOp);
  if (in->count() != dst->count() || in->count() % static_cast<size_t>(size()) != 0)
    throw usage("input (" + std::to_string(in->count()) + " elements) and output (" +
                    std::to_string(dst->count()) + ") must both hold size() = " +
                    std::to_string(size()) + " equal blocks",
                kOp);
  return start({in, dst}, [&](Communicator& c) {
    return c.alltoall(in->data(), dst->data(), in->count() / static_cast<size_t>(size()),
                      in->dtype(), options(algorithm, timeout_s));
  });
}

PyWork PyCommunicator::barrier(double timeout_s) {
  return start({}, [&](Communicator& c) { return c.barrier(options("", timeout_s)); });
}

PyWork PyCommunicator::send(py::object data, int peer, uint32_t tag, double timeout_s) {
  auto buf = view(data, false, "buffer", "send");
  return start({buf}, [&](Communicator& c) {
    return c.send(buf->data(), buf->count(), buf->dtype(), peer, tag, options("", timeout_s));
  });
}

PyWork PyCommunicator::recv(py::object data, int peer, uint32_t tag, double timeout_s) {
  auto buf = view(data, true, "buffer", "recv");
  return start({buf}, [&](Communicator& c) {
    return c.recv(buf->data(), buf->count(), buf->dtype(), peer, tag, options("", timeout_s));
  });
}

std::optional<PyCommunicator> PyCommunicator::split(int color, int key) {
  in_flight_->reap();
  std::shared_ptr<Communicator> sub;
  {
    py::gil_scoped_release nogil;
    sub = comm_->split(color, key);
  }
  if (!sub) return std::nullopt;
  return PyCommunicator(std::move(sub));
}

py::tuple PyCommunicator::shrink(double timeout_s) {
  in_flight_->reap();
  ShrinkResult shrunk;
  {
    py::gil_scoped_release nogil;
    shrunk = comm_->shrink(options("", timeout_s));
  }
  py::list survivors;
  for (int r : shrunk.survivors) survivors.append(r);
  return py::make_tuple(PyCommunicator(std::move(shrunk.comm)), survivors);
}

void PyCommunicator::abort(const std::string& reason) {
  {
    // Returns once the transport has stopped touching every pending operation's buffers.
    py::gil_scoped_release nogil;
    comm_->abort(reason);
  }
  in_flight_->reap();
}

PyCommunicator init(double timeout_s) {
  py::gil_scoped_release nogil;
  return PyCommunicator(Communicator::create(bootstrap_from_env(to_ms(timeout_s))));
}

}  // namespace plait::python
