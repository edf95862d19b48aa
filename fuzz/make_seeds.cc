// Writes the seed inputs of every fuzz target (fuzz/corpus/<target>/seed-*), built with the
// encoders plait itself uses wherever it has one, so that a format change is one rebuild and
// rerun away from fresh seeds:
//
//   plait_fuzz_seeds fuzz/corpus
//
// Seeds are valid inputs that reach deep into each parser; libFuzzer mutates from there.
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <string_view>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/store_protocol.h"
#include "coll/deadline/wire.h"
#include "coll/stall/stall_report.h"
#include "plait/checkpoint.h"
#include "ps/wire.h"
#include "shuffle/wire.h"
#include "transport/shm/ring.h"
#include "transport/shm/segment.h"
#include "transport/tcp/wire.h"
#include "transport/tuned_costs.h"
#include "transport/ucx/wire.h"

namespace {

namespace fs = std::filesystem;
using namespace plait;
using Blob = std::vector<uint8_t>;

fs::path g_root;

void emit(const std::string& target, const std::string& name, const Blob& bytes) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  std::ofstream(dir / ("seed-" + name), std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void append(Blob& out, const T& value) {
  const size_t at = out.size();
  out.resize(at + sizeof value);
  std::memcpy(out.data() + at, &value, sizeof value);
}
void append(Blob& out, const std::string& s) { out.insert(out.end(), s.begin(), s.end()); }
void append(Blob& out, const Blob& b) { out.insert(out.end(), b.begin(), b.end()); }
Blob concat(std::initializer_list<Blob> parts) {
  Blob out;
  for (const Blob& p : parts) append(out, p);
  return out;
}

void store_seeds() {
  using namespace store_wire;
  auto frame = [](const std::function<void(Writer&)>& fill) {
    Writer w;
    fill(w);
    return w.finish();
  };
  const Blob set = frame([](Writer& w) { w.u8(uint8_t(Op::kSet)).str("key").str("12"); });
  const Blob get = frame([](Writer& w) { w.u8(uint8_t(Op::kGet)).u64(0).str("key"); });
  const Blob add = frame([](Writer& w) { w.u8(uint8_t(Op::kAdd)).str("n").i64(-5); });
  const Blob wait = frame([](Writer& w) {
    write_strings(w.u8(uint8_t(Op::kWait)).u64(10), {"a", "b"});
  });
  const Blob check = frame([](Writer& w) { w.u8(uint8_t(Op::kCheck)).str("key"); });
  emit("store_request", "set", set);
  emit("store_request", "get", get);
  emit("store_request", "add", add);
  emit("store_request", "wait", wait);
  emit("store_request", "check", check);
  emit("store_request", "pipelined", concat({set, get, add, wait, check}));

  // store_reply: the op's index (op - 1), then the body (without its frame length).
  auto reply = [](Op op, const std::function<void(Writer&)>& fill) {
    Writer w;
    fill(w);
    const Blob f = w.finish();
    Blob seed{static_cast<uint8_t>(uint8_t(op) - 1)};
    seed.insert(seed.end(), f.begin() + kFrameHeaderBytes, f.end());
    return seed;
  };
  emit("store_reply", "set-ok", reply(Op::kSet, [](Writer& w) { w.u8(uint8_t(Status::kOk)); }));
  emit("store_reply", "get-ok",
       reply(Op::kGet, [](Writer& w) { w.u8(uint8_t(Status::kOk)).str("value"); }));
  emit("store_reply", "add-ok",
       reply(Op::kAdd, [](Writer& w) { w.u8(uint8_t(Status::kOk)).i64(42); }));
  emit("store_reply", "check-ok",
       reply(Op::kCheck, [](Writer& w) { w.u8(uint8_t(Status::kOk)).u8(1); }));
  emit("store_reply", "wait-timeout", reply(Op::kWait, [](Writer& w) {
         write_strings(w.u8(uint8_t(Status::kTimeout)), {"a", "b"});
       }));
  emit("store_reply", "add-error", reply(Op::kAdd, [](Writer& w) {
         w.u8(uint8_t(Status::kError)).str("not a decimal integer");
       }));
}

void auth_seeds() {
  // core/auth.cc: magic[8] "plaitAUT" | version u16 (1) | reserved u16 | 32 bytes.
  auto message = [](uint8_t fill) {
    Blob m;
    append(m, std::string("plaitAUT"));
    append(m, Blob{0, 1, 0, 0});
    m.insert(m.end(), 32, fill);
    return m;
  };
  Blob accept{0};
  append(accept, message(0xab));
  emit("auth_handshake", "accept-proof", accept);
  for (uint8_t verdict : {0, 1, 2}) {
    Blob connect{1};
    append(connect, message(0x17));
    connect.push_back(verdict);
    emit("auth_handshake", "connect-verdict-" + std::to_string(verdict), connect);
  }
}

void tcp_seeds() {
  using namespace transport::tcp;
  Hello h;
  h.rank = 1;
  h.size = 4;
  h.streams = 2;
  h.stream = 1;
  h.name_length = 4;
  Blob hello;
  append(hello, h);
  append(hello, std::string("fuzz"));
  emit("tcp_hello", "rank1-stream1", hello);

  // tcp_stream: rank 1's messages; ids of rank 0's ops as tcp_stream_fuzz.cc posts them.
  constexpr uint64_t kKey = 0x6b6579;  // tcp_stream_fuzz.cc's kKeyPlaceholder
  auto frame = [](WireHeader w, const std::string& payload = {}) {
    w.length = payload.size();
    Blob b;
    append(b, w);
    append(b, payload);
    return b;
  };
  using T = MessageType;
  const Blob eager = frame({.type = T::kEager, .tag = 1}, "hello, rank 0");
  const Blob truncated = frame({.type = T::kEager, .tag = 2}, std::string(40, 't'));
  const Blob unexpected = frame({.type = T::kEager, .tag = 5}, "early");
  const Blob rts = frame({.type = T::kRts, .id = 90, .tag = 1, .arg0 = 3000});
  const Blob data = frame({.type = T::kData, .id = 1}, std::string(3000, 'd'));
  const Blob rts_late = frame({.type = T::kRts, .id = 91, .tag = 6, .arg0 = 5000});
  const Blob cts = frame({.type = T::kCts, .id = 3, .arg0 = 77});
  const Blob ack = frame({.type = T::kWriteAck, .id = 4, .arg0 = 256});
  const Blob read_resp = frame({.type = T::kReadResp, .id = 5}, std::string(256, 'r'));
  const Blob fetched = frame({.type = T::kAtomicResp, .id = 6, .arg0 = 41});
  const Blob denied =
      frame({.type = T::kAtomicResp, .flags = kFlagDenied, .id = 7}, "remote access denied");
  const Blob write = frame({.type = T::kWrite,
                            .flags = kFlagImm,
                            .imm = 9,
                            .id = 50,
                            .tag = kKey,
                            .word = 64,
                            .arg0 = 32,
                            .arg1 = 64},
                           std::string(32, 'W'));
  const Blob read_req = frame({.type = T::kReadReq, .id = 51, .tag = kKey, .arg1 = 128});
  const Blob atomic = frame({.type = T::kAtomic,
                             .flags = kFlagCompareSwap,
                             .id = 52,
                             .tag = kKey,
                             .word = 8,
                             .arg0 = 3,
                             .arg1 = 4});
  const Blob goodbye = frame({.type = T::kGoodbye});
  const Blob data_ack = frame({.type = T::kDataAck, .id = 3});
  const Blob keepalive = frame({.type = T::kKeepAlive});
  const Blob lost = frame({.type = T::kStreamLost, .arg0 = 1});
  emit("tcp_stream", "two-sided", concat({eager, truncated, unexpected, rts_late, cts}));
  emit("tcp_stream", "rendezvous-in", concat({rts, data}));
  emit("tcp_stream", "replies", concat({ack, read_resp, fetched, denied}));
  emit("tcp_stream", "target-side", concat({write, read_req, atomic, goodbye}));
  emit("tcp_stream", "rendezvous-out", concat({cts, keepalive, data_ack, lost}));

  // tcp_streams: u16 length of stream 0's bytes, then stream 0's, then stream 1's.
  auto two = [](const Blob& s0, const Blob& s1) {
    Blob b;
    append(b, static_cast<uint16_t>(s0.size()));
    return concat({b, s0, s1});
  };
  const Blob rts_striped = frame({.type = T::kRts, .id = 92, .tag = 1, .arg0 = 6000});
  const Blob stripe0 = frame({.type = T::kData, .id = 1}, std::string(4096, 'a'));
  const Blob stripe1 = frame({.type = T::kData, .id = 1, .word = 4096}, std::string(1904, 'b'));
  emit("tcp_streams", "rendezvous-in", two(concat({rts_striped, stripe0}), stripe1));
  emit("tcp_streams", "rendezvous-out", two(concat({cts, data_ack}), keepalive));
  emit("tcp_streams", "stream-lost", two(concat({lost, cts, data_ack, eager}), {}));
}

void shm_seeds() {
  using namespace transport::shm;
  constexpr uint64_t kCapacity = 4096;  // shm_ring_fuzz.cc's ring
  for (uint64_t start_records : {0, 60}) {
    auto control = std::make_unique<RingControl>();
    std::vector<char> ring(kCapacity);
    const uint64_t head = start_records * kRecordAlign;
    control->head = head;
    control->tail = head;
    RingWriter w(control.get(), ring.data(), kCapacity);
    Record r;
    r.type = RecordType::kEager;
    r.tag = 1;
    w.write(r, "payload of an eager message", 27);
    r.type = RecordType::kRts;
    r.id = 3;
    r.arg0 = 1 << 20;
    w.write(r, nullptr, 0);
    r.type = RecordType::kData;
    const std::string piece(200, 'p');
    w.write(r, piece.data(), piece.size());  // wraps after the start at 60: a pad first
    const uint64_t published = control->tail - head;
    Blob seed;
    append(seed, static_cast<uint16_t>(start_records));
    append(seed, static_cast<uint32_t>(published));
    for (uint64_t i = 0; i < published; ++i)
      seed.push_back(static_cast<uint8_t>(ring[(head + i) % kCapacity]));
    emit("shm_ring", "records-from-" + std::to_string(start_records), seed);
  }

  // shm_segment: what init_header() writes for rank 1 of 4 serving ranks 0 and 2.
  const Geometry g = make_geometry(2, 4096, 4);
  std::vector<char> seg(g.total_bytes);
  SegmentView view(seg.data(), g);
  SegmentHeader& h = view.header();
  h.magic = kSegmentMagic;
  write_layout(h, 1, 4, g);
  view.peer_ranks()[0] = 2;
  view.peer_ranks()[1] = 0;
  Blob seed{1};  // the harness writes the tag
  append(seed, static_cast<uint16_t>(g.total_bytes / 4096 - 1));
  // Only up to the peer list: the rest of a fresh segment is zero, as the harness fills it.
  seed.insert(seed.end(), seg.begin(), seg.begin() + static_cast<ptrdiff_t>(g.cma_offset));
  emit("shm_segment", "rank1-of-4", seed);
}

void file_seeds() {
  transport::TunedCosts costs;
  costs.set("tcp", "alpha_us", 14.1);
  costs.set("shm", "beta_bytes_per_us", 5200);
  costs.set("host", "gamma_bytes_per_us", 8100.5);
  costs.set("host", "flag_us", 0.3);
  const std::string text = transport::format_tuned_costs(costs, "plait tune 0.1.0, fuzz seed");
  emit("tune_file", "written", Blob(text.begin(), text.end()));
  const std::string by_hand =
      "# by hand\n\n  tcp.alpha_us=1e1  # inline comment\nshm.copy_bytes_per_us = 9400\n";
  emit("tune_file", "by-hand", Blob(by_hand.begin(), by_hand.end()));

  for (const std::string& payload : {std::string(), std::string("model state: 0123456789")}) {
    const std::string path =
        (fs::temp_directory_path() / ("plait-seed-" + std::to_string(::getpid()))).string();
    checkpoint::write_file(path, payload.data(), payload.size());
    std::ifstream in(path, std::ios::binary);
    Blob file{0};  // as written: the harness leaves length and digest alone
    file.insert(file.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    fs::remove(path);
    emit("checkpoint_file", payload.empty() ? "empty" : "small", file);
  }
}

void ps_seeds() {
  // ps_control: direction (bit 0) and held slots (bits 1-5), the kind, the message.
  using namespace ps::wire;
  auto seed = [](bool to_worker, uint8_t held, Kind kind, const Blob& msg) {
    Blob b{static_cast<uint8_t>((to_worker ? 1 : 0) | held << 1), static_cast<uint8_t>(kind)};
    return concat({b, msg});
  };
  PullRequest pull{.partition = 3,
                   .clock = 12,
                   .dest = {.addr = 0x7f0000001000, .length = 4096, .key = 0x6b6579},
                   .dest_offset = 1024,
                   .request = 9};
  Blob request;
  append(request, pull);
  emit("ps_control", "pull-request", seed(false, 0, Kind::kPullRequest, request));
  emit("ps_control", "done", seed(false, 0, Kind::kDone, {}));
  Blob credits;
  append(credits, Credits{.count = 3});
  for (uint32_t slot : {2u, 0u, 1u}) append(credits, slot);
  emit("ps_control", "credits", seed(true, 4, Kind::kCredits, credits));
  emit("ps_control", "done-ack", seed(true, 0, Kind::kDoneAck, {}));
  Blob failure;
  append(failure, FailureHeader{.request = 9,
                                .partition = 3,
                                .category = static_cast<uint32_t>(ErrorCategory::kInvalidUsage)});
  append(failure, std::string("partition 3 is not on server rank 0"));
  emit("ps_control", "failure", seed(true, 0, Kind::kFailure, failure));
}

void deadline_seeds() {
  // deadline_wire: kind and chunk_bytes' index, the job's size - 1, chunks - 1, the message.
  using namespace deadline::wire;
  auto contribution = [](uint8_t chunk_index, uint64_t count, DataType dtype, uint8_t flags) {
    ContributionHeader h;
    h.step = 5;
    h.count = count;
    h.dtype = static_cast<uint8_t>(dtype);
    h.op = static_cast<uint8_t>(ReduceOp::kSum);
    h.flags = flags;
    Blob b{static_cast<uint8_t>(chunk_index << 1), 0, 0};
    append(b, h);
    return b;
  };
  emit("deadline_wire", "contribution", contribution(0, 1000, DataType::kF32, 0));
  emit("deadline_wire", "contribution-chunked", contribution(3, 3000, DataType::kBF16, 0));
  emit("deadline_wire", "contribution-no-values", contribution(0, 1000, DataType::kF32, kNoValues));
  auto result = [](int size, size_t nchunks) {
    ResultHeader h;
    h.step = 5;
    h.count = 1000;
    h.dropped_ppm = 250000;
    const size_t words = mask_words(size);
    h.contributors.assign(words, 0);
    h.slow.assign(words, 0);
    h.present.assign(words, 0);
    h.chunks.assign(nchunks > 1 ? nchunks * words : 0, 0);
    for (int r = 0; r < size; ++r) {
      set_bit(h.present, r);
      if (r != 1) set_bit(h.contributors, r);
    }
    set_bit(h.slow, 1);
    for (size_t c = 0; c < nchunks && nchunks > 1; ++c)
      for (int r = 0; r < size; ++r)
        if (r != 1 || c == 0) set_bit(h.chunks, static_cast<int>(c * words * 64) + r);
    std::vector<char> bytes;
    h.encode(bytes, size);
    Blob b{1, static_cast<uint8_t>(size - 1), static_cast<uint8_t>(nchunks - 1)};
    b.insert(b.end(), bytes.begin(), bytes.end());
    return b;
  };
  emit("deadline_wire", "result-4-ranks", result(4, 1));
  emit("deadline_wire", "result-70-ranks-3-chunks", result(70, 3));
}

void ucx_seeds() {
  // ucx_wire: the active message's id, the header's length, the header, the data.
  using namespace transport::ucx;
  auto am = [](AmId id, const auto& header, const std::string& data = {}) {
    Blob b{static_cast<uint8_t>(id), static_cast<uint8_t>(sizeof header)};
    append(b, header);
    append(b, data);
    return b;
  };
  emit("ucx_wire", "hello", am(kAmHello, HelloHeader{.source = 1, .size = 4}));
  emit("ucx_wire", "message",
       am(kAmMessage, MessageHeader{.source = 2, .tag = 7, .word = 0x1234}, "payload"));
  emit("ucx_wire", "imm",
       am(kAmImm, ImmHeader{.source = 3, .imm = 9, .op = 4, .key = 0x6b6579, .offset = 64,
                            .length = 32}));
  emit("ucx_wire", "imm-done", am(kAmImmDone, ImmDone{.source = 3, .op = 4}));
  emit("ucx_wire", "goodbye", am(kAmGoodbye, int32_t{2}, "rank 3 stopped"));
  emit("ucx_wire", "key-request", am(kAmKeyRequest, KeyRequest{.source = 1, .key = 0x6b6579}));
  emit("ucx_wire", "key-reply",
       am(kAmKeyReply,
          KeyReply{.source = 1, .key = 0x6b6579, .base = 0x7f0000001000, .length = 4096, .access = 3},
          std::string(40, 'k')));
  emit("ucx_wire", "key-denied",
       am(kAmKeyReply, KeyReply{.source = 1, .denied = 1, .key = 0x6b6579},
          "region 0x6b6579 is not registered"));
  emit("ucx_wire", "key-revoke", am(kAmKeyRevoke, KeyRevoke{.source = 2, .key = 0x6b6579}));
  emit("ucx_wire", "key-revoked", am(kAmKeyRevoked, KeyRevoke{.source = 2, .key = 0x6b6579}));
}

void shuffle_seeds() {
  // shuffle_wire: what (0 locations, 1 request, 2 credit, 3 target), its fields, the message.
  using namespace shuffle;
  Blob locations{0, 100};
  append(locations, BlockWire{.offset = 2, .bytes = 300});
  append(locations, BlockWire{.addr = 0x7f0000001000, .length = 8192, .key = 0x6b6579,
                              .offset = 512, .bytes = 100});
  append(locations, BlockWire{.offset = 4096, .bytes = 200, .in_file = 1});
  emit("shuffle_wire", "locations", locations);
  locations[0] = 4;  // the harness writes the header's count and total
  std::memset(locations.data() + 2 + offsetof(BlockWire, offset), 0, 16);
  emit("shuffle_wire", "locations-header-written", locations);
  Blob request{1};
  append(request, uint64_t{8192});
  append(request, RequestWire{.offset = 4096, .bytes = 200, .id = 3});
  emit("shuffle_wire", "request", request);
  Blob credit{2, 2};
  append(credit, uint64_t{1000});
  append(credit, uint64_t{500});
  append(credit, CreditWire{.block = 1, .offset = 100, .bytes = 300, .id = 4,
                            .addr = 0x7f0000001000, .length = 65536, .key = 0x6b6579,
                            .window = 1024});
  emit("shuffle_wire", "credit", credit);
  Blob target{3};
  append(target, uint64_t{300});
  append(target, BlockWire{.addr = 0x7f0000001000, .length = 65536, .key = 0x6b6579,
                           .offset = 600, .bytes = 300});
  emit("shuffle_wire", "target", target);
}

void stall_seeds() {
  // stall_state: the line, as encode_state() writes it.
  using namespace coll;
  auto line = [](const RankState& s) {
    const std::string text = encode_state(s);
    return Blob(text.begin(), text.end());
  };
  RankState in;
  in.answered = in.in_collective = in.started = true;
  in.current = Signature{.seq = 1043, .op = CollOp::kBroadcast, .dtype = DataType::kF32,
                         .redop = ReduceOp::kSum, .root = 0, .count = 4194304};
  in.waited_s = 10.2;
  emit("stall_state", "in-collective", line(in));
  RankState idle = in;
  idle.in_collective = false;
  idle.current.op = CollOp::kAllreduce;
  idle.current.root = -1;
  emit("stall_state", "idle-after", line(idle));
  RankState none;
  none.answered = true;
  emit("stall_state", "none-yet", line(none));
}

}  // namespace

int main(int argc, char** argv) {
  // An option is not a folder: `--help` once wrote a copy of the seeds into ./--help.
  if (argc != 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: %s CORPUS_ROOT   (writes the seed inputs under CORPUS_ROOT)\n",
                 argv[0]);
    return argc == 2 && std::string_view(argv[1]) == "--help" ? 0 : 2;
  }
  g_root = argv[1];
  store_seeds();
  auth_seeds();
  tcp_seeds();
  shm_seeds();
  file_seeds();
  ps_seeds();
  deadline_seeds();
  ucx_seeds();
  shuffle_seeds();
  stall_seeds();
  return 0;
}
