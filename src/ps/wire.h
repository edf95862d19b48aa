// What the parameter server's ranks say to each other over the public one-sided API.
//
//   data          one-sided writes
//     push        worker -> its ring on the server, slot = offset / slot bytes;
//                 immediate = PushImm (partition id and kind)
//     pull reply  server -> the worker's registered buffer at the partition's offset;
//                 immediate = the version's low 32 bits (the worker knows the rest: the
//                 version is within 2^31 of its own clock, see version_near)
//   control       two-sided eager messages, tag kToServer / kToWorker
//     PullRequest worker -> server: which partition, at which clock, into which buffer
//     Done        worker -> server: no more requests from this worker
//     DoneAck     server -> worker: Done was taken (the worker may close its connections:
//                 a goodbye that overtook Done would look like a worker that left)
//     Credits     server -> worker: ring slots it has consumed since the last Credits
//     Failure     server -> worker: a pull that cannot be answered, and why (text follows)
#pragma once

#include <cstdint>

#include "plait/rdma.h"

namespace plait::ps::wire {

inline constexpr uint64_t kToServer = 0x50530001;  // "PS" 1
inline constexpr uint64_t kToWorker = 0x50530002;

// Message kinds travel in the two-sided header word.
enum class Kind : uint64_t { kPullRequest = 1, kDone, kCredits, kFailure, kDoneAck };

// A push's immediate: the partition (24 bits) and what to do with the data.
enum class PushKind : uint32_t { kGradient = 0 };
inline constexpr uint32_t kMaxPartitions = 1u << 24;
inline uint32_t push_imm(uint32_t partition, PushKind kind) {
  return partition | (static_cast<uint32_t>(kind) << 24);
}
inline uint32_t imm_partition(uint32_t imm) { return imm & (kMaxPartitions - 1); }
inline PushKind imm_kind(uint32_t imm) { return static_cast<PushKind>(imm >> 24); }

// The version whose low 32 bits are `low`, nearest to `clock`: the one within 2^31 of it,
// behind (slower workers) or ahead (BSP rounds that went on with backup workers).
inline uint64_t version_near(uint64_t clock, uint32_t low) {
  const auto ahead = static_cast<int32_t>(low - static_cast<uint32_t>(clock));
  const uint64_t v = clock + static_cast<uint64_t>(static_cast<int64_t>(ahead));
  return ahead < 0 && clock < static_cast<uint64_t>(-static_cast<int64_t>(ahead)) ? low : v;
}

struct PullRequest {
  uint32_t partition = 0;
  uint32_t reserved = 0;
  uint64_t clock = 0;        // the worker's pushes of this partition when it asked
  rdma::RemoteKey dest;      // the worker's buffer for the whole key
  uint64_t dest_offset = 0;  // where this partition goes in it
  uint64_t request = 0;      // the worker's id for this request, echoed in a Failure
};

// Slots of the worker's ring the server has finished with: a Credits header, then `count`
// uint32_t slot indices.
struct Credits {
  uint32_t count = 0;
  uint32_t reserved = 0;
};

// A Failure's fixed part; the reason text follows it.
struct FailureHeader {
  uint64_t request = 0;  // 0: every pending pull of this worker with this server
  uint32_t partition = 0;
  uint32_t category = 0;  // ErrorCategory
};

// Control messages are at most this long (a Credits for 1,024 slots fits; reasons are cut).
inline constexpr size_t kMaxMessageBytes = 8192;
inline constexpr size_t kMaxReasonBytes = 2048;

}  // namespace plait::ps::wire
