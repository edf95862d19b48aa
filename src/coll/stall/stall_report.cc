#include "coll/stall/stall_report.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "core/rank_list.h"

namespace plait::coll {
namespace {

// Parses the next space-separated unsigned integer of `line` at `pos`.
bool next_number(std::string_view line, size_t& pos, uint64_t& out) {
  while (pos < line.size() && line[pos] == ' ') ++pos;
  const char* begin = line.data() + pos;
  auto [end, ec] = std::from_chars(begin, line.data() + line.size(), out);
  if (ec != std::errc() || end == begin) return false;
  pos = static_cast<size_t>(end - line.data());
  return true;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

std::string ranks_word(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

}  // namespace

// "C|I|N seq op dtype redop root+1 count waited_ms": in a collective (C), in none after
// some (I), or in none yet (N).
std::string encode_state(const RankState& s) {
  std::ostringstream out;
  out << (s.in_collective ? 'C' : s.started ? 'I' : 'N') << ' ' << s.current.seq << ' '
      << static_cast<unsigned>(s.current.op) << ' ' << static_cast<unsigned>(s.current.dtype)
      << ' ' << static_cast<unsigned>(s.current.redop) << ' ' << s.current.root + 1 << ' '
      << s.current.count << ' ' << static_cast<uint64_t>(s.waited_s * 1000);
  return out.str();
}

std::optional<RankState> decode_state(std::string_view line) {
  if (line.size() < 2 || (line[0] != 'C' && line[0] != 'I' && line[0] != 'N') || line[1] != ' ')
    return std::nullopt;
  uint64_t f[7];
  size_t pos = 1;
  for (uint64_t& v : f)
    if (!next_number(line, pos, v)) return std::nullopt;
  if (pos != line.size()) return std::nullopt;
  if (f[1] > static_cast<uint64_t>(CollOp::kBarrier) || f[2] > static_cast<uint64_t>(DataType::kI64) ||
      f[3] > static_cast<uint64_t>(ReduceOp::kAvg) ||
      f[4] > static_cast<uint64_t>(std::numeric_limits<int>::max()))
    return std::nullopt;
  RankState s;
  s.answered = true;
  s.in_collective = line[0] == 'C';
  s.started = line[0] != 'N';
  s.current.seq = f[0];
  s.current.op = static_cast<CollOp>(f[1]);
  s.current.dtype = static_cast<DataType>(f[2]);
  s.current.redop = static_cast<ReduceOp>(f[3]);
  s.current.root = static_cast<int>(f[4]) - 1;
  s.current.count = f[5];
  s.waited_s = static_cast<double>(f[6]) / 1000.0;
  return s;
}

std::string stall_summary(const std::vector<RankState>& states) {
  std::optional<uint64_t> target;
  for (const RankState& s : states)
    if (s.answered && s.in_collective) target = std::max(target.value_or(0), s.current.seq);
  // Ranks that did not call the target, grouped by what they said (in order of first rank).
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> behind;
  std::vector<int> in_it, missing;
  double waited = 0;
  Signature target_sig;
  for (size_t r = 0; r < states.size(); ++r) {
    const RankState& s = states[r];
    const int rank = static_cast<int>(r);
    std::string what;
    if (!s.answered) {
      what = "did not answer (stopped, hung, or cut off from the store)";
    } else if (s.in_collective && s.current.seq == target) {
      in_it.push_back(rank);
      waited = std::max(waited, s.waited_s);
      target_sig = s.current;
      continue;
    } else if (s.in_collective) {
      what = "in " + s.current.describe() + " for " + seconds(s.waited_s);
    } else if (!s.started) {
      what = "in no collective (none finished yet)";
    } else {
      what = "in no collective (the last it finished: " + s.current.describe() + ")";
    }
    missing.push_back(rank);
    auto [it, fresh] = behind.try_emplace(what);
    if (fresh) order.push_back(what);
    it->second.push_back(rank);
  }
  std::ostringstream out;
  if (!target) {
    out << "no rank is in a collective";
  } else {
    out << target_sig.describe() << " has waited " << seconds(waited) << " on "
        << ranks_word(in_it);
    if (missing.empty())
      out << ", every rank of the communicator: all called it, and its data is not moving "
             "(a lost or slow link, or a rank whose progress is stuck)";
    else
      out << "; " << ranks_word(missing) << (missing.size() == 1 ? " has" : " have")
          << " not called it";
  }
  const char* sep = ": ";
  for (const std::string& what : order) {
    const std::vector<int>& ranks = behind[what];
    const char* verb = !what.starts_with("in ") ? " " : ranks.size() == 1 ? " is " : " are ";
    out << sep << ranks_word(ranks) << verb << what;
    sep = "; ";
  }
  return out.str();
}

}  // namespace plait::coll
