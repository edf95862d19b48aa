// Bytes a peer can write are untrusted: ring records and segment headers live in shared
// memory that the other process may rewrite at any moment, and a peer may send more than a
// receiver ever asked for. These tests play that peer from inside this process.
#include <sys/mman.h>

#include <fstream>
#include <sstream>

#include "transport/shm/layout.h"
#include "transport/shm/ring.h"
#include "transport/tcp/tcp_provider.h"
#include "unit/transport/shm/shm_test_support.h"

namespace plait::transport::shm_test {
namespace {

using shm::Record;
using shm::RecordType;
using shm::RingControl;
using shm::RingReader;
using shm::RingWriter;

// A ring in private memory with its control block, as a segment holds it.
struct PrivateRing {
  static constexpr uint64_t kCapacity = 4096;
  alignas(64) RingControl control;
  alignas(64) char data[kCapacity] = {};
};

// The reader checks a record header and then uses only its checked copy: a producer that
// rewrites the header after the check cannot change how far the reader advances (a length
// read twice could pass the check and then steer a copy or the ring position).
TEST(ShmUntrustedPeer, RingReaderUsesOnlyTheHeaderItChecked) {
  auto ring = std::make_unique<PrivateRing>();
  RingWriter writer(&ring->control, ring->data, PrivateRing::kCapacity);
  const std::string first(100, 'a'), second(10, 'b');
  Record h;
  h.type = RecordType::kEager;
  h.payload = static_cast<uint32_t>(first.size());
  ASSERT_TRUE(writer.write(h, first.data(), first.size()));
  h.payload = static_cast<uint32_t>(second.size());
  h.tag = 2;
  ASSERT_TRUE(writer.write(h, second.data(), second.size()));

  RingReader reader(&ring->control, ring->data, PrivateRing::kCapacity);
  Record header;
  const char* payload = nullptr;
  ASSERT_EQ(reader.peek(&header, &payload), RingReader::Peek::kRecord);
  EXPECT_EQ(header.payload, first.size());
  EXPECT_EQ(header.bytes, shm::record_bytes(first.size()));
  EXPECT_EQ(std::string(payload, header.payload), first);

  // The hostile producer rewrites the record it has already published.
  auto* in_ring = reinterpret_cast<Record*>(ring->data);
  in_ring->bytes = 64 * 60;
  in_ring->payload = 64 * 59;
  EXPECT_EQ(header.bytes, shm::record_bytes(first.size())) << "the checked copy changed";

  reader.consume(header);
  ASSERT_EQ(reader.peek(&header, &payload), RingReader::Peek::kRecord)
      << "the reader advanced by the rewritten length";
  EXPECT_EQ(header.tag, 2u);
  EXPECT_EQ(std::string(payload, header.payload), second);
}

// The writable mappings of `rank`'s segment in this process (its own and its peers'): the
// ranks of these tests are threads, so a peer's view of our header is one of these.
std::vector<shm::SegmentHeader*> headers_of(int rank, const std::string& token,
                                            const std::string& name) {
  std::string prefix = shm::segment_name(token, name, rank);
  prefix = prefix.substr(1, prefix.rfind('-') + 1 - 1);  // "plait-<job>-<rank>-"
  std::vector<shm::SegmentHeader*> found;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/dev/shm/" + prefix) == std::string::npos) continue;
    std::istringstream fields(line);
    std::string range, perms;
    fields >> range >> perms;
    if (perms.find('w') == std::string::npos) continue;
    found.push_back(reinterpret_cast<shm::SegmentHeader*>(
        std::stoull(range.substr(0, range.find('-')), nullptr, 16)));
  }
  return found;
}

// After setup a peer rewrites the geometry in both headers. Every size and offset was taken
// once, at setup, into private memory: a ring capacity that would make a fallback chunk 0
// (a division by zero in the piece count) and offsets pointing anywhere change nothing.
TEST(ShmUntrustedPeer, HeaderRewrittenAfterSetupSteersNothing) {
  auto f = make_fabrics(2, test_config("off"));
  auto cq0 = f[0]->create_cq(), cq1 = f[1]->create_cq();
  std::vector<uint8_t> target(3 << 20, 0);
  auto region = f[1]->register_memory(target.data(), target.size(), kAccessAll);
  const RemoteKey rk = region->remote_key();

  for (int rank : {0, 1}) {
    auto headers = headers_of(rank, "job-secret", "shm-test");
    ASSERT_EQ(headers.size(), 2u) << "rank " << rank << "'s segment: its own and its peer's map";
    for (shm::SegmentHeader* h : headers) {
      h->ring_capacity = 4 * sizeof(Record);  // a fallback chunk of 0 bytes
      h->peer_count = 1000;
      h->rings_offset = uint64_t{1} << 40;
      h->table_offset = uint64_t{1} << 40;
      h->table_slots = uint64_t{1} << 30;
      h->slot_stride = 0;
    }
  }

  auto data = pattern((2 << 20) + 5, 9);
  f[0]->write(1, data.data(), data.size(), rk, 64, std::nullopt, cq0.get(), 1);
  Completion w = wait_one(*cq0);
  ASSERT_TRUE(w.ok()) << w.error->what();
  EXPECT_TRUE(std::equal(data.begin(), data.end(), target.begin() + 64));
  std::vector<uint8_t> back(data.size());
  f[0]->read(1, back.data(), back.size(), rk, 64, cq0.get(), 2);
  Completion r = wait_one(*cq0);
  ASSERT_TRUE(r.ok()) << r.error->what();
  EXPECT_EQ(back, data);

  for (size_t n : {size_t{100}, size_t{1} << 20}) {
    auto msg = pattern(n, 3);
    std::vector<uint8_t> got(n);
    f[1]->recv(0, got.data(), n, 5, cq1.get(), 3);
    f[0]->send(1, msg.data(), n, 5, 0, cq0.get(), 4);
    Completion rc = wait_one(*cq1), sc = wait_one(*cq0);
    ASSERT_TRUE(rc.ok()) << rc.error->what();
    ASSERT_TRUE(sc.ok()) << sc.error->what();
    EXPECT_EQ(got, msg) << n << " bytes";
  }
  region.reset();
}

// --- what a peer may leave waiting for its receives ---

std::vector<std::unique_ptr<Fabric>> fabrics_for(const std::string& provider, const Config& c) {
  if (provider == "shm") return make_fabrics(2, c);
  auto store = make_hash_store();
  std::vector<std::unique_ptr<Fabric>> fabrics(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] { fabrics[r] = create_tcp_fabric(options_for(r, 2, store, c)); });
  for (auto& t : threads) t.join();
  return fabrics;
}

class UnexpectedLimits : public ::testing::TestWithParam<std::string> {};

// A sender that floods a receiver which posts nothing is an error naming it once the
// receiver holds PLAIT_MAX_UNEXPECTED_MSGS of its messages, instead of memory without end.
TEST_P(UnexpectedLimits, TooManyWaitingMessagesFailThePeerNamingIt) {
  Config c = test_config("off");
  c.max_unexpected_messages = 4;
  auto f = fabrics_for(GetParam(), c);
  auto cq0 = f[0]->create_cq(), cq1 = f[1]->create_cq();
  uint64_t word = 7;
  for (int i = 0; i < 6; ++i) f[0]->send(1, &word, 8, 1, 0, cq0.get(), i);
  const Deadline deadline = Deadline::after(20s);
  while (!f[1]->peer_failed(0) && !deadline.expired()) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(f[1]->peer_failed(0)) << "rank 1 kept buffering rank 0's messages";
  // What arrived within the bound is still delivered; the message beyond it is not.
  uint64_t got = 0;
  for (int i = 0; i < 4; ++i) {
    f[1]->recv(0, &got, 8, 1, cq1.get(), i);
    Completion ok = wait_one(*cq1);
    ASSERT_TRUE(ok.ok()) << "message " << i << ": " << ok.error->what();
    EXPECT_EQ(got, 7u);
  }
  f[1]->recv(0, &got, 8, 1, cq1.get(), 9);
  Completion r = wait_one(*cq1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error->message().find("rank 0 sent a 8-byte message while 4 messages (32 bytes)"),
            std::string::npos)
      << r.error->what();
  EXPECT_NE(r.error->message().find("PLAIT_MAX_UNEXPECTED_MSGS=4"), std::string::npos)
      << r.error->what();
}

// Eager bytes count too; the length is the peer's word and is checked before anything is
// allocated for it.
TEST_P(UnexpectedLimits, TooManyWaitingBytesFailThePeerNamingIt) {
  Config c = test_config("off");
  c.max_unexpected_bytes = 1000;
  c.eager_threshold = 8192;
  auto f = fabrics_for(GetParam(), c);
  auto cq0 = f[0]->create_cq(), cq1 = f[1]->create_cq();
  std::vector<uint8_t> small(600, 1), big(4000, 2);
  f[0]->send(1, small.data(), small.size(), 1, 0, cq0.get(), 1);
  f[0]->send(1, big.data(), big.size(), 2, 0, cq0.get(), 2);
  const Deadline deadline = Deadline::after(20s);
  while (!f[1]->peer_failed(0) && !deadline.expired()) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(f[1]->peer_failed(0));
  std::vector<uint8_t> got(4000);
  f[1]->recv(0, got.data(), got.size(), 2, cq1.get(), 9);
  Completion r = wait_one(*cq1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error->message().find("rank 0 sent a 4000-byte message while 1 messages (600 bytes)"),
            std::string::npos)
      << r.error->what();
  EXPECT_NE(r.error->message().find("PLAIT_MAX_UNEXPECTED=1000"), std::string::npos)
      << r.error->what();
}

// Within the limits nothing changes: messages received in turn free their share.
TEST_P(UnexpectedLimits, MessagesReceivedInTurnNeverReachTheLimit) {
  Config c = test_config("off");
  c.max_unexpected_messages = 2;
  auto f = fabrics_for(GetParam(), c);
  auto cq0 = f[0]->create_cq(), cq1 = f[1]->create_cq();
  for (uint64_t i = 0; i < 50; ++i) {
    uint64_t out = i, in = ~0ull;
    f[0]->send(1, &out, 8, 3, 0, cq0.get(), i);
    ASSERT_TRUE(wait_one(*cq0).ok());
    // Give the message time to arrive unexpected now and then.
    if (i % 8 == 0) std::this_thread::sleep_for(2ms);
    f[1]->recv(0, &in, 8, 3, cq1.get(), i);
    Completion r = wait_one(*cq1);
    ASSERT_TRUE(r.ok()) << r.error->what();
    EXPECT_EQ(in, i);
  }
  EXPECT_FALSE(f[1]->peer_failed(0));
}

INSTANTIATE_TEST_SUITE_P(Providers, UnexpectedLimits, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace plait::transport::shm_test
