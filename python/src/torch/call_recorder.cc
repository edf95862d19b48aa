#include "call_recorder.h"

#include <algorithm>

namespace plait::torch_backend {

std::atomic<bool> CallRecorder::on_{false};

namespace {

struct Records {
  std::mutex mu;
  std::vector<std::shared_ptr<CallRecord>> calls;
};

// Never destroyed: a call may end in a pool thread while static objects are destroyed.
Records& records() {
  static auto* const r = new Records;
  return *r;
}

int64_t ns_of(std::chrono::steady_clock::time_point t) {
  return t == std::chrono::steady_clock::time_point{}
             ? 0
             : std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void CallRecorder::start() {
  std::lock_guard lock(records().mu);
  records().calls.clear();
  on_.store(true);
}

std::vector<FinishedCall> CallRecorder::stop() {
  std::vector<std::shared_ptr<CallRecord>> calls;
  {
    std::lock_guard lock(records().mu);
    on_.store(false);
    calls.swap(records().calls);
  }
  std::vector<FinishedCall> out;
  out.reserve(calls.size());
  for (const auto& c : calls) {
    std::lock_guard lock(c->mu);
    FinishedCall f{c->op, c->group, c->peer, c->tag, c->bytes, "", c->issued_ns, 0, 0, {}};
    // The call's span is its parts': from the first start to the last finish.
    bool all_done = !c->parts.empty();
    for (const auto& part : c->parts) {
      const WorkTimes t = part->times();  // the defaults until done, or when not timed
      const int64_t s = ns_of(t.started), e = ns_of(t.finished);
      if (!e) {
        all_done = false;
        continue;
      }
      if (s && (!f.started_ns || s < f.started_ns)) f.started_ns = s;
      f.finished_ns = std::max(f.finished_ns, e);
      if (f.algorithm.empty()) f.algorithm = part->algorithm();
    }
    if (!all_done) f.finished_ns = 0;
    f.waits = c->waits;
    out.push_back(std::move(f));
  }
  return out;
}

std::shared_ptr<CallRecord> CallRecorder::open(const char* op, int group, int64_t bytes) {
  auto record = std::make_shared<CallRecord>();
  record->op = op;
  record->group = group;
  record->bytes = bytes;
  record->issued_ns = now_ns();
  std::lock_guard lock(records().mu);
  if (!on_.load() || records().calls.size() >= kMaxRecords) return nullptr;
  records().calls.push_back(record);
  return record;
}

int CallRecorder::next_group_id() {
  static std::atomic<int> next{0};
  return next++;
}

}  // namespace plait::torch_backend
