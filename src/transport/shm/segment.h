// The names and token tags of the shm provider's segments (the mapping itself is
// core/shared_memory.h).
//
// Names: "/plait-<job>-<rank>-<nonce>" under /dev/shm, where <job> is 16 hex digits of
// HMAC-SHA256(job token, fabric name): one job's segments share a prefix (easy to find and
// remove), another job's cannot be predicted without its token, and the per-process nonce
// keeps a fresh segment from colliding with a stale one. Segments are created 0600 with
// O_EXCL. The name is only a locator: what proves a segment belongs to the job is the token
// tag in its header, which peers verify after mapping (setup.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/shm/layout.h"

namespace plait::transport::shm {

// "/plait-<job>-<rank>-<nonce>" (see above).
std::string segment_name(const std::string& job_token, const std::string& fabric_name, int rank);
// The tag a segment's creator writes and its peers check.
std::array<uint8_t, kTagBytes> segment_tag(const std::string& job_token,
                                           const std::string& fabric_name, int rank,
                                           const std::string& segment_name);

}  // namespace plait::transport::shm
