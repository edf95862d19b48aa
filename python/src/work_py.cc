#include "work_py.h"

#include <algorithm>

#include "core/log.h"

namespace py = pybind11;

namespace plait::python {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

void InFlight::adopt(WorkPtr work, std::vector<BufferRef> buffers) {
  entries_.push_back({std::move(work), std::move(buffers)});
}

void InFlight::reap() {
  std::erase_if(entries_, [](const Entry& e) { return e.work->test(); });
}

void InFlight::close() {
  closed_ = true;
  for (Entry& e : entries_) {
    if (e.work->test()) continue;
    // Only when something else still held the C++ communicator: then its operations run on,
    // up to their own deadline.
    py::gil_scoped_release nogil;
    try {
      e.work->wait();
    } catch (const Error&) {
      // Its Work object is gone, so nobody is left to report the failure to.
    }
  }
  for (Entry& e : entries_)
    if (!e.work->test()) keep_forever(std::move(e.buffers));
  entries_.clear();
}

void keep_forever(std::vector<BufferRef> buffers) {
  log(LogLevel::kWarn, "python: an operation neither finished nor failed after its Work and "
      "its communicator were dropped; its ", buffers.size(),
      " buffer(s) stay pinned until the process exits");
  new std::vector<BufferRef>(std::move(buffers));  // deliberately never freed
}

PyWork::PyWork(WorkPtr work, std::vector<BufferRef> buffers, std::shared_ptr<InFlight> in_flight)
    : work_(std::move(work)), buffers_(std::move(buffers)), in_flight_(std::move(in_flight)) {}

PyWork::~PyWork() {
  if (!work_ || buffers_.empty() || work_->test()) return;
  if (in_flight_ && !in_flight_->closed())
    in_flight_->adopt(std::move(work_), std::move(buffers_));
  else
    keep_forever(std::move(buffers_));
}

void PyWork::wait(std::optional<double> timeout_s) {
  try {
    py::gil_scoped_release nogil;
    if (timeout_s)
      work_->wait(to_ms(*timeout_s));
    else
      work_->wait();
  } catch (const Error&) {
    settle();
    throw;
  }
  settle();
}

bool PyWork::test() {
  bool done = work_->test();
  settle();
  return done;
}

void PyWork::settle() {
  if (work_->test()) buffers_.clear();
  if (in_flight_) in_flight_->reap();
}

}  // namespace plait::python
