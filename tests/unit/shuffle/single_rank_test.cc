// The shuffle on a fabric of one rank (an in-process store): what map() refuses before it keeps
// anything, and a run partitioned in place coming back whole. The permutation across several
// partitions is checked on real ranks (tests/multiproc/shuffle/shuffle_test.cc, round 3).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "plait/plait.h"
#include "plait/shuffle.h"
#include "shuffle/gensort.h"

namespace plait::shuffle {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<rdma::Fabric> one_rank_fabric() {
  Bootstrap b;
  b.rank = 0;
  b.size = 1;
  b.store = make_hash_store();
  return rdma::Fabric::create(b, {.name = "shuffle-one"});
}

Buffer records(size_t count) {
  Buffer b(count * kRecordBytes);
  generate_records(0, count, RecordFormat::kBinary, b.data());
  return b;
}

TEST(ShuffleOneRank, AnInPlaceRunComesBackWhole) {
  auto fabric = one_rank_fabric();
  Shuffle s(*fabric);
  Buffer in = records(1000);
  const std::vector<uint8_t> want(in.data(), in.data() + in.size());
  s.map(std::move(in), [](const uint8_t*) { return 0; });
  EXPECT_TRUE(in.empty());  // the run owns it now
  const Buffer got = s.exchange();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
  EXPECT_EQ(s.stats().records_mapped, 1000u);
}

TEST(ShuffleOneRank, MapRefusesAPartRecordAndAPartitionOutOfRange) {
  auto fabric = one_rank_fabric();
  Shuffle s(*fabric);
  Buffer odd(kRecordBytes + 1);
  try {
    s.map(std::move(odd), [](const uint8_t*) { return 0; });
    FAIL() << "a buffer of 101 bytes was taken as records";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_NE(std::string(e.what()).find("101 bytes"), std::string::npos) << e.what();
  }
  try {
    s.map(records(10), [](const uint8_t*) { return 1; });
    FAIL() << "partition 1 of a one-rank fabric was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_NE(std::string(e.what()).find("partition 1"), std::string::npos) << e.what();
  }
  // Nothing of either was kept: the round is empty.
  EXPECT_EQ(s.exchange().size(), 0u);
  EXPECT_EQ(s.stats().records_mapped, 0u);
}

}  // namespace
}  // namespace plait::shuffle
