// The TCP provider's receiving side (transport/tcp/wire.h, stream.cc, and the checks of
// tcp_fabric.cc, two_sided.cc, rma.cc and stream_loss.cc), driven for real by the targets
// tcp_stream (one stream) and tcp_streams (two): a TcpFabric of rank 0 of 2 is built over
// socket pairs whose other ends play rank 1, as after the job-token handshake and the hellos,
// and rank 1 sends one byte string per stream, then closes.
//
// Before the input goes in, rank 0 has work pending with rank 1, so that its replies have
// something to match (op ids are deterministic, from 1, in the order below): receives with
// tags 1 (8 KiB) and 2 (8 bytes: truncation), a rendezvous send (tag 3, two stripes), a
// write with an immediate, a read, a fetch-add and a compare-swap; and a 4 KiB region rank 1
// may access. Its key is random, so a header of kWrite, kReadReq or kAtomic whose tag is
// kKeyPlaceholder is given the real key (the harness walks the frames to find them). After
// EOF, receives with tags 5 and 6 collect what arrived unexpected.
//
// Every input ends the same way: the fabric reads it, then EOF (or a goodbye, or a protocol
// error) fails rank 1 and with it every op still pending, so each op completes exactly once;
// a missing completion is a hang and aborts. PLAIT_FUZZ_TRACE=1 prints how each op ended
// (for writing seeds that reach further).
#pragma once

#include <cstdint>
#include <vector>

namespace plait::fuzz {

inline constexpr uint64_t kKeyPlaceholder = 0x6b6579;  // "key"

// Runs one input: `per_stream[s]` is what rank 1 sends on stream s (as many streams).
void run_tcp_fabric(std::vector<std::vector<uint8_t>> per_stream);

}  // namespace plait::fuzz
