#include "rdma_py.h"

#include <pybind11/stl.h>

#include "plait/bootstrap.h"
#include "work_py.h"

namespace py = pybind11;

namespace plait::python {

uint64_t PendingTable::add(Pending pending) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_++;
  entries_.emplace(id, std::make_unique<Pending>(std::move(pending)));
  return id;
}

std::unique_ptr<Pending> PendingTable::take(uint64_t id) {
  std::lock_guard lock(mu_);
  auto node = entries_.extract(id);
  return node.empty() ? nullptr : std::move(node.mapped());
}

void PendingTable::clear() {
  std::lock_guard lock(mu_);
  entries_.clear();
}

PyCompletion PyCompletionQueue::convert(const rdma::Completion& c) {
  PyCompletion out;
  out.op = std::string(rdma::to_string(c.op));
  out.peer = c.peer;
  out.bytes = c.bytes;
  out.tag = c.tag;
  out.header = c.header;
  out.imm = c.imm;
  out.offset = c.offset;
  out.key = c.key;
  out.error = c.error;
  if (c.op != rdma::OpType::kRemoteWriteImm) {
    // Buffer views are released with the GIL held (PyBuffer_Release needs it).
    std::unique_ptr<Pending> p = pending_->take(c.context);
    if (p) {
      out.context = p->context;
      if (p->result && c.ok()) out.value = *p->result;
    }
  }
  return out;
}

std::optional<PyCompletion> PyCompletionQueue::poll() {
  rdma::Completion c;
  bool got;
  {
    std::shared_lock lock(life_->mu);
    if (!life_->alive) throw aborted_error("the fabric of this completion queue was closed");
    got = cq_->poll(&c);
  }
  if (!got) return std::nullopt;
  return convert(c);
}

std::optional<PyCompletion> PyCompletionQueue::wait(double timeout_s) {
  rdma::Completion c;
  bool got;
  {
    py::gil_scoped_release nogil;
    std::shared_lock lock(life_->mu);
    if (!life_->alive) throw aborted_error("the fabric of this completion queue was closed");
    got = cq_->wait(&c, std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)));
  }
  if (!got) return std::nullopt;
  return convert(c);
}

PyMemory::~PyMemory() {
  pybind11::gil_scoped_release nogil;  // deregistration may wait for peers
  region_.reset();
}

pybind11::buffer_info PyMemory::buffer() const {
  return pybind11::buffer_info(region_->addr(), 1, pybind11::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<pybind11::ssize_t>(region_->length())}, {1},
                               /*readonly=*/false);
}

void PyRegion::deregister() {
  if (region_) {
    py::gil_scoped_release nogil;
    region_->deregister();
  }
}

PyFabric::PyFabric(const std::string& name, const std::map<std::string, std::string>& settings,
                   double timeout_s)
    : pending_(std::make_shared<PendingTable>()) {
  py::gil_scoped_release nogil;
  fabric_ = rdma::Fabric::create(bootstrap_from_env(to_ms(timeout_s)), {.name = name, .settings = settings});
}

PyFabric::~PyFabric() {
  if (!fabric_) return;
  {
    py::gil_scoped_release nogil;
    // Nothing more lands in a Python buffer, and no wait is inside a queue, once the
    // fabric's end begins.
    for (auto& q : queues_) {
      fabric_->cancel(q->queue());
      q->queue().interrupt();
    }
    std::unique_lock lock(life_->mu);
    life_->alive = false;
  }
  for (auto& weak : regions_)
    if (auto r = weak.lock()) r->deregister();  // releases the GIL itself
  {
    py::gil_scoped_release nogil;
    fabric_->set_imm_cq(nullptr);
    fabric_.reset();
  }
  pending_->clear();  // the buffers' views go with the GIL held
}

std::shared_ptr<PyCompletionQueue> PyFabric::completion_queue() {
  auto q = std::make_shared<PyCompletionQueue>(fabric_->create_cq(), pending_, life_);
  queues_.push_back(q);
  return q;
}

std::shared_ptr<PyRegion> PyFabric::register_buffer(py::object buffer, const std::string& access) {
  uint32_t flags = 0;
  for (char c : access) {
    if (c == 'r') flags |= rdma::kAccessRemoteRead;
    else if (c == 'w') flags |= rdma::kAccessRemoteWrite;
    else if (c == 'a') flags |= rdma::kAccessRemoteAtomic;
    else
      throw invalid_usage("access takes the letters r (remote read), w (remote write) and a "
                          "(atomics), not '" + access + "'",
                          {.rank = rank(), .op = "register"});
  }
  auto view = std::make_shared<BufferView>(buffer, (flags & ~rdma::kAccessRemoteRead) != 0, "region");
  const size_t bytes = view->count() * dtype_size(view->dtype());
  auto region = std::make_shared<PyRegion>(fabric_->register_memory(view->data(), bytes, flags), view);
  regions_.push_back(region);
  return region;
}

std::shared_ptr<PyMemory> PyFabric::allocate(size_t bytes) {
  std::unique_ptr<rdma::MemoryRegion> region;
  {
    py::gil_scoped_release nogil;
    region = fabric_->allocate_memory(bytes, rdma::kAccessLocal);
  }
  return std::make_shared<PyMemory>(std::move(region));
}

std::vector<std::vector<rdma::RemoteKey>> PyFabric::exchange(const std::vector<rdma::RemoteKey>& mine) {
  py::gil_scoped_release nogil;
  return fabric_->exchange(mine);
}

void PyFabric::set_imm_queue(std::shared_ptr<PyCompletionQueue> cq) {
  fabric_->set_imm_cq(cq ? &cq->queue() : nullptr);
  imm_queue_ = std::move(cq);
}

namespace {

size_t bytes_of(const BufferView& v) { return v.count() * dtype_size(v.dtype()); }

}  // namespace

void PyFabric::send(int peer, py::object data, uint64_t tag, uint64_t header,
                    PyCompletionQueue& cq, uint64_t context) {
  auto v = std::make_shared<BufferView>(data, false, "data");
  const uint64_t id = pending_->add({.context = context, .buffers = {v}});
  try {
    fabric_->send(peer, v->data(), bytes_of(*v), tag, header, cq.queue(), id);
  } catch (...) {
    pending_->take(id);
    throw;
  }
}

void PyFabric::recv(int peer, py::object data, uint64_t tag, PyCompletionQueue& cq, uint64_t context) {
  auto v = std::make_shared<BufferView>(data, true, "data");
  const uint64_t id = pending_->add({.context = context, .buffers = {v}});
  try {
    fabric_->recv(peer, v->data(), bytes_of(*v), tag, cq.queue(), id);
  } catch (...) {
    pending_->take(id);
    throw;
  }
}

void PyFabric::write(int peer, py::object data, const rdma::RemoteKey& remote, uint64_t offset,
                     std::optional<uint32_t> imm, PyCompletionQueue& cq, uint64_t context) {
  auto v = std::make_shared<BufferView>(data, false, "data");
  const uint64_t id = pending_->add({.context = context, .buffers = {v}});
  try {
    fabric_->write(peer, v->data(), bytes_of(*v), remote, offset, imm, cq.queue(), id);
  } catch (...) {
    pending_->take(id);
    throw;
  }
}

void PyFabric::read(int peer, py::object data, const rdma::RemoteKey& remote, uint64_t offset,
                    PyCompletionQueue& cq, uint64_t context) {
  auto v = std::make_shared<BufferView>(data, true, "data");
  const uint64_t id = pending_->add({.context = context, .buffers = {v}});
  try {
    fabric_->read(peer, v->data(), bytes_of(*v), remote, offset, cq.queue(), id);
  } catch (...) {
    pending_->take(id);
    throw;
  }
}

void PyFabric::fetch_add(int peer, const rdma::RemoteKey& remote, uint64_t offset, uint64_t add,
                         PyCompletionQueue& cq, uint64_t context) {
  auto result = std::make_unique<uint64_t>(0);
  uint64_t* where = result.get();
  const uint64_t id = pending_->add({.context = context, .result = std::move(result)});
  try {
    fabric_->fetch_add(peer, where, remote, offset, add, cq.queue(), id);
  } catch (...) {
    pending_->take(id);
    throw;
  }
}

void PyFabric::compare_swap(int peer, const rdma::RemoteKey& remote, uint64_t offset,
                            uint64_t expected, uint64_t desired, PyCompletionQueue& cq,
                            uint64_t context) {
  auto result = std::make_unique<uint64_t>(0);
  uint64_t* where = result.get();
  const uint64_t id = pending_->add({.context = context, .result = std::move(result)});
  try {
    fabric_->compare_swap(peer, where, remote, offset, expected, desired, cq.queue(), id);
  } catch (...) {
    pending_->take(id);
    throw;
  }
}

void register_rdma(py::module_& m) {
  py::class_<rdma::RemoteKey>(m, "RemoteKey",
                              "A region's descriptor (addr, length, key): all a peer needs to "
                              "address it. Plain data; pickles as a tuple.")
      .def(py::init([](uint64_t addr, uint64_t length, uint64_t key) {
             return rdma::RemoteKey{addr, length, key};
           }),
           py::arg("addr") = 0, py::arg("length") = 0, py::arg("key") = 0)
      .def_readonly("addr", &rdma::RemoteKey::addr)
      .def_readonly("length", &rdma::RemoteKey::length)
      .def_readonly("key", &rdma::RemoteKey::key)
      .def("__repr__", [](const rdma::RemoteKey& k) {
        return "RemoteKey(addr=" + std::to_string(k.addr) + ", length=" + std::to_string(k.length) +
               ", key=" + std::to_string(k.key) + ")";
      })
      .def(py::pickle([](const rdma::RemoteKey& k) { return py::make_tuple(k.addr, k.length, k.key); },
                      [](py::tuple t) {
                        return rdma::RemoteKey{t[0].cast<uint64_t>(), t[1].cast<uint64_t>(),
                                               t[2].cast<uint64_t>()};
                      }));

  py::class_<PyCompletion>(m, "Completion", "A finished operation, as its queue reported it.")
      .def_readonly("context", &PyCompletion::context, "the context the call was given")
      .def_readonly("op", &PyCompletion::op, "\"send\", \"recv\", \"write\", \"read\", ...")
      .def_readonly("peer", &PyCompletion::peer)
      .def_readonly("bytes", &PyCompletion::bytes)
      .def_readonly("tag", &PyCompletion::tag)
      .def_readonly("header", &PyCompletion::header)
      .def_readonly("imm", &PyCompletion::imm, "remote write+imm: the immediate")
      .def_readonly("offset", &PyCompletion::offset, "remote write+imm: where it landed")
      .def_readonly("key", &PyCompletion::key, "remote write+imm: the region's key")
      .def_readonly("value", &PyCompletion::value, "atomics: the remote word's old value")
      .def_property_readonly("ok", [](const PyCompletion& c) { return c.error == nullptr; })
      .def("raise_if_failed", [](const PyCompletion& c) {
        if (c.error) throw *c.error;
      }, "Raises the operation's plait.Error, if it failed.")
      .def_property_readonly("error", [](const PyCompletion& c) -> py::object {
        if (!c.error) return py::none();
        return py::str(c.error->what());
      }, "The failure's message, or None.");

  py::class_<PyCompletionQueue, std::shared_ptr<PyCompletionQueue>>(
      m, "CompletionQueue", "Where a fabric reports finished operations.")
      .def("poll", &PyCompletionQueue::poll, "One completion, or None; never blocks.")
      .def("wait", &PyCompletionQueue::wait, py::arg("timeout") = 60.0,
           "Waits up to timeout seconds (PLAIT_WAIT decides how); None on timeout.");

  py::class_<PyMemory, std::shared_ptr<PyMemory>>(
      m, "Memory", py::buffer_protocol(),
      "Bytes a fabric allocated (Fabric.allocate): a writable buffer for np.frombuffer.")
      .def_buffer(&PyMemory::buffer)
      .def("__len__", &PyMemory::size);

  py::class_<PyRegion, std::shared_ptr<PyRegion>>(
      m, "Region", "A registered buffer; pinned until deregistered or its fabric is dropped.")
      .def_property_readonly("key", &PyRegion::key, "The RemoteKey to give to peers.")
      .def("deregister", &PyRegion::deregister, "From its return no peer accesses the memory.");

  py::class_<PyFabric>(m, "Fabric",
                       "One-sided and two-sided communication with RDMA semantics over shared "
                       "memory or TCP (plait/rdma.h). Creating one is collective.")
      .def(py::init<const std::string&, const std::map<std::string, std::string>&, double>(),
           py::arg("name") = "rdma", py::arg("settings") = std::map<std::string, std::string>{},
           py::arg("timeout") = 60.0)
      .def_property_readonly("rank", &PyFabric::rank)
      .def_property_readonly("size", &PyFabric::size)
      .def("provider", &PyFabric::provider, py::arg("peer"))
      .def("peer_failed", &PyFabric::peer_failed, py::arg("peer"))
      .def("completion_queue", &PyFabric::completion_queue)
      .def("register", &PyFabric::register_buffer, py::arg("buffer"), py::arg("access") = "rw",
           "Registers a buffer for remote access: r read, w write, a atomics.")
      .def("allocate", &PyFabric::allocate, py::arg("nbytes"),
           "nbytes of zeroed memory of the kind this fabric's peers reach fastest (over UCX, "
           "memory UCX allocated, which its shared-memory transports map into the peers), as "
           "a Memory buffer; register it, or arrays on it, like any buffer. Freed once "
           "nothing views it. plait.rdma.allocate gives a NumPy array on it.")
      .def("exchange", &PyFabric::exchange, py::arg("keys"),
           "Collective: every rank gives its keys (the same number), gets everyone's.")
      .def("set_imm_queue", &PyFabric::set_imm_queue, py::arg("queue"),
           "Where peers' writes with an immediate are reported.")
      .def("send", &PyFabric::send, py::arg("peer"), py::arg("data"), py::arg("tag") = 0,
           py::arg("header") = 0, py::arg("queue"), py::arg("context") = 0)
      .def("recv", &PyFabric::recv, py::arg("peer"), py::arg("data"), py::arg("tag") = 0,
           py::arg("queue"), py::arg("context") = 0)
      .def("write", &PyFabric::write, py::arg("peer"), py::arg("data"), py::arg("remote"),
           py::arg("offset") = 0, py::arg("imm") = py::none(), py::arg("queue"),
           py::arg("context") = 0,
           "Writes data into the peer's region at offset (bytes), with an optional immediate.")
      .def("read", &PyFabric::read, py::arg("peer"), py::arg("data"), py::arg("remote"),
           py::arg("offset") = 0, py::arg("queue"), py::arg("context") = 0,
           "Reads len(data) elements' bytes from the peer's region at offset into data.")
      .def("fetch_add", &PyFabric::fetch_add, py::arg("peer"), py::arg("remote"),
           py::arg("offset"), py::arg("add"), py::arg("queue"), py::arg("context") = 0,
           "64-bit fetch-and-add on an 8-byte aligned word; the completion's value is the old one.")
      .def("compare_swap", &PyFabric::compare_swap, py::arg("peer"), py::arg("remote"),
           py::arg("offset"), py::arg("expected"), py::arg("desired"), py::arg("queue"),
           py::arg("context") = 0);
}

}  // namespace plait::python
