// rdma::Fabric::write_gathered on real ranks: thousands of scattered pieces (some empty) land
// contiguously in the right neighbour's window with one completion and one immediate; a write
// past the window's end or into a read-only region is refused and leaves the target's memory
// unchanged; a key the target could not publish (its table is full) still lands, through the
// ring; and a provider that cannot gather (TCP, or shared memory without cross-memory attach)
// says so and refuses.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "plait/plait.h"
#include "support/job.h"
#include "support/rank_checks.h"

namespace plait::testing {
namespace {

using namespace std::chrono_literals;
using rdma::Completion;
using rdma::LocalPiece;
using rdma::OpType;
using rdma::RemoteKey;

constexpr size_t kSource = 4 << 20;
constexpr size_t kWindow = 2 << 20;
constexpr size_t kLate = 64 << 10;
constexpr size_t kAt = 4096;  // where in the window the gathered write lands
constexpr int kFillers = 1100;  // more regions than a shm table has slots

uint8_t byte_of(int rank, size_t i) { return static_cast<uint8_t>(rank * 29 + i * 13 + (i >> 11)); }

// Rank `rank`'s pieces of its source, scattered and of uneven lengths, some empty; `count`
// of them, capped so that they fit `room`.
std::vector<std::pair<size_t, size_t>> spans_of(int rank, int count, size_t room) {
  std::vector<std::pair<size_t, size_t>> spans;
  size_t total = 0;
  for (int k = 0; k < count; ++k) {
    const size_t len = (static_cast<size_t>(k) * 37 + rank * 11) % 700;
    const size_t at = (static_cast<size_t>(k) * 7919 * 64 + rank * 4093) % (kSource - 1024);
    if (total + len > room) break;
    spans.emplace_back(at, len);
    total += len;
  }
  return spans;
}

std::vector<uint8_t> expected_of(int rank, const std::vector<std::pair<size_t, size_t>>& spans) {
  std::vector<uint8_t> out;
  for (auto [at, len] : spans)
    for (size_t i = 0; i < len; ++i) out.push_back(byte_of(rank, at + i));
  return out;
}

bool take(rdma::CompletionQueue& cq, Completion* c) { return cq.wait(c, 20s); }

int gathered_write_child() {
  auto fabric = rdma::Fabric::create(bootstrap_from_env(30s));
  const int n = fabric->size(), me = fabric->rank();
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  auto cq = fabric->create_cq();
  auto imm_cq = fabric->create_cq();
  fabric->set_imm_cq(imm_cq.get());
  const char* cma = std::getenv("PLAIT_SHM_CMA");
  const bool gathers = fabric->provider(right) == "shm" && !(cma && std::string(cma) == "off");
  CHECK_OR_FAIL(!fabric->gathers_writes(me), "gathers_writes(self) is true");
  CHECK_OR_FAIL(fabric->gathers_writes(right) == gathers, "gathers_writes(%d) is %d over %s", right,
                !gathers, fabric->provider(right).c_str());

  std::vector<uint8_t> source(kSource), window(kWindow, 0), readonly(4096, 0x5a), late(kLate, 0);
  for (size_t i = 0; i < source.size(); ++i) source[i] = byte_of(me, i);
  auto region = fabric->register_memory(window.data(), window.size(), rdma::kAccessRemoteWrite);
  auto ro_region = fabric->register_memory(readonly.data(), readonly.size(), rdma::kAccessRemoteRead);
  std::vector<std::vector<uint8_t>> filler_memory(kFillers, std::vector<uint8_t>(64));
  std::vector<std::unique_ptr<rdma::MemoryRegion>> fillers;
  for (auto& f : filler_memory) fillers.push_back(fabric->register_memory(f.data(), f.size(), rdma::kAccessRemoteWrite));
  auto late_region = fabric->register_memory(late.data(), late.size(), rdma::kAccessRemoteWrite);
  auto keys = fabric->exchange({region->remote_key(), ro_region->remote_key(), late_region->remote_key()});

  auto pieces_of = [&](const std::vector<std::pair<size_t, size_t>>& spans) {
    std::vector<LocalPiece> pieces;
    for (auto [at, len] : spans) pieces.push_back({source.data() + at, len});
    return pieces;
  };
  const auto spans = spans_of(me, 3600, kWindow - kAt - 4096);
  const auto pieces = pieces_of(spans);
  size_t total = 0;
  for (auto [at, len] : spans) total += len;

  if (!gathers) {
    try {
      fabric->write_gathered(right, pieces, keys[right][0], kAt, 1u, *cq, 1);
      CHECK_OR_FAIL(false, "write_gathered over %s did not refuse", fabric->provider(right).c_str());
    } catch (const Error& e) {
      CHECK_OR_FAIL(e.category() == ErrorCategory::kInvalidUsage &&
                        std::string(e.what()).find("does not gather") != std::string::npos,
                    "refusal: %s", e.what());
    }
    std::printf("rank %d: gathered write ok (refused over %s)\n", me, fabric->provider(right).c_str());
    return 0;
  }

  // 3600 pieces, over 1 MiB: several chunks and more pieces than one system call takes.
  CHECK_OR_FAIL(spans.size() > 2048 && total > (1u << 20), "only %zu pieces, %zu bytes", spans.size(), total);
  fabric->write_gathered(right, pieces, keys[right][0], kAt, 0xa0000000u + me, *cq, 7);
  Completion c;
  CHECK_OR_FAIL(take(*cq, &c), "no completion for the gathered write");
  CHECK_OR_FAIL(c.ok() && c.op == OpType::kWrite && c.context == 7 && c.peer == right && c.bytes == total,
                "gathered write: %s (bytes %zu of %zu)", c.ok() ? "wrong fields" : c.error->what(), c.bytes, total);
  CHECK_OR_FAIL(take(*imm_cq, &c), "no immediate from rank %d", left);
  CHECK_OR_FAIL(c.ok() && c.imm == 0xa0000000u + left && c.offset == kAt && c.peer == left,
                "immediate %x at %llu from %d", c.imm, static_cast<unsigned long long>(c.offset), c.peer);
  const std::vector<uint8_t> want = expected_of(left, spans_of(left, 3600, kWindow - kAt - 4096));
  CHECK_OR_FAIL(std::memcmp(window.data() + kAt, want.data(), want.size()) == 0, "the gathered bytes differ");
  for (size_t i = 0; i < window.size(); ++i)
    if (i < kAt || i >= kAt + want.size()) CHECK_OR_FAIL(window[i] == 0, "byte %zu outside the write changed", i);

  // Refused: past the window's end, and into a region that allows no remote write.
  fabric->write_gathered(right, pieces, keys[right][0], kWindow - 100, std::nullopt, *cq, 8);
  CHECK_OR_FAIL(take(*cq, &c) && !c.ok() && c.error->category() == ErrorCategory::kInvalidUsage,
                "a write past the end was not refused");
  fabric->write_gathered(right, {pieces[1], pieces[2]}, keys[right][1], 0, std::nullopt, *cq, 9);
  CHECK_OR_FAIL(take(*cq, &c) && !c.ok() && c.error->category() == ErrorCategory::kInvalidUsage,
                "a write into a read-only region was not refused");

  // A key the target could not publish: through its ring, from a packed copy.
  const auto late_spans = spans_of(me, 400, kLate);
  fabric->write_gathered(right, pieces_of(late_spans), keys[right][2], 0, 0xb0000000u + me, *cq, 10);
  CHECK_OR_FAIL(take(*cq, &c) && c.ok(), "the write through the ring failed: %s", c.ok() ? "timeout" : c.error->what());
  CHECK_OR_FAIL(take(*imm_cq, &c) && c.imm == 0xb0000000u + left, "no immediate for the late region");
  const std::vector<uint8_t> want_late = expected_of(left, spans_of(left, 400, kLate));
  CHECK_OR_FAIL(std::memcmp(late.data(), want_late.data(), want_late.size()) == 0, "the ring's bytes differ");

  // Tell the right neighbour our refused writes are done; then check ours left nothing.
  char token = 1;
  fabric->send(right, &token, 1, 42, 0, *cq, 11);
  fabric->recv(left, &token, 1, 42, *cq, 12);
  for (int i = 0; i < 2; ++i) CHECK_OR_FAIL(take(*cq, &c) && c.ok(), "the done message failed");
  CHECK_OR_FAIL(std::memcmp(window.data() + kAt, want.data(), want.size()) == 0, "a refused write changed the window");
  for (size_t i = kAt + want.size(); i < window.size(); ++i) CHECK_OR_FAIL(window[i] == 0, "byte %zu changed", i);
  for (uint8_t b : readonly) CHECK_OR_FAIL(b == 0x5a, "the read-only region changed");
  fabric->exchange(RemoteKey{});  // nobody deregisters while a peer may still write
  std::printf("rank %d: gathered write ok (%zu pieces, %zu bytes)\n", me, spans.size(), total);
  return 0;
}
ChildMode gathered_write_mode("gathered_write", gathered_write_child);

class GatheredWrite : public ::testing::TestWithParam<std::pair<std::string, std::map<std::string, std::string>>> {};

TEST_P(GatheredWrite, LandsWholeOrIsRefused) {
  std::map<std::string, std::string> env = GetParam().second;
  env["PLAIT_TIMEOUT"] = "30000";
  JobResult r = run_job(3, "gathered_write", env, 120);
  EXPECT_EQ(r.status, 0) << r.output;
  size_t ok = 0;
  for (size_t at = 0; (at = r.output.find("gathered write ok", at)) != std::string::npos; ++at) ++ok;
  EXPECT_EQ(ok, 3u) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Providers, GatheredWrite,
                         ::testing::Values(std::pair<std::string, std::map<std::string, std::string>>{"shm", {}},
                                           std::pair<std::string, std::map<std::string, std::string>>{
                                               "shm_without_cma", {{"PLAIT_SHM_CMA", "off"}}},
                                           std::pair<std::string, std::map<std::string, std::string>>{
                                               "tcp", {{"PLAIT_TRANSPORT", "tcp"}}}),
                         [](const auto& info) { return info.param.first; });

}  // namespace
}  // namespace plait::testing
