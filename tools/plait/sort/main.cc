// `plait sort`: the sort benchmark on plait (src/shuffle).
//
//   plait sort gen --records N [--first F] [--ascii] --out DIR   each rank of the job (or one
//        process) writes its share of records F .. F+N-1, as gensort makes them, to
//        DIR/input-RRRRR
//   plait sort run --in DIR --out DIR2       the distributed sort (sort/run.cc)
//   plait sort validate DIR [--expect DIR2]   valsort's checks over DIR's files in name order
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/config.h"
#include "plait/bootstrap.h"
#include "plait/commands.h"
#include "plait/error.h"
#include "plait/sort/files.h"
#include "plait/sort/phase_progress.h"
#include "shuffle/gensort.h"
#include "shuffle/record_file.h"
#include "shuffle/record_summary.h"
#include "shuffle/shuffle_settings.h"

namespace plait::cli {
namespace {

using shuffle::kRecordBytes;
using shuffle::RecordSummary;
using shuffle::u128;

constexpr const char* kUsage =
    "usage: plait sort gen --records N [--first F] [--ascii] --out DIR\n"
    "       plait sort run --in DIR --out DIR2 [--mode pull|push] [--memory BYTES] [--json FILE]\n"
    "       plait sort validate DIR [--expect DIR2]\n"
    "gen: records F .. F+N-1 of the sort benchmark (100 bytes, a 10-byte key; the bytes of\n"
    "gensort, binary or with --ascii its PennySort lines), split evenly over the job's ranks\n"
    "(under plait run -n R, each rank writes DIR/input-RRRRR; alone, DIR/input-00000).\n"
    "N and F take k, m, g (powers of 1000: 10g records is the 1 TB sort).\n"
    "run: under plait run -n R, each rank reads its share of DIR's input-* files (file i goes\n"
    "to rank i mod R), the ranks sample keys for range partitions, shuffle (pull: reducers\n"
    "read map outputs with one-sided reads; push: mappers write them into the reducers'\n"
    "memory), sort, and write DIR2/part-RRRRR; rank 0 prints each phase's time (--json too).\n"
    "--memory (or PLAIT_SHUFFLE_MEMORY; 0: none): a rank's budget for map output, e.g. 1G;\n"
    "past it, sorted runs spill to PLAIT_SHUFFLE_SPILL_DIR and reducers merge them as they\n"
    "fetch (pull mode), so a rank needs about three budgets of memory whatever the data.\n"
    "validate: reads DIR's output files (part-*, else input-*) in name order as one sequence\n"
    "and prints what valsort does: records, checksum (the sum of every record's CRC-32),\n"
    "duplicate keys, and the first record out of order. --expect DIR2: the records and\n"
    "checksum must equal DIR2's (a sort's input). Exit status 1 on any defect.\n";

uint64_t parse_count(const std::string& flag, const std::string& text) {
  size_t used = 0;
  uint64_t v = 0;
  try {
    v = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  uint64_t scale = 1;
  if (used > 0 && used + 1 == text.size()) {
    switch (text.back()) {
      case 'k': case 'K': scale = 1000; break;
      case 'm': case 'M': scale = 1000 * 1000; break;
      case 'g': case 'G': scale = 1000 * 1000 * 1000; break;
      default: used = 0;
    }
  } else if (used != text.size()) {
    used = 0;
  }
  if (used == 0) throw invalid_usage(flag + " takes a record count (e.g. 1000000 or 40m), not '" + text + "'");
  return v * scale;
}

int gen_main(const std::vector<std::string>& args) {
  uint64_t records = 0, first = 0;
  bool have_records = false;
  auto format = shuffle::RecordFormat::kBinary;
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw invalid_usage(a + " needs a value");
      return args[++i];
    };
    if (a == "--records") records = parse_count(a, value()), have_records = true;
    else if (a == "--first") first = parse_count(a, value());
    else if (a == "--ascii") format = shuffle::RecordFormat::kAscii;
    else if (a == "--out") out = value();
    else throw invalid_usage("sort gen: unknown argument '" + a + "'");
  }
  if (!have_records || out.empty()) throw invalid_usage("sort gen needs --records and --out");
  const LaunchEnv env = detect_launch_env(environ_map());
  std::filesystem::create_directories(out);
  // Rank r: records [N r / R, N (r + 1) / R), as even as whole records go.
  const uint64_t lo = static_cast<uint64_t>(u128{records} * env.rank / env.size);
  const uint64_t hi = static_cast<uint64_t>(u128{records} * (env.rank + 1) / env.size);
  const std::string path = rank_file(out, "input", env.rank);
  const auto start = std::chrono::steady_clock::now();
  shuffle::RecordWriter w(path, Config::from_env().get<shuffle::ShuffleSettings>().direct_io);
  constexpr size_t kBlock = 1 << 16;  // records per write: 6.5 MB
  std::vector<uint8_t> block(kBlock * kRecordBytes);
  RecordSummary summary;
  PhaseProgress progress("sort", env.rank == 0 && PhaseProgress::wanted());
  progress.begin("gen", (hi - lo) * kRecordBytes);
  for (uint64_t at = lo; at < hi;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, hi - at));
    shuffle::generate_records(first + at, n, format, block.data());
    summary.append(shuffle::summarize(block.data(), n));
    w.write(block.data(), n);
    at += n;
    progress.advance((at - lo) * kRecordBytes);
  }
  w.close();
  progress.end();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char sum[40];
  std::printf("rank %d: records %llu..%llu (%llu) -> %s, checksum %s, %.2f s\n", env.rank,
              static_cast<unsigned long long>(first + lo),
              static_cast<unsigned long long>(first + hi - (hi > lo)),
              static_cast<unsigned long long>(hi - lo), path.c_str(),
              shuffle::format_u128(summary.checksum, sum), s);
  return 0;
}

RecordSummary summarize_dir(const std::string& dir, bool print) {
  RecordSummary total;
  for (const std::string& f : record_files(dir)) {
    const RecordSummary s = shuffle::summarize_file(f);
    if (print) {
      char sum[40];
      std::printf("  %-40s %12llu records  checksum %s%s\n", f.c_str(),
                  static_cast<unsigned long long>(s.records), shuffle::format_u128(s.checksum, sum),
                  s.sorted() ? "" : "  OUT OF ORDER");
    }
    total.append(s);
  }
  return total;
}

int validate_main(const std::vector<std::string>& args) {
  std::string dir, expect;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--expect" && i + 1 < args.size()) expect = args[++i];
    else if (dir.empty() && args[i].rfind("--", 0) != 0) dir = args[i];
    else throw invalid_usage("sort validate: unexpected argument '" + args[i] + "'");
  }
  if (dir.empty()) throw invalid_usage("sort validate needs a directory");
  const RecordSummary s = summarize_dir(dir, true);
  char sum[40];
  std::printf("Records: %llu\nChecksum: %s\nDuplicate keys: %llu\n",
              static_cast<unsigned long long>(s.records), shuffle::format_u128(s.checksum, sum),
              static_cast<unsigned long long>(s.duplicates));
  bool ok = s.sorted();
  if (!ok)
    std::printf("First unordered record is record %llu (%llu out of order)\n",
                static_cast<unsigned long long>(s.first_unordered),
                static_cast<unsigned long long>(s.unordered));
  if (!expect.empty()) {
    const RecordSummary want = summarize_dir(expect, false);
    char want_sum[40];
    if (want.records != s.records || want.checksum != s.checksum) {
      std::printf("Differs from %s: %llu records, checksum %s\n", expect.c_str(),
                  static_cast<unsigned long long>(want.records),
                  shuffle::format_u128(want.checksum, want_sum));
      ok = false;
    } else {
      std::printf("Same records as %s\n", expect.c_str());
    }
  }
  std::printf("%s\n", ok ? "SUCCESS - all records are in order" : "FAILURE");
  return ok ? 0 : 1;
}

}  // namespace

int sort_main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string sub = args[0];
  args.erase(args.begin());
  try {
    if (sub == "gen") return gen_main(args);
    if (sub == "validate") return validate_main(args);
    if (sub == "run") return sort_run_main(args);
    std::fprintf(stderr, "plait sort: unknown subcommand '%s'\n%s", sub.c_str(), kUsage);
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "plait sort %s: %s\n", sub.c_str(), e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "plait sort %s: out of memory\n", sub.c_str());
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    std::fprintf(stderr, "plait sort %s: %s\n", sub.c_str(), e.what());
    return 2;
  }
}

}  // namespace plait::cli
