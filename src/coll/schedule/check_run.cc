// Part (c) of the checker: all ranks' schedules run together on real buffers, one step at a
// time in a seeded random order, with rendezvous sends. The seed of the simulator: replace
// "one step at a time" with a clock and a link model and this is a schedule replay.
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "coll/schedule/builder.h"
#include "coll/schedule/check_internal.h"
#include "core/reduce.h"

namespace plait::coll::check_detail {
namespace {

class Machine {
 public:
  Machine(std::span<const CollArgs> args, std::span<const Schedule> schedules,
          std::span<const RankBuffers> buffers, const Pairs& pairs, const CheckOptions& options)
      : args_(args), sched_(schedules), pairs_(pairs), options_(options), rng_(options.seed) {
    const size_t n = schedules.size();
    esz_ = dtype_size(args[0].dtype);
    ranks_.resize(n);
    for (size_t r = 0; r < n; ++r) {
      RankState& st = ranks_[r];
      const Schedule& s = schedules[r];
      st.layout = layout_of(args[r]);
      st.out = buffers[r].output.data();
      st.in = st.layout.in_place ? st.out + st.layout.input_offset * esz_ : buffers[r].input.data();
      st.scratch.resize(s.scratch_count * esz_);
      for (auto& byte : st.scratch) byte = static_cast<std::byte>(rng_() & 0xff);
      st.remaining.resize(s.steps.size());
      st.posted.assign(s.steps.size(), false);
      st.done.assign(s.steps.size(), false);
      st.first_dependent.assign(s.steps.size() + 1, 0);
      for (const Step& step : s.steps) {
        for (StepId d : s.deps_of(step)) ++st.first_dependent[d + 1];
      }
      for (size_t i = 0; i < s.steps.size(); ++i) st.first_dependent[i + 1] += st.first_dependent[i];
      st.dependents.resize(s.deps.size());
      std::vector<uint32_t> fill(st.first_dependent.begin(), st.first_dependent.end() - 1);
      for (StepId i = 0; i < s.steps.size(); ++i) {
        st.remaining[i] = s.steps[i].dep_count;
        for (StepId d : s.deps_of(s.steps[i])) st.dependents[fill[d]++] = i;
      }
      total_ += s.steps.size();
    }
  }

  CheckResult run() {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      for (StepId i = 0; i < sched_[r].steps.size(); ++i) {
        if (ranks_[r].remaining[i] == 0) post(static_cast<int>(r), i);
      }
    }
    while (!ready_.empty()) {
      const size_t pick = rng_() % ready_.size();
      const Event e = ready_[pick];
      ready_[pick] = ready_.back();
      ready_.pop_back();
      fire(e);
    }
    CheckResult result;
    result.steps = total_;
    result.executed = executed_;
    if (executed_ < total_) {
      result.ok = false;
      result.error = deadlock_report();
    }
    return result;
  }

 private:
  struct RankState {
    BufferLayout layout;
    std::byte* out = nullptr;
    std::byte* in = nullptr;
    std::vector<std::byte> scratch;
    std::vector<uint32_t> remaining;
    std::vector<bool> posted, done;
    std::vector<uint32_t> first_dependent;  // CSR over dependents
    std::vector<StepId> dependents;
  };
  struct Event {
    int rank;     // for a transfer: the sender
    StepId step;  // for a transfer: the send
  };

  std::byte* ptr(int rank, Slice s) {
    RankState& st = ranks_[static_cast<size_t>(rank)];
    switch (s.buffer) {
      case BufferId::kInput: return st.in + s.offset * esz_;
      case BufferId::kOutput: return st.out + s.offset * esz_;
      case BufferId::kScratch: return st.scratch.data() + s.offset * esz_;
    }
    return nullptr;
  }

  // The receive matching a send, or the send matching a receive.
  std::pair<int, StepId> partner(int rank, StepId id) const {
    const Step& st = sched_[static_cast<size_t>(rank)].steps[id];
    const uint32_t k = pairs_.slot[static_cast<size_t>(rank)][id];
    const int n = pairs_.n;
    if (st.kind == StepKind::kSend) {
      return {st.peer, pairs_.recvs[static_cast<size_t>(rank * n + st.peer)][k]};
    }
    return {st.peer, pairs_.sends[static_cast<size_t>(st.peer * n + rank)][k]};
  }

  void post(int rank, StepId id) {
    RankState& st = ranks_[static_cast<size_t>(rank)];
    st.posted[id] = true;
    const Step& step = sched_[static_cast<size_t>(rank)].steps[id];
    if (!is_transfer(step.kind)) {
      ready_.push_back({rank, id});
      return;
    }
    auto [peer, other] = partner(rank, id);
    if (!ranks_[static_cast<size_t>(peer)].posted[other]) return;
    if (step.kind == StepKind::kSend) ready_.push_back({rank, id});
    else ready_.push_back({peer, other});
  }

  void complete(int rank, StepId id) {
    RankState& st = ranks_[static_cast<size_t>(rank)];
    st.done[id] = true;
    ++executed_;
    for (uint32_t k = st.first_dependent[id]; k < st.first_dependent[id + 1]; ++k) {
      const StepId d = st.dependents[k];
      if (--st.remaining[d] == 0) post(rank, d);
    }
  }

  void fire(const Event& e) {
    const CollArgs& a = args_[0];
    const Step& step = sched_[static_cast<size_t>(e.rank)].steps[e.step];
    switch (step.kind) {
      case StepKind::kCopy:
        std::memcpy(ptr(e.rank, step.dst), ptr(e.rank, step.src), step.src.count * esz_);
        break;
      case StepKind::kReduce:
        reduce_inplace(a.dtype, a.redop, ptr(e.rank, step.dst), ptr(e.rank, step.src),
                       step.src.count);
        break;
      case StepKind::kSend: {
        auto [peer, rid] = partner(e.rank, e.step);
        const Step& recv = sched_[static_cast<size_t>(peer)].steps[rid];
        const Slice land = recv.kind == StepKind::kRecv ? recv.dst : recv.src;
        std::memcpy(ptr(peer, land), ptr(e.rank, step.src), step.src.count * esz_);
        if (recv.kind == StepKind::kRecvReduce) {
          reduce_inplace(a.dtype, a.redop, ptr(peer, recv.dst), ptr(peer, recv.src),
                         recv.src.count);
        }
        complete(e.rank, e.step);
        complete(peer, rid);
        return;
      }
      default: break;  // receives fire through their send
    }
    complete(e.rank, e.step);
  }

  std::string deadlock_report() {
    std::ostringstream out;
    out << "deadlock: " << executed_ << " of " << total_
        << " steps ran, and no remaining step can run.";
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const RankState& st = ranks_[r];
      const Schedule& s = sched_[r];
      size_t left = 0, listed = 0;
      std::ostringstream steps;
      for (StepId i = 0; i < s.steps.size(); ++i) {
        if (st.done[i]) continue;
        ++left;
        if (listed >= options_.max_listed_steps) continue;
        const Step& step = s.steps[i];
        if (st.posted[i] && is_transfer(step.kind)) {
          auto [peer, other] = partner(static_cast<int>(r), i);
          steps << "\n    step " << i << " (" << describe_step(s, i) << ") is posted; its match, "
                << "rank " << peer << " step " << other << ", is not";
          ++listed;
        } else if (!st.posted[i]) {
          bool frontier = true;  // list only steps whose unfinished dependencies all ran
          std::vector<StepId> waiting;
          for (StepId d : s.deps_of(step)) {
            if (!st.done[d]) {
              waiting.push_back(d);
              if (!st.posted[d]) frontier = false;
            }
          }
          if (!frontier) continue;
          steps << "\n    step " << i << " (" << describe_step(s, i) << ") waits for step";
          for (StepId d : waiting) steps << " " << d;
          ++listed;
        }
      }
      if (left) out << "\n  rank " << r << ": " << left << " steps left" << steps.str();
    }
    return out.str();
  }

  std::span<const CollArgs> args_;
  std::span<const Schedule> sched_;
  const Pairs& pairs_;
  const CheckOptions& options_;
  std::mt19937_64 rng_;
  size_t esz_ = 1;
  std::vector<RankState> ranks_;
  std::vector<Event> ready_;
  size_t total_ = 0;
  size_t executed_ = 0;
};

std::string check_buffers(std::span<const CollArgs> args, std::span<const RankBuffers> buffers) {
  if (buffers.size() != args.size()) return "buffers given for a different number of ranks";
  for (size_t r = 0; r < args.size(); ++r) {
    const BufferLayout l = layout_of(args[r]);
    const size_t esz = dtype_size(args[r].dtype);
    const size_t out_need = l.buffer_count() * esz;
    if (buffers[r].output.size() < out_need) {
      return "rank " + std::to_string(r) + ": output buffer has " +
             std::to_string(buffers[r].output.size()) + " bytes, the layout needs " +
             std::to_string(out_need);
    }
    if (!l.in_place && buffers[r].input.size() < l.input_count * esz) {
      return "rank " + std::to_string(r) + ": input buffer has " +
             std::to_string(buffers[r].input.size()) + " bytes, the layout needs " +
             std::to_string(l.input_count * esz);
    }
  }
  return {};
}

}  // namespace

CheckResult run_schedules(std::span<const CollArgs> args, std::span<const Schedule> schedules,
                          std::span<const RankBuffers> buffers, const CheckOptions& options) {
  if (std::string err = check_buffers(args, buffers); !err.empty()) {
    CheckResult r;
    r.ok = false;
    r.error = std::move(err);
    return r;
  }
  Pairs pairs;
  match_pairs(schedules, &pairs);
  Machine machine(args, schedules, buffers, pairs, options);
  return machine.run();
}

}  // namespace plait::coll::check_detail
