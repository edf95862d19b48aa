// The checks of what peers send to the services (docs/fuzzing.md: ps_control, deadline_wire,
// shuffle_wire, stall_state, ucx_wire), each with the essence of an input that got through
// before: a parameter server's failure of a category that does not exist, a deadline
// contribution whose dtype has no size (a division by zero in the aggregator) or whose count
// passes 2^63 (no chunk at all), and a result header cut short, shuffle blocks whose sizes wrap around to their total or are not whole
// records, a credit for block 2^64 - 1 (the header entry, read as a spilled block), and a
// stall line whose root + 1 is 2^31.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "coll/deadline/wire.h"
#include "coll/stall/stall_report.h"
#include "plait/error.h"
#include "ps/control.h"
#include "shuffle/wire.h"
#include "transport/ucx/wire.h"

namespace plait {
namespace {

template <typename T>
std::vector<std::byte> bytes_of(const T& value, const std::string& tail = {}) {
  std::vector<std::byte> out(sizeof value + tail.size());
  std::memcpy(out.data(), &value, sizeof value);
  std::memcpy(out.data() + sizeof value, tail.data(), tail.size());
  return out;
}

template <typename F>
ErrorCategory category_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.category();
  }
  ADD_FAILURE() << "no error";
  return ErrorCategory::kAborted;
}

TEST(PsControl, AFailureOfAnUnknownCategoryIsARemoteError) {
  using namespace ps::wire;
  const auto msg = bytes_of(FailureHeader{.request = 9, .partition = 3, .category = 0x201}, "why");
  const ToWorker m = decode_to_worker(static_cast<uint64_t>(Kind::kFailure), msg.data(), msg.size());
  ASSERT_EQ(m.what, ToWorker::What::kFailure);
  EXPECT_EQ(m.category, ErrorCategory::kRemote);
  EXPECT_EQ(m.request, 9u);
  EXPECT_EQ(m.reason, "why");
  const auto known = bytes_of(FailureHeader{.request = 9, .category = 0});
  EXPECT_EQ(decode_to_worker(static_cast<uint64_t>(Kind::kFailure), known.data(), known.size()).category,
            ErrorCategory::kInvalidUsage);
}

TEST(PsControl, CreditsAndPullRequestsAreTakenAtTheirSizeOnly) {
  using namespace ps::wire;
  auto credits = bytes_of(Credits{.count = 2});
  for (uint32_t slot : {5u, 1u}) {
    const auto s = bytes_of(slot);
    credits.insert(credits.end(), s.begin(), s.end());
  }
  const auto kind = static_cast<uint64_t>(Kind::kCredits);
  const ToWorker m = decode_to_worker(kind, credits.data(), credits.size());
  ASSERT_EQ(m.what, ToWorker::What::kCredits);
  ASSERT_EQ(m.count, 2u);
  EXPECT_EQ(m.slot(0), 5u);
  EXPECT_EQ(m.slot(1), 1u);
  EXPECT_EQ(decode_to_worker(kind, credits.data(), credits.size() - 1).what, ToWorker::What::kMalformed);
  const auto pull = bytes_of(PullRequest{.partition = 4});
  const auto pull_kind = static_cast<uint64_t>(Kind::kPullRequest);
  EXPECT_EQ(decode_to_server(pull_kind, pull.data(), pull.size()).request.partition, 4u);
  EXPECT_EQ(decode_to_server(pull_kind, pull.data(), pull.size() - 1).what, ToServer::What::kMalformed);
  EXPECT_EQ(decode_to_server(99, pull.data(), pull.size()).what, ToServer::What::kMalformed);
}

deadline::wire::ContributionHeader contribution(uint8_t dtype, uint8_t op, uint64_t count) {
  deadline::wire::ContributionHeader h;
  h.step = 5;
  h.count = count;
  h.dtype = dtype;
  h.op = op;
  return h;
}

ErrorCategory check(const deadline::wire::ContributionHeader& h, size_t bytes = 32) {
  return category_of([&] {
    deadline::wire::check_contribution(reinterpret_cast<const char*>(&h), bytes, 5, 1, {});
  });
}

TEST(DeadlineWire, AContributionOfNoDtypeOpOrSizeIsRefused) {
  const auto f32 = static_cast<uint8_t>(DataType::kF32), sum = static_cast<uint8_t>(ReduceOp::kSum);
  const auto good = contribution(f32, sum, 1000);
  EXPECT_EQ(deadline::wire::check_contribution(reinterpret_cast<const char*>(&good), 32, 5, 1, {}).count,
            1000u);
  // dtype_size() 0: chunking() divided chunk_bytes by it.
  EXPECT_EQ(check(contribution(200, sum, 1000)), ErrorCategory::kInvalidUsage);
  EXPECT_EQ(check(contribution(f32, 9, 1000)), ErrorCategory::kInvalidUsage);
  EXPECT_EQ(check(contribution(f32, sum, UINT64_MAX / 2)), ErrorCategory::kInvalidUsage);
  EXPECT_EQ(check(good, 16), ErrorCategory::kInvalidUsage);
}

TEST(DeadlineWire, OneChunkOfACountPast2To63IsOneChunk) {
  // (count + per_chunk - 1) / per_chunk wrapped to 0 chunks: no receive for the values.
  const uint64_t count = (uint64_t{1} << 63) + 1000;
  EXPECT_EQ(deadline::wire::chunking(count, 1, 0).chunks, 1u);
  EXPECT_EQ(deadline::wire::chunking(count, 1, 0).end(0), count);
  EXPECT_EQ(deadline::wire::chunking(1000, 4, 400).chunks, 10u);
  EXPECT_EQ(deadline::wire::chunking(1001, 4, 400).chunks, 11u);
  EXPECT_EQ(deadline::wire::chunking(0, 4, 400).chunks, 1u);
}

TEST(DeadlineWire, AResultHeaderCutShortIsRefused) {
  deadline::wire::ResultHeader h;
  h.step = 5;
  h.contributors = h.slow = h.present = {3};
  std::vector<char> bytes;
  h.encode(bytes, 4);
  deadline::wire::ResultHeader back;
  ASSERT_TRUE(back.decode(bytes.data(), bytes.size(), 4, 1));
  EXPECT_EQ(back.contributors, h.contributors);
  EXPECT_FALSE(back.decode(bytes.data(), bytes.size() - 8, 4, 1));
}

TEST(ShuffleWire, BlocksThatWrapAroundToTheTotalOrCutARecordAreRefused) {
  using namespace shuffle;
  const uint64_t half = uint64_t{1} << 63;
  // 2^63 + (2^63 + 100) is 100 modulo 2^64: the blocks would be laid out past a 100-byte
  // partition.
  std::vector<BlockWire> wrapped{{.offset = 2, .bytes = 100}, {.bytes = half}, {.bytes = half + 100}};
  EXPECT_EQ(category_of([&] { check_locations(wrapped.data(), 3 * sizeof(BlockWire), 4, 1, 0); }),
            ErrorCategory::kRemote);
  std::vector<BlockWire> part_record{{.offset = 1, .bytes = 150}, {.bytes = 150}};
  EXPECT_EQ(category_of([&] { check_locations(part_record.data(), 2 * sizeof(BlockWire), 100, 1, 0); }),
            ErrorCategory::kRemote);
  std::vector<BlockWire> good{{.offset = 2, .bytes = 300}, {.bytes = 100}, {.bytes = 200}};
  const Locations got = check_locations(good.data(), 3 * sizeof(BlockWire), 100, 1, 0);
  EXPECT_EQ(got.blocks, 2u);
  EXPECT_EQ(got.total, 300u);
  EXPECT_EQ(category_of([&] { partition_total({half, half}, 0); }), ErrorCategory::kRemote);
  EXPECT_EQ(partition_total({100, 200}, 0), 300u);
}

TEST(ShuffleWire, ACreditForBlockTwoToThe64MinusOneIsRefused) {
  using namespace shuffle;
  // The header entry first; block 2^64 - 1 + 1 wrapped to it, which pump_pushes() read as a
  // spilled block (from a spill file there may not be).
  const std::vector<BlockWire> blocks{{.offset = 1, .bytes = 1000}, {.bytes = 1000}};
  CreditWire c{.block = UINT64_MAX, .offset = 0, .bytes = 10};
  EXPECT_EQ(category_of([&] { check_credit(c, sizeof c, blocks, 1, 0); }), ErrorCategory::kRemote);
  c.block = 0;
  check_credit(c, sizeof c, blocks, 1, 0);
  c.offset = 995;
  EXPECT_EQ(category_of([&] { check_credit(c, sizeof c, blocks, 1, 0); }), ErrorCategory::kRemote);
}

TEST(ShuffleWire, ATargetAndARequestAreTakenWholeOnly) {
  using namespace shuffle;
  const BlockWire t{.bytes = 300};
  check_target(t, sizeof t, 300, 1, 0);
  EXPECT_EQ(category_of([&] { check_target(t, sizeof t - 8, 300, 1, 0); }), ErrorCategory::kRemote);
  EXPECT_EQ(category_of([&] { check_target(t, sizeof t, 200, 1, 0); }), ErrorCategory::kRemote);
  EXPECT_EQ(category_of([&] { check_request(sizeof(RequestWire) + 1, 1, 0); }), ErrorCategory::kRemote);
  EXPECT_EQ(served_bytes({.offset = 100, .bytes = 50}, 150), 50u);
  EXPECT_EQ(served_bytes({.offset = 100, .bytes = UINT64_MAX}, 150), 0u);
}

TEST(StallState, ARootPastIntIsRefused) {
  // root + 1 = 2^31: the root was INT_MIN - 1, a signed overflow.
  EXPECT_FALSE(coll::decode_state("C 1 0 0 0 2147483648 0 0"));
  const auto top = coll::decode_state("C 1 0 0 0 2147483647 0 0");
  ASSERT_TRUE(top);
  EXPECT_EQ(top->current.root, 2147483646);
}

TEST(UcxWire, HeadersAreTakenAtTheirSizeFromAPeerOfThisJob) {
  using namespace transport::ucx;
  const HelloHeader h{.source = 1, .size = 4};
  HelloHeader back;
  EXPECT_TRUE(read_header(&h, sizeof h, &back));
  EXPECT_FALSE(read_header(&h, sizeof h - 1, &back));
  EXPECT_TRUE(hello_matches(back, 4));
  EXPECT_FALSE(hello_matches(back, 5));
  EXPECT_EQ(source_rank(1, 4, 0), 1);
  EXPECT_EQ(source_rank(0, 4, 0), -1);
  EXPECT_EQ(source_rank(4, 4, 0), -1);
  EXPECT_EQ(source_rank(-3, 4, 0), -1);
  const int32_t source = 2;
  EXPECT_EQ(goodbye_source(&source, sizeof source), 2);
  EXPECT_EQ(goodbye_source(&source, sizeof source + 1), -1);
  const std::string text(5000, 't');
  EXPECT_EQ(bounded_text(text.data(), text.size()).size(), kMaxDenialBytes);
}

}  // namespace
}  // namespace plait
