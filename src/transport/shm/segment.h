// POSIX shared-memory segments of the shm provider: naming, creation, mapping, unlinking,
// and the sweep of segments left behind by crashed processes.
//
// Names: "/plait-<job>-<rank>-<nonce>" under /dev/shm, where <job> is 16 hex digits of
// HMAC-SHA256(job token, fabric name): one job's segments share a prefix (easy to find and
// remove), another job's cannot be predicted without its token, and the per-process nonce
// keeps a fresh segment from colliding with a stale one. Segments are created 0600 with
// O_EXCL. The name is only a locator: what proves a segment belongs to the job is the token
// tag in its header, which peers verify after mapping (setup.cc).
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/shm/layout.h"

namespace plait::transport::shm {

// A mapping of one segment; unmaps on destruction. Unlinking is separate (see unlink()).
class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Creates and maps a fresh zero-filled segment; throws plait::Error(kSystem).
  static Segment create(const std::string& name, size_t bytes);
  // Maps an existing segment whole; an empty Segment (null base) if there is none by that
  // name. Throws plait::Error(kSystem), kRemote if it is too small to be one of ours.
  static Segment open(const std::string& name);

  char* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

  // Removes the name (the memory stays until the last mapping goes). Idempotent.
  void unlink();
  bool linked() const { return linked_; }

 private:
  std::string name_;
  char* base_ = nullptr;
  size_t bytes_ = 0;
  bool linked_ = false;  // we created it and have not unlinked it yet
};

// "/plait-<job>-<rank>-<nonce>" (see above).
std::string segment_name(const std::string& job_token, const std::string& fabric_name, int rank);
// The tag a segment's creator writes and its peers check.
std::array<uint8_t, kTagBytes> segment_tag(const std::string& job_token,
                                           const std::string& fabric_name, int rank,
                                           const std::string& segment_name);

// Every plait-* segment starts like SegmentHeader: a 64-bit magic (written last by the
// creator), a 32-bit version and the creator's 32-bit pid (written first). Besides the
// provider's segments (kSegmentMagic), the collective layer's (coll/segment) carry this one.
inline constexpr uint64_t kCollectiveSegmentMagic = 0x316c6c6f63746c70ull;  // "pltcoll1"

// Unlinks /dev/shm/plait-* segments of this user whose creator has exited (a crash during
// an earlier setup). Best effort, never throws.
void sweep_stale_segments();

// True if the process is gone (exited, or a zombie nobody reaped yet counts as alive here:
// use a pidfd for that).
bool process_gone(pid_t pid);
// True if the process is stopped by a signal or held by a tracer (state T or t in
// /proc/<pid>/stat); false when it runs, sleeps, or cannot be read.
bool process_stopped(pid_t pid);

// A random 64-bit value from the OS.
uint64_t random_u64();

// Lower-case hex of `n` bytes (segment names carry tags and MACs this way).
std::string hex(const uint8_t* bytes, size_t n);

}  // namespace plait::transport::shm
