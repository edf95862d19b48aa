// POSIX shared memory: a named mapping (create, open, unlink) and the sweep of mappings left
// behind by processes that crashed while setting them up. The shm provider's segments and the
// collective layer's segment are both made of it; their names and layouts are their own.
//
// Every plait mapping is named "/plait-..." and starts with a SharedMemoryHeader, which is what
// lets the sweep tell whose it is and whether its creator is gone.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace plait {

inline constexpr std::string_view kSharedMemoryPrefix = "plait-";  // under /dev/shm

// The first 16 bytes of every plait mapping. The creator writes its pid first and the magic
// last, so a mapping with a pid and no magic is one whose setup has not finished (or died).
struct SharedMemoryHeader {
  std::atomic<uint64_t> magic{0};
  uint32_t version = 0;
  int32_t pid = 0;
};

// A mapping of one named shared-memory object; unmaps on destruction. Unlinking is separate
// (see unlink()).
class SharedMemory {
 public:
  SharedMemory() = default;
  ~SharedMemory();
  SharedMemory(SharedMemory&& other) noexcept;
  SharedMemory& operator=(SharedMemory&& other) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  // Creates (0600, O_EXCL) and maps a fresh zero-filled object; throws plait::Error(kSystem).
  static SharedMemory create(const std::string& name, size_t bytes);
  // Maps an existing object whole; an empty SharedMemory (null base) if there is none by that
  // name. Throws plait::Error(kSystem), kRemote if it is smaller than `min_bytes` (too small
  // to be the caller's kind of mapping).
  static SharedMemory open(const std::string& name, size_t min_bytes);

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

// Unlinks this user's /dev/shm/plait-* objects whose header carries one of `magics` (or none
// yet) and whose creator has exited: what a crash during an earlier setup left behind. Best
// effort, never throws.
void sweep_stale_shared_memory(std::initializer_list<uint64_t> magics);

}  // namespace plait
