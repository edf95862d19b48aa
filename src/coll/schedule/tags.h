// Transport tags of one communicator. Communicators split from one another share a fabric,
// so every tag carries the communicator's id; within it, a kind and a per-kind value:
//   comm id (20 bits) | kind (2) | value (42)
// Collective messages are numbered per ordered pair of ranks (the n-th message from a to b
// in this communicator's life), which lets steps of a schedule run in any order their
// dependencies allow and still pair up (schedule.h's matching contract).
#pragma once

#include <cstdint>

namespace plait::coll {

enum class TagKind : uint64_t { kCollective = 0, kPointToPoint = 1, kControl = 2 };

inline constexpr uint64_t kTagValueBits = 42;
inline constexpr uint64_t kCommIdBits = 20;

inline uint64_t make_tag(uint32_t comm_id, TagKind kind, uint64_t value) {
  return (static_cast<uint64_t>(comm_id & ((1u << kCommIdBits) - 1)) << 44) |
         (static_cast<uint64_t>(kind) << kTagValueBits) |
         (value & ((uint64_t{1} << kTagValueBits) - 1));
}

}  // namespace plait::coll
