#include "transport/shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "core/log.h"
#include "core/socket.h"
#include "plait/error.h"

namespace plait::transport::shm {
namespace {

constexpr std::string_view kPrefix = "plait-";

std::array<uint8_t, 32> hmac(const std::string& key, const std::string& message) {
  std::array<uint8_t, 32> mac{};
  unsigned int len = 0;
  static const uint8_t kEmpty = 0;  // HMAC() treats a null key as "reuse the last one"
  const void* k = key.empty() ? static_cast<const void*>(&kEmpty) : key.data();
  if (HMAC(EVP_sha256(), k, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(),
           &len) == nullptr)
    throw Error(ErrorCategory::kSystem, "HMAC-SHA256 failed", {.op = "shm segment name"});
  return mac;
}

}  // namespace

Segment::~Segment() {
  if (base_) ::munmap(base_, bytes_);
}

Segment::Segment(Segment&& other) noexcept
    : name_(std::move(other.name_)), base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)), linked_(std::exchange(other.linked_, false)) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    if (base_) ::munmap(base_, bytes_);
    name_ = std::move(other.name_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

Segment Segment::create(const std::string& name, size_t bytes) {
  const ErrorContext ctx{.op = "shm segment create", .bytes = static_cast<int64_t>(bytes)};
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw system_error("shm_open(" + name + ")", errno, ctx);
  Segment s;
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

Segment Segment::open(const std::string& name) {
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
  if (static_cast<size_t>(st.st_size) < sizeof(SegmentHeader)) {
    ::close(fd);
    throw remote_error("shm segment " + name + " is too small (" + std::to_string(st.st_size) +
                       " bytes) to be a plait segment", ctx);
  }
  void* p = ::mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw system_error("mmap(" + name + ")", err, ctx);
  Segment s;
  s.name_ = name;
  s.base_ = static_cast<char*>(p);
  s.bytes_ = static_cast<size_t>(st.st_size);
  return s;
}

void Segment::unlink() {
  if (!linked_) return;
  linked_ = false;
  if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT)
    log(LogLevel::kWarn, "shm_unlink(", name_, "): ", std::strerror(errno));
}

uint64_t random_u64() {
  uint64_t v = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v) != 1) {
    std::random_device rd;
    v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  return v;
}

std::string hex(const uint8_t* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[bytes[i] >> 4];
    s += digits[bytes[i] & 15];
  }
  return s;
}

std::string segment_name(const std::string& job_token, const std::string& fabric_name, int rank) {
  auto job = hmac(job_token, "plait shm job/" + fabric_name);
  uint32_t nonce = static_cast<uint32_t>(random_u64());
  std::string name = "/";
  name += kPrefix;
  name += hex(job.data(), 8);
  name += '-';
  name += std::to_string(rank);
  name += '-';
  name += hex(reinterpret_cast<const uint8_t*>(&nonce), sizeof nonce);
  return name;
}

std::array<uint8_t, kTagBytes> segment_tag(const std::string& job_token,
                                           const std::string& fabric_name, int rank,
                                           const std::string& segment_name) {
  return hmac(job_token, "plait shm segment/" + fabric_name + "/" + std::to_string(rank) + "/" +
                             segment_name);
}

bool process_gone(pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

bool process_stopped(pid_t pid) {
  if (pid <= 0) return false;
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  net::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  char buf[512];
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "pid (comm) S ...": the name may hold spaces and parentheses; the state follows the last ')'.
  const char* close = std::strrchr(buf, ')');
  if (!close || close[1] != ' ') return false;
  return close[2] == 'T' || close[2] == 't';
}

void sweep_stale_segments() {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return;
  const uid_t me = ::getuid();
  while (dirent* e = ::readdir(dir)) {
    std::string_view entry = e->d_name;
    if (entry.substr(0, kPrefix.size()) != kPrefix) continue;
    std::string name = "/";
    name += entry;
    int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) continue;
    struct stat st {};
    bool stale = false;
    if (::fstat(fd, &st) == 0 && st.st_uid == me &&
        static_cast<size_t>(st.st_size) >= sizeof(SegmentHeader)) {
      void* p = ::mmap(nullptr, sizeof(SegmentHeader), PROT_READ, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        const auto* h = static_cast<const SegmentHeader*>(p);
        // The creator writes its pid first thing (magic last); a header without one may
        // belong to a live creator that is still setting it up: keep it.
        const uint64_t magic = h->magic.load(std::memory_order_acquire);
        const pid_t pid = __atomic_load_n(&h->pid, __ATOMIC_ACQUIRE);
        stale = (magic == 0 || magic == kSegmentMagic || magic == kCollectiveSegmentMagic) &&
                pid > 0 && pid != ::getpid() && process_gone(pid);
        ::munmap(p, sizeof(SegmentHeader));
      }
    }
    ::close(fd);
    if (stale && ::shm_unlink(name.c_str()) == 0)
      log(LogLevel::kInfo, "shm: removed ", name, ", left behind by a process that exited");
  }
  ::closedir(dir);
}

}  // namespace plait::transport::shm
