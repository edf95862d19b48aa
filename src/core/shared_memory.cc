#include "core/shared_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/log.h"
#include "core/process.h"
#include "plait/error.h"

namespace plait {

SharedMemory::~SharedMemory() {
  if (base_) ::munmap(base_, bytes_);
}

SharedMemory::SharedMemory(SharedMemory&& other) noexcept
    : name_(std::move(other.name_)), base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)), linked_(std::exchange(other.linked_, false)) {}

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
  if (this != &other) {
    if (base_) ::munmap(base_, bytes_);
    name_ = std::move(other.name_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

SharedMemory SharedMemory::create(const std::string& name, size_t bytes) {
  const ErrorContext ctx{.op = "shm segment create", .bytes = static_cast<int64_t>(bytes)};
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw system_error("shm_open(" + name + ")", errno, ctx);
  SharedMemory s;
  s.name_ = name;
  s.linked_ = true;  // from here on, an error path unlinks it (the destructor of `s` does not)
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    s.unlink();
    throw system_error("ftruncate(" + name + ", " + std::to_string(bytes) +
                           ") (is /dev/shm full?)", err, ctx);
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    s.unlink();
    throw system_error("mmap(" + name + ")", err, ctx);
  }
  s.base_ = static_cast<char*>(p);
  s.bytes_ = bytes;
  return s;
}

SharedMemory SharedMemory::open(const std::string& name, size_t min_bytes) {
  const ErrorContext ctx{.op = "shm segment open"};
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0 && errno == ENOENT) return {};
  if (fd < 0) throw system_error("shm_open(" + name + ")", errno, ctx);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw system_error("fstat(" + name + ")", err, ctx);
  }
  if (static_cast<size_t>(st.st_size) < min_bytes) {
    ::close(fd);
    throw remote_error("shm segment " + name + " is too small (" + std::to_string(st.st_size) +
                       " bytes) to be a plait segment", ctx);
  }
  void* p = ::mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw system_error("mmap(" + name + ")", err, ctx);
  SharedMemory s;
  s.name_ = name;
  s.base_ = static_cast<char*>(p);
  s.bytes_ = static_cast<size_t>(st.st_size);
  return s;
}

void SharedMemory::unlink() {
  if (!linked_) return;
  linked_ = false;
  if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT)
    log(LogLevel::kWarn, "shm_unlink(", name_, "): ", std::strerror(errno));
}

void sweep_stale_shared_memory(std::initializer_list<uint64_t> magics) {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return;
  const uid_t me = ::getuid();
  while (dirent* e = ::readdir(dir)) {
    std::string_view entry = e->d_name;
    if (entry.substr(0, kSharedMemoryPrefix.size()) != kSharedMemoryPrefix) continue;
    std::string name = "/";
    name += entry;
    int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) continue;
    struct stat st {};
    bool stale = false;
    if (::fstat(fd, &st) == 0 && st.st_uid == me &&
        static_cast<size_t>(st.st_size) >= sizeof(SharedMemoryHeader)) {
      void* p = ::mmap(nullptr, sizeof(SharedMemoryHeader), PROT_READ, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        const auto* h = static_cast<const SharedMemoryHeader*>(p);
        // The creator writes its pid first thing (magic last); a header without one may
        // belong to a live creator that is still setting it up: keep it.
        const uint64_t magic = h->magic.load(std::memory_order_acquire);
        const pid_t pid = __atomic_load_n(&h->pid, __ATOMIC_ACQUIRE);
        const bool ours =
            magic == 0 || std::find(magics.begin(), magics.end(), magic) != magics.end();
        stale = ours && pid > 0 && pid != ::getpid() && process_gone(pid);
        ::munmap(p, sizeof(SharedMemoryHeader));
      }
    }
    ::close(fd);
    if (stale && ::shm_unlink(name.c_str()) == 0)
      log(LogLevel::kInfo, "shm: removed ", name, ", left behind by a process that exited");
  }
  ::closedir(dir);
}

}  // namespace plait
