// `plait sort run --in DIR --out DIR [--mode pull|push] [--memory BYTES] [--json FILE]`,
// under plait run -n R: the distributed sort. Each rank reads its share of DIR's input files
// (file i goes to rank i mod R), samples keys for range partitions, shuffles
// (plait/shuffle.h), sorts its partition and writes DIR/part-RRRRR; the part files in rank
// order are the sorted whole.
//
// In memory (no budget): the share read whole, mapped once, the partition received whole
// and sorted. With a budget (--memory, PLAIT_SHUFFLE_MEMORY): the share read and mapped a
// chunk at a time, each chunk a sorted run, runs past the budget spilled; the partition
// arrives merged from the runs and is written as it comes, so a rank's memory stays near
// three budgets however large its share or partition.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "plait/bootstrap.h"
#include "plait/error.h"
#include "plait/rdma.h"
#include "plait/shuffle.h"
#include "plait/sort/files.h"
#include "plait/sort/phase_progress.h"
#include "shuffle/all_gather.h"
#include "shuffle/gensort.h"
#include "shuffle/range_partition.h"
#include "shuffle/record_file.h"
#include "shuffle/record_sort.h"
#include "shuffle/shuffle_settings.h"

namespace plait::cli {
namespace {

using Clock = std::chrono::steady_clock;
using shuffle::kRecordBytes;

// The phases, in order; each rank times its own, the report takes the slowest rank's. "sort"
// orders the keys; "write" gathers the records in that order and writes them, piece by piece.
constexpr const char* kPhases[] = {"read", "sample", "map", "shuffle", "sort", "write"};
constexpr int kPhaseCount = 6;
constexpr uint64_t kSampleTag = uint64_t{1} << 62, kReportTag = kSampleTag + 1,
                   kMappedTag = kSampleTag + 2;

// Every rank has mapped: the shuffle phase is then the exchange alone, and the wait for the
// slowest mapper is counted where it was spent, in the map phase (bench/shuffle_testbed.sh
// compares the shuffle phase with the links' bound).
void all_mapped(rdma::Fabric& fabric) { shuffle::all_gather(fabric, std::vector<uint8_t>(1), kMappedTag); }

struct Options {
  std::string in, out, json;
  shuffle::ShuffleMode mode = shuffle::ShuffleMode::kPull;
  size_t memory = 0;  // 0: PLAIT_SHUFFLE_MEMORY's
  bool memory_given = false;
  bool direct_io = true;  // PLAIT_SHUFFLE_DIRECT_IO
};

Options parse(const std::vector<std::string>& args) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw invalid_usage(a + " needs a value");
      return args[++i];
    };
    if (a == "--in") o.in = value();
    else if (a == "--out") o.out = value();
    else if (a == "--json") o.json = value();
    else if (a == "--memory") {
      o.memory = parse_bytes(value());
      o.memory_given = true;
    }
    else if (a == "--mode") {
      const std::string& m = value();
      if (m != "pull" && m != "push") throw invalid_usage("--mode takes pull or push, not '" + m + "'");
      o.mode = m == "push" ? shuffle::ShuffleMode::kPush : shuffle::ShuffleMode::kPull;
    } else {
      throw invalid_usage("sort run: unknown argument '" + a + "'");
    }
  }
  if (o.in.empty() || o.out.empty()) throw invalid_usage("sort run needs --in and --out");
  return o;
}

enum Phase { kRead, kSample, kMap, kShuffle, kSort, kWrite };

class PhaseClock {
 public:
  // The time since the last call goes to `phase`.
  void lap(Phase phase) {
    const auto now = Clock::now();
    seconds_[phase] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  // Time that lap() gave `from` but was spent on `to` (writes made inside the merge).
  void move(Phase from, Phase to, double s) {
    seconds_[from] -= s;
    seconds_[to] += s;
  }
  const double* seconds() const { return seconds_; }

 private:
  Clock::time_point last_ = Clock::now();
  double seconds_[kPhaseCount] = {};
};

std::vector<std::string> share_files(const std::string& dir, int rank, int size) {
  const std::vector<std::string> files = record_files(dir, "input");
  std::vector<std::string> mine;
  for (size_t i = static_cast<size_t>(rank); i < files.size(); i += static_cast<size_t>(size))
    mine.push_back(files[i]);
  return mine;
}

shuffle::Buffer read_share(const std::string& dir, bool direct, int rank, int size,
                           PhaseProgress& progress) {
  std::vector<shuffle::RecordReader> mine;
  uint64_t records = 0;
  for (const std::string& f : share_files(dir, rank, size)) {
    mine.emplace_back(f, direct);
    records += mine.back().records();
  }
  progress.begin("read", records * kRecordBytes);
  shuffle::Buffer data(records * kRecordBytes);
  constexpr uint64_t kPiece = uint64_t{1} << 19;  // records: 52 MB, a progress step
  uint64_t at = 0;
  for (shuffle::RecordReader& r : mine) {
    for (uint64_t first = 0; first < r.records(); first += kPiece) {
      const size_t n = static_cast<size_t>(std::min(kPiece, r.records() - first));
      r.read_at(first, n, data.data() + at * kRecordBytes);
      at += n;
      progress.advance(at * kRecordBytes);
    }
  }
  return data;
}

// What each rank tells rank 0 at the end, in one message.
struct RankReport {
  double seconds[kPhaseCount];
  uint64_t records;         // mapped by this rank
  uint64_t bytes_sent;      // of its map output, to other ranks
  uint64_t bytes_received;  // from other ranks
};

void report(const Options& o, const std::vector<RankReport>& ranks, shuffle::ShuffleMode mode) {
  double slowest[kPhaseCount] = {};
  double total = 0;  // the job took its slowest rank's sum of phases
  uint64_t records = 0;
  uint64_t link_bytes = 0;  // the most any rank sent, or received, over the network
  for (const RankReport& r : ranks) {
    link_bytes = std::max({link_bytes, r.bytes_sent, r.bytes_received});
    double sum = 0;
    for (int p = 0; p < kPhaseCount; ++p) {
      slowest[p] = std::max(slowest[p], r.seconds[p]);
      sum += r.seconds[p];
    }
    total = std::max(total, sum);
    records += r.records;
  }
  const double gb = static_cast<double>(records) * kRecordBytes / 1e9;
  std::printf("sorted %llu records (%.3f GB) on %zu ranks, %s shuffle: %.3f s, %.3f GB/s\n",
              static_cast<unsigned long long>(records), gb, ranks.size(),
              mode == shuffle::ShuffleMode::kPull ? "pull" : "push", total, gb / total);
  std::printf("%-8s %10s\n", "phase", "slowest(s)");
  for (int p = 0; p < kPhaseCount; ++p) std::printf("%-8s %10.3f\n", kPhases[p], slowest[p]);
  if (o.json.empty()) return;
  std::ofstream js(o.json);
  js << "{\"records\":" << records << ",\"bytes\":" << records * kRecordBytes
     << ",\"ranks\":" << ranks.size() << ",\"mode\":\""
     << (mode == shuffle::ShuffleMode::kPull ? "pull" : "push") << "\",\"seconds\":" << total
     << ",\"GBps\":" << gb / total << ",\"shuffle_link_bytes\":" << link_bytes << ",\"phases\":{";
  for (int p = 0; p < kPhaseCount; ++p) js << (p ? "," : "") << '"' << kPhases[p] << "\":" << slowest[p];
  js << "}}\n";
  if (!js) throw system_error("write " + o.json, errno);
}

// The in-memory sort: the share read whole, one map, the partition received whole.
shuffle::ShuffleStats sort_in_memory(const Options& o, rdma::Fabric& fabric, PhaseClock& clock,
                                     PhaseProgress& progress) {
  const int rank = fabric.rank(), size = fabric.size();
  shuffle::Buffer in = read_share(o.in, o.direct_io, rank, size, progress);
  const size_t count = in.size() / kRecordBytes;
  clock.lap(kRead);
  progress.begin("sample");

  const shuffle::RangePartitioner parts =
      shuffle::RangePartitioner::sample(fabric, in.data(), count, 10000, kSampleTag);
  clock.lap(kSample);

  progress.begin("map");  // one call: its time shows, its bytes when it is done
  shuffle::Shuffle s(fabric, {.record_bytes = kRecordBytes, .mode = o.mode});
  const size_t in_bytes = in.size();
  s.map(std::move(in), [&](const uint8_t* r) { return parts.partition(r); });  // in place
  progress.advance(in_bytes);
  all_mapped(fabric);
  clock.lap(kMap);

  progress.begin("shuffle");
  shuffle::Buffer mine = s.exchange();
  progress.advance(mine.size());
  clock.lap(kShuffle);

  progress.begin("sort");
  const size_t n = mine.size() / kRecordBytes;
  const shuffle::RecordOrder order(mine.data(), n);
  progress.advance(mine.size());
  clock.lap(kSort);

  // The records in sorted order, a piece at a time: each piece goes to the disk while the
  // next is gathered (RecordWriter starts the disk on every write).
  shuffle::RecordWriter w(rank_file(o.out, "part", rank), o.direct_io);
  constexpr size_t kPiece = size_t{1} << 18;  // records: 26 MB
  shuffle::Buffer piece(std::min(n, kPiece) * kRecordBytes);
  progress.begin("write", mine.size());
  for (size_t at = 0; at < n; at += kPiece) {
    const size_t k = std::min(kPiece, n - at);
    order.gather(at, k, piece.data());
    w.write(piece.data(), k);
    progress.advance((at + k) * kRecordBytes);
  }
  w.close();
  clock.lap(kWrite);
  progress.end();
  std::printf("rank %d: %llu records in, %zu out -> %s\n", rank,
              static_cast<unsigned long long>(s.stats().records_mapped), n,
              rank_file(o.out, "part", rank).c_str());
  return s.stats();
}

// The sort within a memory budget: chunks read and mapped as sorted runs (spilled past the
// budget), the partition merged from the runs and written as it arrives.
shuffle::ShuffleStats sort_within(const Options& o, size_t budget, const std::string& spill_dir,
                                  rdma::Fabric& fabric, PhaseClock& clock, PhaseProgress& progress) {
  const int rank = fabric.rank(), size = fabric.size();
  std::vector<shuffle::RecordReader> readers;
  uint64_t records = 0;
  for (const std::string& f : share_files(o.in, rank, size)) {
    readers.emplace_back(f, o.direct_io);
    records += readers.back().records();
  }
  // Samples: records evenly spaced through the share, read one by one.
  progress.begin("sample");
  constexpr size_t kSamples = 10000;
  const size_t samples = static_cast<size_t>(std::min<uint64_t>(records, kSamples));
  shuffle::Buffer sample(samples * kRecordBytes);
  for (size_t i = 0; i < samples; ++i) {
    uint64_t at = records / samples * i;
    for (const shuffle::RecordReader& r : readers) {
      if (at < r.records()) {
        r.read_at(at, 1, sample.data() + i * kRecordBytes);
        break;
      }
      at -= r.records();
    }
  }
  clock.lap(kRead);
  const shuffle::RangePartitioner parts =
      shuffle::RangePartitioner::sample(fabric, sample.data(), samples, kSamples, kSampleTag);
  clock.lap(kSample);

  shuffle::Shuffle s(fabric, {.record_bytes = kRecordBytes,
                              .mode = o.mode,
                              .key_bytes = shuffle::kKeyBytes,
                              .memory_bytes = budget,
                              .spill_dir = spill_dir,
                              .direct_io = o.direct_io});
  // A chunk is a quarter of the budget (at most 256 MB): its run, sorted, needs twice that
  // while it is made.
  const size_t chunk = std::max<size_t>(1, std::min(budget / 4, size_t{256} << 20) / kRecordBytes);
  shuffle::Buffer in(chunk * kRecordBytes);
  progress.begin("map", records * kRecordBytes);  // read, sorted into runs, spilled
  uint64_t mapped = 0;
  for (shuffle::RecordReader& r : readers) {
    for (size_t n = r.read(in.data(), chunk); n > 0; n = r.read(in.data(), chunk)) {
      clock.lap(kRead);
      s.map(in.data(), n, [&](const uint8_t* rec) { return parts.partition(rec); });
      clock.lap(kMap);
      mapped += n;
      progress.advance(mapped * kRecordBytes);
    }
  }
  in = shuffle::Buffer();
  all_mapped(fabric);
  clock.lap(kMap);

  shuffle::RecordWriter w(rank_file(o.out, "part", rank), o.direct_io);
  double writing = 0;
  uint64_t out = 0;
  progress.begin("shuffle");  // with the merge, and the writes of what it merged
  s.exchange([&](const uint8_t* rec, size_t n) {
    const auto t = Clock::now();
    w.write(rec, n);
    out += n;
    progress.advance(out * kRecordBytes);
    writing += std::chrono::duration<double>(Clock::now() - t).count();
  });
  clock.lap(kShuffle);
  progress.begin("write");
  w.close();
  clock.lap(kWrite);
  progress.end();
  clock.move(kShuffle, kWrite, writing);  // the writes made inside the merge
  const shuffle::ShuffleStats& st = s.stats();
  std::printf("rank %d: %llu records in, %llu out -> %s; %llu runs (%.1f MB) spilled, %llu spill reads served\n",
              rank, static_cast<unsigned long long>(st.records_mapped),
              static_cast<unsigned long long>(out), rank_file(o.out, "part", rank).c_str(),
              static_cast<unsigned long long>(st.runs_spilled), st.bytes_spilled / 1e6,
              static_cast<unsigned long long>(st.spill_requests_served));
  return st;
}

}  // namespace

int sort_run_main(const std::vector<std::string>& args) {
  const Config config = Config::from_env();
  Options o = parse(args);
  o.direct_io = config.get<shuffle::ShuffleSettings>().direct_io;
  const size_t budget = o.memory_given ? o.memory : config.get<shuffle::ShuffleSettings>().memory_bytes;
  const Bootstrap boot = bootstrap_from_env(std::chrono::seconds(60));
  auto fabric = rdma::Fabric::create(boot, {.name = "sort"});
  std::filesystem::create_directories(o.out);
  PhaseClock clock;
  // Rank 0's phases on one line (the ranks' lines would overwrite each other).
  PhaseProgress progress("sort", fabric->rank() == 0 && PhaseProgress::wanted());
  const shuffle::ShuffleStats st =
      budget == 0 ? sort_in_memory(o, *fabric, clock, progress)
                  : sort_within(o, budget, config.get<shuffle::ShuffleSettings>().spill_dir, *fabric, clock, progress);

  RankReport mine_report{};
  std::memcpy(mine_report.seconds, clock.seconds(), sizeof(mine_report.seconds));
  mine_report.records = st.records_mapped;
  mine_report.bytes_sent = st.bytes_sent;
  mine_report.bytes_received = st.bytes_received;
  std::vector<uint8_t> msg(sizeof(RankReport));
  std::memcpy(msg.data(), &mine_report, sizeof(RankReport));
  std::vector<RankReport> ranks;
  for (const std::vector<uint8_t>& m : shuffle::all_gather(*fabric, msg, kReportTag)) {
    RankReport r;
    std::memcpy(&r, m.data(), sizeof(RankReport));
    ranks.push_back(r);
  }
  if (fabric->rank() == 0) report(o, ranks, o.mode);
  return 0;
}

}  // namespace plait::cli
