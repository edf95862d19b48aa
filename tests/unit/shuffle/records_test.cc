// Sort-benchmark records: the bytes gensort makes, the valsort summary (order, duplicates,
// checksum) and what it catches, the record sort, and record files' errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "plait/error.h"
#include "shuffle/gensort.h"
#include "shuffle/record_file.h"
#include "shuffle/record_sort.h"
#include "shuffle/record_summary.h"

namespace plait::shuffle {
namespace {

std::vector<uint8_t> records(u128 first, size_t count, RecordFormat f = RecordFormat::kBinary) {
  std::vector<uint8_t> v(count * kRecordBytes);
  generate_records(first, count, f, v.data());
  return v;
}

std::string text(const uint8_t* p, size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

TEST(Gensort, RecordZeroIsTheReferenceGeneratorsFirst) {
  // gensort's first binary key spells "JimGrayRIP": the generator's increment, a * 0 + c.
  const std::vector<uint8_t> r = records(0, 1);
  EXPECT_EQ(text(r.data(), 10), "JimGrayRIP");
  EXPECT_EQ(r[10], 0x00);
  EXPECT_EQ(r[11], 0x11);
  EXPECT_EQ(text(r.data() + 12, 32), std::string(32, '0'));
  EXPECT_EQ((std::vector<uint8_t>(r.begin() + 44, r.begin() + 48)),
            (std::vector<uint8_t>{0x88, 0x99, 0xaa, 0xbb}));
  // The low 48 bits of c are 0x202020202001: each hex digit four times.
  std::string filler;
  for (char d : std::string("202020202001")) filler += std::string(4, d);
  EXPECT_EQ(text(r.data() + 48, 48), filler);
  EXPECT_EQ((std::vector<uint8_t>(r.begin() + 96, r.end())),
            (std::vector<uint8_t>{0xcc, 0xdd, 0xee, 0xff}));
}

TEST(Gensort, AMillionRecordsHaveThePublishedChecksum) {
  // 1,000,000 records (100 MB, "teragen 1000000") validate to checksum 7a27e2d0d55de in
  // Hadoop's TeraValidate outputs: the same generator, the same sum of CRC-32s as valsort.
  constexpr size_t kBlock = 100000;
  std::vector<uint8_t> block(kBlock * kRecordBytes);
  RecordSummary total;
  for (size_t first = 0; first < 1000000; first += kBlock) {
    generate_records(first, kBlock, RecordFormat::kBinary, block.data());
    total.append(summarize(block.data(), kBlock));
  }
  char buf[40];
  EXPECT_STREQ(format_u128(total.checksum, buf), "7a27e2d0d55de");
  EXPECT_EQ(total.records, 1000000u);
}

TEST(Gensort, TheRecordNumberIsWrittenInHex) {
  const std::vector<uint8_t> r = records(0xabcdef, 1);
  EXPECT_EQ(text(r.data() + 12, 32), "00000000000000000000000000ABCDEF");
}

TEST(Gensort, AsciiRecordsArePrintableLines) {
  const std::vector<uint8_t> r = records(0, 1000, RecordFormat::kAscii);
  for (size_t i = 0; i < 1000; ++i) {
    const uint8_t* rec = r.data() + i * kRecordBytes;
    for (size_t k = 0; k < kKeyBytes; ++k) {
      EXPECT_GE(rec[k], ' ');
      EXPECT_LE(rec[k], '~');
    }
    EXPECT_EQ(text(rec + 10, 2), "  ");
    EXPECT_EQ(text(rec + 44, 2), "  ");
    EXPECT_EQ(text(rec + 98, 2), "\r\n");
  }
  // Record 0's key: base-95 digits of c's high word (least significant first), then two
  // of its low word.
  u128 c = gensort_state(1);
  uint64_t hi = static_cast<uint64_t>(c >> 64), lo = static_cast<uint64_t>(c);
  std::string key;
  for (int i = 0; i < 8; ++i, hi /= 95) key += static_cast<char>(' ' + hi % 95);
  for (int i = 0; i < 2; ++i, lo /= 95) key += static_cast<char>(' ' + lo % 95);
  EXPECT_EQ(text(r.data(), 10), key);
}

TEST(Gensort, PartsGeneratedApartEqualTheWhole) {
  // As gensort -b0 1000 part0; gensort -b1000 1000 part1; cat part0 part1 = gensort 2000.
  const std::vector<uint8_t> whole = records(0, 2000);
  std::vector<uint8_t> joined = records(0, 1000);
  const std::vector<uint8_t> part1 = records(1000, 1000);
  joined.insert(joined.end(), part1.begin(), part1.end());
  EXPECT_EQ(joined, whole);
}

TEST(Gensort, SkippingAheadEqualsStepping) {
  u128 x = 0;
  for (int n = 1; n <= 300; ++n) {
    x = gensort_next(x);
    ASSERT_EQ(gensort_state(n), x) << n;
  }
  const u128 far = (u128{1} << 100) + 12345;
  EXPECT_EQ(gensort_state(far + 1), gensort_next(gensort_state(far)));
  EXPECT_EQ(gensort_state(0), u128{0});
}

TEST(RecordSummary, CountsChecksumsAndOrder) {
  std::vector<uint8_t> in = records(0, 5000);
  const RecordSummary unsorted = summarize(in.data(), 5000);
  EXPECT_EQ(unsorted.records, 5000u);
  EXPECT_GT(unsorted.unordered, 0u);

  std::vector<uint8_t> out(in.size());
  sort_records(in.data(), 5000, out.data());
  const RecordSummary sorted = summarize(out.data(), 5000);
  EXPECT_TRUE(sorted.sorted());
  EXPECT_EQ(sorted.records, 5000u);
  EXPECT_EQ(sorted.checksum, unsorted.checksum);  // the same records, in another order
  EXPECT_EQ(sorted.duplicates, 0u);
}

TEST(RecordSummary, CatchesASwappedPairAMissingRecordAndADuplicate) {
  std::vector<uint8_t> in = records(0, 2000), out(in.size());
  sort_records(in.data(), 2000, out.data());
  const RecordSummary good = summarize(out.data(), 2000);

  std::vector<uint8_t> swapped = out;
  std::swap_ranges(swapped.begin() + 700 * kRecordBytes, swapped.begin() + 701 * kRecordBytes,
                   swapped.begin() + 701 * kRecordBytes);
  const RecordSummary s = summarize(swapped.data(), 2000);
  EXPECT_EQ(s.unordered, 1u);
  EXPECT_EQ(s.first_unordered, 701u);
  EXPECT_EQ(s.checksum, good.checksum);  // a swap keeps the checksum: the order check finds it

  std::vector<uint8_t> missing(out.begin(), out.end() - kRecordBytes);
  const RecordSummary m = summarize(missing.data(), 1999);
  EXPECT_TRUE(m.sorted());
  EXPECT_NE(m.checksum, good.checksum);

  std::vector<uint8_t> doubled = out;  // record 1000 written twice, 1001 lost
  std::memcpy(doubled.data() + 1001 * kRecordBytes, doubled.data() + 1000 * kRecordBytes,
              kRecordBytes);
  const RecordSummary d = summarize(doubled.data(), 2000);
  EXPECT_EQ(d.duplicates, 1u);
  EXPECT_TRUE(d.sorted());
  EXPECT_NE(d.checksum, good.checksum);
}

TEST(RecordSummary, PiecesAppendToTheWholeAndTheSeamIsChecked) {
  std::vector<uint8_t> in = records(0, 3000), out(in.size());
  sort_records(in.data(), 3000, out.data());
  const RecordSummary whole = summarize(out.data(), 3000);
  RecordSummary pieces;
  for (size_t at : {0, 1000, 2500}) {
    const size_t n = at == 2500 ? 500 : (at == 0 ? 1000 : 1500);
    pieces.append(summarize(out.data() + at * kRecordBytes, n));
  }
  EXPECT_EQ(pieces.records, whole.records);
  EXPECT_EQ(pieces.checksum, whole.checksum);
  EXPECT_TRUE(pieces.sorted());

  // The same pieces in the wrong order: each is sorted, the seams are not.
  RecordSummary backwards = summarize(out.data() + 1500 * kRecordBytes, 1500);
  backwards.append(summarize(out.data(), 1500));
  EXPECT_EQ(backwards.unordered, 1u);
  EXPECT_EQ(backwards.first_unordered, 1500u);
}

TEST(RecordSort, OrdersByTheKeyBytesAsUnsigned) {
  // Keys that differ only in their last byte, or only by a high bit (0x80 > 0x7f).
  std::vector<uint8_t> in(4 * kRecordBytes, 0);
  in[0 * kRecordBytes + 9] = 2;
  in[1 * kRecordBytes + 0] = 0x80;
  in[2 * kRecordBytes + 0] = 0x7f;
  in[3 * kRecordBytes + 9] = 1;
  for (size_t i = 0; i < 4; ++i) in[i * kRecordBytes + 50] = static_cast<uint8_t>(i);
  std::vector<uint8_t> out(in.size());
  sort_records(in.data(), 4, out.data());
  std::vector<int> order;
  for (size_t i = 0; i < 4; ++i) order.push_back(out[i * kRecordBytes + 50]);
  EXPECT_EQ(order, (std::vector<int>{3, 0, 2, 1}));
}

TEST(RecordSort, AnOrderGatheredInPiecesIsTheWholeSort) {
  std::vector<uint8_t> in = records(0, 10007), whole(in.size()), pieces(in.size());
  sort_records(in.data(), 10007, whole.data());
  const RecordOrder order(in.data(), 10007);
  for (size_t at = 0; at < 10007; at += 1000)
    order.gather(at, std::min<size_t>(1000, 10007 - at), pieces.data() + at * kRecordBytes);
  EXPECT_EQ(pieces, whole);
}

TEST(RecordSort, EqualKeysKeepTheirOrder) {
  // Every record with one key (the worst skew): nothing moves, the sort is stable.
  std::vector<uint8_t> in = records(0, 1000);
  for (size_t i = 0; i < 1000; ++i) std::memset(in.data() + i * kRecordBytes, 'k', kKeyBytes);
  std::vector<uint8_t> out(in.size());
  sort_records(in.data(), 1000, out.data());
  EXPECT_EQ(out, in);
  EXPECT_EQ(summarize(out.data(), 1000).duplicates, 999u);
}

class RecordFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("plait-records-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(RecordFiles, WrittenRecordsReadBackWithTheirSummary) {
  std::vector<uint8_t> in = records(0, 100000);
  RecordWriter w(path("in"));
  w.write(in.data(), 60000);
  w.write(in.data() + 60000 * kRecordBytes, 40000);
  w.close();
  const RecordSummary s = summarize_file(path("in"));
  EXPECT_EQ(s.records, 100000u);
  EXPECT_EQ(s.checksum, summarize(in.data(), 100000).checksum);
  RecordReader r(path("in"));
  std::vector<uint8_t> some(3 * kRecordBytes);
  r.read_at(99997, 3, some.data());
  EXPECT_TRUE(std::equal(some.begin(), some.end(), in.end() - 3 * kRecordBytes));
}

TEST_F(RecordFiles, LargeReadsPastTheCacheReturnTheSameRecordsAtAnyOffset) {
  // 1 MiB and more goes through O_DIRECT and an aligned bounce buffer: pieces that start and
  // end inside 4 KiB blocks, span the 8 MiB bounce buffer, and end at the file's last byte.
  const std::vector<uint8_t> in = records(7, 200000);  // 20 MB
  RecordWriter w(path("in"));
  w.write(in.data(), 200000);
  w.close();
  for (bool direct : {true, false}) {
    RecordReader r(path("in"), direct);
    std::vector<uint8_t> got(in.size());
    size_t at = 0;
    for (size_t n; (n = r.read(got.data() + at * kRecordBytes, 12345)) > 0;) at += n;
    EXPECT_EQ(at, 200000u);
    EXPECT_TRUE(got == in) << "direct " << direct;
    std::vector<uint8_t> piece(95001 * kRecordBytes);
    r.read_at(104999, 95001, piece.data());  // 9.5 MB up to the end, from an odd offset
    EXPECT_TRUE(std::equal(piece.begin(), piece.end(), in.begin() + 104999 * kRecordBytes));
  }
}

TEST_F(RecordFiles, AFileOfPartRecordsIsAClearError) {
  std::ofstream(path("odd"), std::ios::binary) << std::string(250, 'x');
  try {
    RecordReader r(path("odd"));
    FAIL() << "a 250-byte file was read as records";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("250 bytes is not a whole number of 100-byte records"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(path("odd")), std::string::npos) << e.what();
  }
}

TEST_F(RecordFiles, AMissingFileIsAClearError) {
  try {
    summarize_file(path("absent"));
    FAIL() << "a missing file was summarized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path("absent")), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace plait::shuffle
