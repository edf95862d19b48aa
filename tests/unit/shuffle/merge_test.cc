// The pieces of the shuffle's sort path without ranks: the record sort for any record and
// key length, the k-way merge of runs arriving in windows, and the spill file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "plait/error.h"
#include "shuffle/record_sort.h"
#include "shuffle/run_merge.h"
#include "shuffle/spill_file.h"

namespace plait::shuffle {
namespace {

// `count` records of `rb` bytes; keys from a small alphabet so that ties are common, and a
// serial number after the key so that a stable order can be checked.
std::vector<uint8_t> records(size_t count, size_t rb, size_t kb, uint32_t seed, int alphabet) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(count * rb, 0);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* r = v.data() + i * rb;
    for (size_t b = 0; b < kb; ++b) r[b] = static_cast<uint8_t>('a' + rng() % alphabet);
    if (rb >= kb + 4) {
      const uint32_t serial = static_cast<uint32_t>(i) + seed * 1000000u;
      std::memcpy(r + kb, &serial, 4);
    }
  }
  return v;
}

// The reference: a stable sort of whole records by memcmp of their keys.
std::vector<uint8_t> stable_sorted(const std::vector<uint8_t>& in, size_t rb, size_t kb) {
  const size_t n = in.size() / rb;
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    return std::memcmp(&in[a * rb], &in[b * rb], kb) < 0;
  });
  std::vector<uint8_t> out(in.size());
  for (size_t i = 0; i < n; ++i) std::memcpy(&out[i * rb], &in[idx[i] * rb], rb);
  return out;
}

TEST(RecordSortAnySize, ShortMediumAndLongKeysSortStably) {
  for (const auto [rb, kb] : {std::pair<size_t, size_t>{16, 4}, {24, 10}, {40, 13}, {8, 8}, {12, 1}}) {
    const std::vector<uint8_t> in = records(3000, rb, kb, 7, 3);
    std::vector<uint8_t> out(in.size());
    sort_records(in.data(), 3000, out.data(), rb, kb);
    EXPECT_EQ(out, stable_sorted(in, rb, kb)) << rb << "-byte records, " << kb << "-byte keys";
  }
}

TEST(RecordSortAnySize, AKeyLongerThanTheRecordIsRefused) {
  std::vector<uint8_t> in(32), out(32);
  EXPECT_THROW(sort_records(in.data(), 2, out.data(), 16, 17), Error);
}

// Merges sorted runs handed out `window` records at a time.
std::vector<uint8_t> merge(const std::vector<std::vector<uint8_t>>& runs, size_t rb, size_t kb,
                           size_t window, size_t batch_records) {
  std::vector<size_t> at(runs.size(), 0);
  std::vector<uint8_t> batch(batch_records * rb), out;
  merge_runs(
      runs.size(), rb, kb,
      [&](size_t r) -> std::span<const uint8_t> {
        const size_t n = std::min(window * rb, runs[r].size() - at[r]);
        const std::span<const uint8_t> w(runs[r].data() + at[r], n);
        at[r] += n;
        return w;
      },
      batch.data(), batch_records,
      [&](const uint8_t* r, size_t count) {
        EXPECT_LE(count, batch_records);
        out.insert(out.end(), r, r + count * rb);
      });
  return out;
}

TEST(RunMerge, RunsInWindowsMergeToTheStableSortOfTheirConcatenation) {
  for (const auto [rb, kb] : {std::pair<size_t, size_t>{100, 10}, {16, 4}, {32, 12}}) {
    std::vector<std::vector<uint8_t>> runs;
    std::vector<uint8_t> all;
    for (uint32_t r = 0; r < 9; ++r) {
      const size_t n = r == 4 ? 0 : 100 + 37 * r;  // run 4 is empty
      std::vector<uint8_t> run = records(n, rb, kb, r + 1, 4);
      run = stable_sorted(run, rb, kb);
      all.insert(all.end(), run.begin(), run.end());
      runs.push_back(std::move(run));
    }
    for (size_t window : {1, 7, 1000})
      EXPECT_EQ(merge(runs, rb, kb, window, 13), stable_sorted(all, rb, kb))
          << rb << "/" << kb << " window " << window;
  }
}

TEST(RunMerge, WithoutAKeyTheRunsComeOneAfterAnother) {
  std::vector<std::vector<uint8_t>> runs = {records(10, 8, 8, 1, 26), {}, records(5, 8, 8, 2, 26)};
  std::vector<uint8_t> want = runs[0];
  want.insert(want.end(), runs[2].begin(), runs[2].end());
  EXPECT_EQ(merge(runs, 8, 0, 3, 4), want);
}

TEST(RunMerge, NoRunsMergeToNothing) {
  EXPECT_TRUE(merge({}, 100, 10, 4, 4).empty());
}

TEST(SpillFile, AppendedBytesReadBackAtTheirOffsets) {
  for (bool direct : {true, false}) {
    SpillFile f("", direct);
    const std::string a(100000, 'a'), b = "the second run";
    EXPECT_EQ(f.append(a.data(), a.size()), 0u);
    const uint64_t at = f.append(b.data(), b.size());
    // Past the O_DIRECT writes, a run starts on a 4 KiB block; through the cache, at once.
    EXPECT_TRUE(at == a.size() || (direct && at == 102400)) << at;
    EXPECT_EQ(f.size(), at + b.size());
    std::string got(b.size(), '\0');
    f.read(at, b.size(), got.data());
    EXPECT_EQ(got, b);
    got.assign(10, '\0');
    f.read(99995, 5, got.data());
    EXPECT_EQ(got.substr(0, 5), "aaaaa");
    // Appends after a read (a flush) land after what is already there.
    const std::string c(5000, 'c');
    const uint64_t at_c = f.append(c.data(), c.size());
    EXPECT_GE(at_c, at + b.size());
    got.assign(c.size(), '\0');
    f.read(at_c, c.size(), got.data());
    EXPECT_EQ(got, c);
    f.read(at, b.size(), got.data());
    EXPECT_EQ(got.substr(0, b.size()), b);
  }
}

TEST(SpillFile, AReadPastTheEndAndAMissingDirectoryAreClearErrors) {
  SpillFile f("");
  f.append("12345", 5);
  char out[8];
  try {
    f.read(3, 4, out);
    ADD_FAILURE() << "read past the end";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("spill file of 5"), std::string::npos) << e.what();
  }
  try {
    SpillFile g("/nonexistent/plait-spill-dir");
    ADD_FAILURE() << "a spill file in a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/plait-spill-dir"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace plait::shuffle
