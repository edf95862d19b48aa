// Group creation, barriers, point-to-point and the pieces every call shares; the collectives
// are in collectives.cc.
#include "process_group.h"

#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <cstdlib>
#include <thread>

#include "c10d_store.h"
#include "plait/bootstrap.h"
#include "tensors.h"

namespace plait::torch_backend {

PlaitProcessGroup::PlaitProcessGroup(std::shared_ptr<Communicator> comm,
                                     std::chrono::milliseconds timeout)
    : c10d::Backend(comm->rank(), comm->size()),
      comm_(std::move(comm)),
      timeout_(timeout),
      completer_(std::make_shared<CompletionThread>()) {
  // Collective, like the group's creation itself.
  control_ = comm_->split(0, comm_->rank());
}

PlaitProcessGroup::~PlaitProcessGroup() {
  // The completion thread may need the GIL (dropping a tensor that Python also holds), and
  // Python may be destroying this group while holding it: never join with the GIL held.
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release nogil;
    completer_->stop();
  } else {
    completer_->stop();
  }
}

c10::intrusive_ptr<PlaitProcessGroup> PlaitProcessGroup::create(
    c10::intrusive_ptr<c10d::Store> store, int rank, int size,
    std::chrono::milliseconds timeout) {
  Bootstrap bootstrap;
  bootstrap.rank = rank;
  bootstrap.size = size;
  bootstrap.local_rank = rank;
  bootstrap.local_size = size;
  bootstrap.store = std::make_shared<C10dStore>(std::move(store));
  // The route to torch's store host picks the address this rank advertises to its peers.
  if (const char* master = std::getenv("MASTER_ADDR")) bootstrap.store_host = master;
  auto comm = Communicator::create(bootstrap, {.timeout = timeout, .name = "plait"});
  auto group = c10::make_intrusive<PlaitProcessGroup>(std::move(comm), timeout);
  group->bootstrap_ = std::move(bootstrap);
  return group;
}

c10::intrusive_ptr<PlaitProcessGroup> PlaitProcessGroup::subgroup(
    const std::vector<int>& ranks, std::chrono::milliseconds timeout) {
  auto group = c10::make_intrusive<PlaitProcessGroup>(comm()->subgroup(ranks), timeout);
  // The members' services meet under a prefix of their own: the same ranks give the same one.
  std::string scope = "group";
  for (int r : ranks) scope += "-" + std::to_string(r);
  group->bootstrap_ = bootstrap_;
  group->bootstrap_.rank = group->comm_->rank();
  group->bootstrap_.size = group->comm_->size();
  group->bootstrap_.local_rank = group->bootstrap_.rank;
  group->bootstrap_.local_size = group->bootstrap_.size;
  if (bootstrap_.store) group->bootstrap_.store = std::make_shared<PrefixStore>(scope, bootstrap_.store);
  return group;
}

c10::intrusive_ptr<PlaitWork> PlaitProcessGroup::make_work(c10d::OpType type, const char* title,
                                                           const std::vector<at::Tensor>& inputs,
                                                           std::vector<at::Tensor> outputs) {
  TORCH_CHECK(!shut_down_, "plait: rank ", rank_, ": ", title,
              " on a process group that was shut down (destroy_process_group)");
  if (!c10d::isP2POp(type)) ++seq_;
  // The same limit the group's operations get (options()): a zero group timeout means
  // the communicator's own.
  const auto group_limit = timeout_.load();
  const auto limit = group_limit.count() > 0 ? group_limit : comm_->timeout();  // checked above
  return c10::make_intrusive<PlaitWork>(rank_, type, title, inputs, std::move(outputs),
                                        completer_, comm_, limit, group_id_);
}

CallOptions PlaitProcessGroup::options(std::chrono::milliseconds op_timeout) const {
  return {.algorithm = "",
          .timeout = op_timeout.count() > 0 ? op_timeout : timeout_.load(),
          .timed = CallRecorder::recording()};
}

c10::intrusive_ptr<c10d::Backend::Options> PlaitProcessGroup::getBackendOptions() {
  return c10::make_intrusive<Options>("plait", timeout_.load());
}

c10::intrusive_ptr<c10d::Backend> PlaitProcessGroup::split(
    const c10::intrusive_ptr<c10d::Store>& /*store*/, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  const auto limit = opts && opts->timeout.count() > 0 ? opts->timeout : timeout_.load();
  return subgroup(ranks, limit);
}

void PlaitProcessGroup::abort() {
  if (shut_down_) return;  // nothing left to abort
  comm_->abort("rank " + std::to_string(rank_) + ": the process group was aborted");
  control_->abort("rank " + std::to_string(rank_) + ": the process group was aborted");
}

const std::shared_ptr<Communicator>& PlaitProcessGroup::comm() const {
  TORCH_CHECK(!shut_down_, "plait: rank ", rank_,
              ": the process group was shut down (destroy_process_group)");
  return comm_;
}

const std::shared_ptr<Communicator>& PlaitProcessGroup::control() const {
  comm();
  return control_;
}

// destroy_process_group's normal end: later calls are refused, and this rank lets go of its
// communicators now, so that its transports shut down in order and the peers see it leave.
// torch may keep the group object itself alive until the interpreter ends (DDP's reducer
// holds it), and a process that exits with its transports up looks to its peers as if it
// had been killed. A call of this rank still in flight (an async call nobody waited for)
// ends with plait's "communicator destroyed before the operation completed".
void PlaitProcessGroup::shutdown() {
  if (shut_down_.exchange(true)) return;
  auto release = [this] {
    control_.reset();
    comm_.reset();
  };
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release nogil;
    release();
  } else {
    release();
  }
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::barrier(const c10d::BarrierOptions& opts) {
  auto work = make_work(c10d::OpType::BARRIER, "plait:barrier", {}, {});
  work->add_part(comm()->barrier(options(opts.timeout)));
  PlaitWork::launch(work);
  return work;
}

// Rank 0 hears from every rank within the timeout, then answers. As gloo: with
// wait_all_ranks every late rank is named; otherwise rank 0 takes the ranks in order and names
// the first that misses the deadline (or itself, when no time is left before it gets to one).
// Rank 0 then aborts the barrier's communicator, so the ranks that did arrive fail at once
// with the same message instead of waiting for an answer.
void PlaitProcessGroup::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  if (size_ == 1) return;
  const auto limit = opts.timeout == c10d::kUnsetTimeout ? timeout_.load() : opts.timeout;
  const CallOptions call{.timeout = limit + std::chrono::seconds(5)};
  uint8_t token = 1;
  if (rank_ != 0) {
    uint8_t ack = 0;
    auto sent = control()->send(&token, 1, DataType::kU8, 0, 1, call);
    auto answer = control()->recv(&ack, 1, DataType::kU8, 0, 2, call);
    try {
      sent->wait();
      answer->wait();
    } catch (const Error& e) {
      TORCH_CHECK(false, "Rank ", rank_,
                  " successfully reached monitoredBarrier, but received errors while waiting for "
                  "send/recv from rank 0: ", e.what());
    }
    return;
  }
  std::vector<uint8_t> got(size_);
  std::vector<WorkPtr> arrivals(size_);
  for (int r = 1; r < size_; ++r)
    arrivals[r] = control()->recv(&got[r], 1, DataType::kU8, r, 1, call);
  const auto until = std::chrono::steady_clock::now() + limit;
  auto arrived_by_deadline = [&](int r) {
    while (!arrivals[r]->test() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    return arrivals[r]->test();
  };
  const std::string in_time = " in " + std::to_string(limit.count()) + " ms";
  std::string failure;
  if (wait_all_ranks) {
    std::string late;
    int count = 0;
    for (int r = 1; r < size_; ++r)
      if (!arrived_by_deadline(r)) late += (count++ ? ", " : "") + std::to_string(r);
    if (count > 0)
      failure = std::string("[Rank 0]: Rank") + (count > 1 ? "s " : " ") + late +
                " failed to pass monitoredBarrier" + in_time;
  } else {
    std::string processed;
    for (int r = 1; r < size_ && failure.empty(); ++r) {
      if (std::chrono::steady_clock::now() >= until && !arrivals[r]->test()) {
        failure = "[Rank 0]: Rank 0 timed out in monitoredBarrier after " +
                  std::to_string(limit.count()) + " ms; ranks that arrived: " +
                  (processed.empty() ? "none" : processed);
      } else if (!arrived_by_deadline(r)) {
        failure = "[Rank 0]: Rank " + std::to_string(r) + " failed to pass monitoredBarrier" + in_time;
      }
      processed += (processed.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  if (!failure.empty()) {
    control()->abort(failure);
    TORCH_CHECK(false, failure);
  }
  for (int r = 1; r < size_; ++r)
    if (auto e = arrivals[r]->error()) throw *e;
  std::vector<WorkPtr> answers;
  for (int r = 1; r < size_; ++r)
    answers.push_back(control()->send(&token, 1, DataType::kU8, r, 2, call));
  for (auto& a : answers) a->wait();
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::point_to_point(
    std::vector<at::Tensor>& tensors, int peer, int tag, bool is_send, const char* title,
    c10d::OpType type) {
  const CallName op = what(is_send ? "send" : "recv");
  check_single(tensors, op);
  TORCH_CHECK(tag >= 0, op, ": tag must not be negative, got ", tag);
  at::Tensor& t = tensors[0];
  // A receive's range records the tensor it fills as its input, as gloo's does: the
  // profiler shows a point-to-point call's shape on both ends.
  auto work = make_work(type, title, tensors, is_send ? std::vector<at::Tensor>{} : tensors);
  const CallOptions call = options(timeout_.load());
  work->set_peer(peer, tag);
  if (is_send) {
    at::Tensor buffer = t.contiguous();
    work->keep(buffer);
    work->add_part(comm()->send(buffer.data_ptr(), nbytes(buffer), DataType::kU8, peer,
                               static_cast<uint32_t>(tag), call));
  } else {
    const Landing landing(t);
    work->keep(landing.buffer);
    work->add_part(comm()->recv(landing.buffer.data_ptr(), nbytes(landing.buffer),
                               DataType::kU8, peer, static_cast<uint32_t>(tag), call));
    if (landing.staged()) work->then([landing] { landing.land(); });
  }
  PlaitWork::launch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::send(std::vector<at::Tensor>& tensors, int dst,
                                                       int tag) {
  return point_to_point(tensors, dst, tag, true, "plait:send", c10d::OpType::SEND);
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::recv(std::vector<at::Tensor>& tensors, int src,
                                                       int tag) {
  return point_to_point(tensors, src, tag, false, "plait:recv", c10d::OpType::RECV);
}

c10::intrusive_ptr<c10d::Work> PlaitProcessGroup::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                int tag) {
  return point_to_point(tensors, kAnySource, tag, false, "plait:recvAnySource",
                        c10d::OpType::RECVANYSOURCE);
}

}  // namespace plait::torch_backend
