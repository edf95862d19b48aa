#include "coll/schedule/check.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>
#include <vector>

#include "coll/schedule/builder.h"
#include "coll/schedule/check_internal.h"
#include "plait/error.h"

namespace plait::coll {

namespace {

using check_detail::is_transfer;
using check_detail::Pairs;

std::string slice_text(Slice s) {
  const char* name = s.buffer == BufferId::kInput    ? "in"
                     : s.buffer == BufferId::kOutput ? "out"
                                                     : "scratch";
  return std::string(name) + "[" + std::to_string(s.offset) + ",+" + std::to_string(s.count) + ")";
}

std::string region_text(const Region& r) {
  const char* name = r.buffer == PhysBuffer::kInput    ? "in"
                     : r.buffer == PhysBuffer::kOutput ? "out"
                                                       : "scratch";
  return std::string(name) + "[" + std::to_string(r.begin) + "," + std::to_string(r.end) + ")";
}

// The slices a step touches, each with whether it is written.
struct Touch {
  Slice slice;
  bool write;
};
int touches(const Step& s, Touch out[2]) {
  switch (s.kind) {
    case StepKind::kSend: out[0] = {s.src, false}; return 1;
    case StepKind::kRecv: out[0] = {s.dst, true}; return 1;
    case StepKind::kRecvReduce:
    case StepKind::kCopy:
    case StepKind::kReduce:
      out[0] = {s.src, s.kind == StepKind::kRecvReduce};
      out[1] = {s.dst, true};
      return 2;
  }
  return 0;
}

std::string where_text(int rank, const Schedule& s, StepId id) {
  return "rank " + std::to_string(rank) + " step " + std::to_string(id) + " (" +
         describe_step(s, id) + ")";
}

std::string check_args(std::span<const CollArgs> args, std::span<const Schedule> schedules) {
  if (args.empty()) return "no ranks";
  if (args.size() != schedules.size()) {
    return std::to_string(args.size()) + " argument sets for " +
           std::to_string(schedules.size()) + " schedules";
  }
  const CollArgs& a0 = args[0];
  for (size_t r = 0; r < args.size(); ++r) {
    const CollArgs& a = args[r];
    try {
      validate_args(a);
    } catch (const Error& e) {
      return "rank " + std::to_string(r) + ": " + e.message();
    }
    if (a.rank != static_cast<int>(r) || a.size != static_cast<int>(args.size())) {
      return "args[" + std::to_string(r) + "] says rank " + std::to_string(a.rank) + " of " +
             std::to_string(a.size) + ", expected rank " + std::to_string(r) + " of " +
             std::to_string(args.size());
    }
    if (a.op != a0.op || a.dtype != a0.dtype || a.redop != a0.redop || a.root != a0.root ||
        a.count != a0.count || a.host_of != a0.host_of) {
      return "rank " + std::to_string(r) + " describes a different call than rank 0";
    }
  }
  return {};
}

std::string check_structure(const CollArgs& args, const Schedule& s) {
  const BufferLayout layout = layout_of(args);
  auto bound = [&](BufferId b) {
    return b == BufferId::kInput ? layout.input_count
           : b == BufferId::kOutput ? layout.output_count
                                    : s.scratch_count;
  };
  for (StepId i = 0; i < s.steps.size(); ++i) {
    const Step& st = s.steps[i];
    const std::string at = where_text(args.rank, s, i);
    if (static_cast<size_t>(st.dep_begin) + st.dep_count > s.deps.size()) {
      return at + ": dependency list runs past the schedule's pool";
    }
    for (StepId d : s.deps_of(st)) {
      if (d >= i) return at + ": depends on step " + std::to_string(d) + ", which is not earlier";
    }
    if (is_transfer(st.kind) && (st.peer < 0 || st.peer >= args.size || st.peer == args.rank)) {
      return at + ": peer " + std::to_string(st.peer) + " is not another rank of " +
             std::to_string(args.size);
    }
    Touch t[2];
    const int nt = touches(st, t);
    for (int k = 0; k < nt; ++k) {
      const Slice& sl = t[k].slice;
      const size_t limit = bound(sl.buffer);
      if (sl.offset > limit || sl.count > limit - sl.offset) {
        return at + ": " + slice_text(sl) + " is outside the buffer's " + std::to_string(limit) +
               " elements";
      }
      if (t[k].write && sl.buffer == BufferId::kInput && sl.count > 0 && !layout.in_place) {
        return at + ": writes the input of an out-of-place call";
      }
    }
    if (nt == 2) {
      if (t[0].slice.count != t[1].slice.count) {
        return at + ": source and destination differ in length";
      }
      if (overlap(resolve(layout, t[0].slice), resolve(layout, t[1].slice))) {
        return at + ": source and destination overlap";
      }
    }
  }
  return {};
}

// "Is step x ordered before step y?" for the race check. Dependencies only point to earlier
// steps, so x < y can reach y only through steps numbered between them. Small schedules get
// the full closure (one ancestor bitset per step, steps^2/8 bytes); large ones answer each
// query with a backward search from y that never goes below x, which stays local because
// builders' dependencies are.
class Reachability {
 public:
  explicit Reachability(const Schedule& s) : s_(s), n_(s.steps.size()) {
    if (n_ > kBitsetLimit) {
      stamp_.assign(n_, 0);
      return;
    }
    words_ = (n_ + 63) / 64;
    anc_.assign(n_ * words_, 0);
    for (size_t j = 0; j < n_; ++j) {
      uint64_t* row = &anc_[j * words_];
      for (StepId d : s.deps_of(s.steps[j])) {
        const uint64_t* dr = &anc_[d * words_];
        for (size_t w = 0; w < words_; ++w) row[w] |= dr[w];
        row[d / 64] |= uint64_t{1} << (d % 64);
      }
    }
  }

  bool ordered(StepId x, StepId y) {
    if (x > y) std::swap(x, y);
    if (!anc_.empty()) return (anc_[y * words_ + x / 64] >> (x % 64)) & 1;
    ++generation_;
    todo_.assign(1, y);
    while (!todo_.empty()) {
      const StepId z = todo_.back();
      todo_.pop_back();
      for (StepId d : s_.deps_of(s_.steps[z])) {
        if (d == x) return true;
        if (d < x || stamp_[d] == generation_) continue;
        stamp_[d] = generation_;
        todo_.push_back(d);
      }
    }
    return false;
  }

 private:
  static constexpr size_t kBitsetLimit = 8192;
  const Schedule& s_;
  size_t n_;
  size_t words_ = 0;
  std::vector<uint64_t> anc_;
  std::vector<uint32_t> stamp_;
  uint32_t generation_ = 0;
  std::vector<StepId> todo_;
};

// Checks every conflicting pair of accesses is ordered without looking at all pairs. Walk the
// steps in index order (a topological order) over elementary intervals of each buffer,
// keeping each interval's last writer and its readers since. A read must be ordered after
// the last writer; a write after the readers since, or the last writer if none. If all
// those hold, every conflicting pair is ordered by transitivity (a write is ordered after
// everything before it on its interval, through the chain of writes and reads), and if one
// fails, that pair is itself a race. So the check is exact and near-linear.
std::string check_races(const CollArgs& args, const Schedule& s) {
  struct Access {
    Region region;
    bool write;
  };
  const BufferLayout layout = layout_of(args);
  std::vector<std::vector<Access>> per_step(s.steps.size());
  std::vector<size_t> cuts[3];
  for (StepId i = 0; i < s.steps.size(); ++i) {
    Touch t[2];
    const int nt = touches(s.steps[i], t);
    for (int k = 0; k < nt; ++k) {
      const Region r = resolve(layout, t[k].slice);
      if (r.empty()) continue;
      per_step[i].push_back({r, t[k].write});
      cuts[static_cast<int>(r.buffer)].push_back(r.begin);
      cuts[static_cast<int>(r.buffer)].push_back(r.end);
    }
  }
  struct Interval {
    std::optional<StepId> writer;
    std::vector<StepId> readers;
  };
  std::vector<Interval> state[3];
  for (int b = 0; b < 3; ++b) {
    std::sort(cuts[b].begin(), cuts[b].end());
    cuts[b].erase(std::unique(cuts[b].begin(), cuts[b].end()), cuts[b].end());
    state[b].resize(cuts[b].empty() ? 0 : cuts[b].size() - 1);
  }
  Reachability reach(s);
  auto race = [&](StepId earlier, bool earlier_writes, StepId later, bool later_writes,
                  const Region& r) {
    return "data race on rank " + std::to_string(args.rank) + ": step " +
           std::to_string(earlier) + " (" + describe_step(s, earlier) + ") " +
           (earlier_writes ? "writes" : "reads") + " and step " + std::to_string(later) + " (" +
           describe_step(s, later) + ") " + (later_writes ? "writes" : "reads") + " " +
           region_text(r) + ", and no dependency orders them";
  };
  for (StepId i = 0; i < s.steps.size(); ++i) {
    for (const Access& a : per_step[i]) {
      const int b = static_cast<int>(a.region.buffer);
      const auto& cut = cuts[b];
      size_t k = static_cast<size_t>(std::lower_bound(cut.begin(), cut.end(), a.region.begin) -
                                     cut.begin());
      for (; k + 1 < cut.size() && cut[k] < a.region.end; ++k) {
        Interval& iv = state[b][k];
        const Region here{a.region.buffer, cut[k], cut[k + 1]};
        if (a.write && !iv.readers.empty()) {
          for (StepId rd : iv.readers) {
            if (rd != i && !reach.ordered(rd, i)) return race(rd, false, i, true, here);
          }
        } else if (iv.writer && *iv.writer != i && !reach.ordered(*iv.writer, i)) {
          return race(*iv.writer, true, i, a.write, here);
        }
      }
    }
    // Update after checking all of the step's accesses: its own read and write of one
    // interval (recv_reduce's accumulator) do not race with each other.
    for (const Access& a : per_step[i]) {
      const int b = static_cast<int>(a.region.buffer);
      const auto& cut = cuts[b];
      size_t k = static_cast<size_t>(std::lower_bound(cut.begin(), cut.end(), a.region.begin) -
                                     cut.begin());
      for (; k + 1 < cut.size() && cut[k] < a.region.end; ++k) {
        Interval& iv = state[b][k];
        if (a.write) {
          iv.writer = i;
          iv.readers.clear();
        } else if (iv.readers.empty() || iv.readers.back() != i) {
          iv.readers.push_back(i);
        }
      }
    }
  }
  return {};
}

}  // namespace

namespace check_detail {

std::string match_pairs(std::span<const Schedule> schedules, Pairs* pairs) {
  const int n = static_cast<int>(schedules.size());
  pairs->n = n;
  pairs->sends.assign(static_cast<size_t>(n * n), {});
  pairs->recvs.assign(static_cast<size_t>(n * n), {});
  pairs->slot.assign(static_cast<size_t>(n), {});
  for (int r = 0; r < n; ++r) {
    const Schedule& s = schedules[static_cast<size_t>(r)];
    auto& slot = pairs->slot[static_cast<size_t>(r)];
    slot.assign(s.steps.size(), 0);
    for (StepId i = 0; i < s.steps.size(); ++i) {
      const Step& st = s.steps[i];
      if (!is_transfer(st.kind)) continue;
      auto& list = st.kind == StepKind::kSend ? pairs->sends[static_cast<size_t>(r * n + st.peer)]
                                              : pairs->recvs[static_cast<size_t>(st.peer * n + r)];
      slot[i] = static_cast<uint32_t>(list.size());
      list.push_back(i);
    }
  }
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      const auto& snd = pairs->sends[static_cast<size_t>(a * n + b)];
      const auto& rcv = pairs->recvs[static_cast<size_t>(a * n + b)];
      if (snd.size() != rcv.size()) {
        return "rank " + std::to_string(a) + " sends " + std::to_string(snd.size()) +
               " messages to rank " + std::to_string(b) + ", which posts " +
               std::to_string(rcv.size()) + " receives from it";
      }
      for (size_t k = 0; k < snd.size(); ++k) {
        const Step& s = schedules[static_cast<size_t>(a)].steps[snd[k]];
        const Step& t = schedules[static_cast<size_t>(b)].steps[rcv[k]];
        const size_t got = t.kind == StepKind::kRecv ? t.dst.count : t.src.count;
        if (s.src.count != got) {
          return "message #" + std::to_string(k) + " from rank " + std::to_string(a) +
                 " to rank " + std::to_string(b) + ": " +
                 where_text(a, schedules[static_cast<size_t>(a)], snd[k]) + " sends " +
                 std::to_string(s.src.count) + " elements, " +
                 where_text(b, schedules[static_cast<size_t>(b)], rcv[k]) + " expects " +
                 std::to_string(got);
        }
      }
    }
  }
  return {};
}

}  // namespace check_detail

std::string describe_step(const Schedule& schedule, StepId id) {
  if (id >= schedule.steps.size()) return "no such step";
  const Step& s = schedule.steps[id];
  std::string text(to_string(s.kind));
  switch (s.kind) {
    case StepKind::kSend: return text + " to " + std::to_string(s.peer) + " " + slice_text(s.src);
    case StepKind::kRecv: return text + " from " + std::to_string(s.peer) + " " + slice_text(s.dst);
    case StepKind::kRecvReduce:
      return text + " from " + std::to_string(s.peer) + " via " + slice_text(s.src) + " into " +
             slice_text(s.dst);
    case StepKind::kCopy:
    case StepKind::kReduce: return text + " " + slice_text(s.src) + " -> " + slice_text(s.dst);
  }
  return text;
}

CheckResult validate_schedules(std::span<const CollArgs> args,
                               std::span<const Schedule> schedules, bool races) {
  CheckResult result;
  for (const Schedule& s : schedules) result.steps += s.steps.size();
  std::string err = check_args(args, schedules);
  for (size_t r = 0; err.empty() && r < args.size(); ++r) err = check_structure(args[r], schedules[r]);
  Pairs pairs;
  if (err.empty()) err = check_detail::match_pairs(schedules, &pairs);
  for (size_t r = 0; races && err.empty() && r < args.size(); ++r) {
    err = check_races(args[r], schedules[r]);
  }
  if (!err.empty()) {
    result.ok = false;
    result.error = std::move(err);
  }
  return result;
}

CheckResult check_schedules(std::span<const CollArgs> args, std::span<const Schedule> schedules,
                            std::span<const RankBuffers> buffers, const CheckOptions& options) {
  CheckResult result = validate_schedules(args, schedules, options.check_races);
  if (!result.ok || !options.execute) return result;
  return check_detail::run_schedules(args, schedules, buffers, options);
}

}  // namespace plait::coll
