// The check of a peer's segment header at setup (setup.cc's verify_peer): the only time this
// rank reads geometry from memory a peer writes. A pure function of the mapped bytes, so that
// setup and the fuzz target (fuzz/shm_segment_fuzz.cc) run the same checks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/shm/layout.h"

namespace plait::transport::shm {

struct CheckedPeer {
  Geometry geometry;      // the layout it claims, verified: from now on, the only one used
  uint32_t my_index = 0;  // our index in its peer list (our ring and pins there)
};

// Checks rank `peer`'s segment, mapped at `base` (`mapped` bytes, at least a SegmentHeader),
// for rank `our_rank` of a job of `size`: magic and version, the token tag it should carry
// (`expected_tag`), its rank and size, a geometry that is exactly make_geometry()'s for what
// it claims and fits the mapping, and our rank in its peer list. Each header field is read
// once: the peer may rewrite the header meanwhile. Throws plait::Error naming `who`:
// kInvalidUsage for another job or version, kRemote for an inconsistent layout.
CheckedPeer check_peer_segment(char* base, size_t mapped,
                               const std::array<uint8_t, kTagBytes>& expected_tag, int peer,
                               int size, int our_rank, const std::string& who);

}  // namespace plait::transport::shm
