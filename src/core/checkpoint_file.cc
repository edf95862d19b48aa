// Atomic, checksummed checkpoint files (plait/checkpoint.h).
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>

#include "plait/checkpoint.h"
#include "plait/error.h"

namespace plait::checkpoint {
namespace {

constexpr char kMagic[8] = {'P', 'L', 'A', 'I', 'T', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 1;
using Digest = std::array<unsigned char, 32>;

// magic, version, reserved, payload bytes, SHA-256: fixed little-endian layout (the machines
// plait runs on are little-endian; the magic would not match on others).
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  uint64_t bytes;
  unsigned char digest[32];
};
static_assert(sizeof(Header) == 56);

Digest sha256(const void* data, size_t bytes) {
  Digest d{};
  unsigned int len = 0;
  if (EVP_Digest(data, bytes, d.data(), &len, EVP_sha256(), nullptr) != 1 || len != d.size())
    throw Error(ErrorCategory::kSystem, "SHA-256 failed (OpenSSL)", {.op = "checkpoint digest"});
  return d;
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void write_all(int fd, const void* data, size_t bytes, const std::string& what) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw system_error("checkpoint: writing " + what, errno, {.op = "checkpoint write"});
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

// Reads up to `bytes`; returns how many there were (fewer only at the end of the file).
size_t read_all(int fd, void* data, size_t bytes, const std::string& path) {
  auto* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::read(fd, p + got, bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw system_error("checkpoint: reading " + path, errno, {.op = "checkpoint read"});
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

Error corrupt(const std::string& path, const std::string& what) {
  return Error(ErrorCategory::kSystem, "checkpoint: " + path + " " + what, {.op = "checkpoint read"});
}

}  // namespace

void write_file(const std::string& path, const void* data, size_t bytes) {
  if (!data && bytes > 0) throw invalid_usage("checkpoint: null payload for " + path, {.op = "checkpoint write"});
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.bytes = bytes;
  const Digest d = sha256(data, bytes);
  std::memcpy(h.digest, d.data(), d.size());

  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw system_error("checkpoint: creating " + tmp, errno, {.op = "checkpoint write"});
  try {
    write_all(fd.get(), &h, sizeof h, tmp);
    write_all(fd.get(), data, bytes, tmp);
    // The data must be on disk before the rename makes it the checkpoint.
    if (::fsync(fd.get()) != 0) throw system_error("checkpoint: fsync of " + tmp, errno, {.op = "checkpoint write"});
    if (::close(fd.release()) != 0) throw system_error("checkpoint: closing " + tmp, errno, {.op = "checkpoint write"});
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw system_error("checkpoint: renaming " + tmp + " to " + path, errno, {.op = "checkpoint write"});
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename itself is durable once the directory is.
  const std::string dir = directory_of(path);
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() < 0 || ::fsync(dfd.get()) != 0)
    throw system_error("checkpoint: fsync of directory " + dir, errno, {.op = "checkpoint write"});
}

std::vector<std::byte> read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw system_error("checkpoint: opening " + path, errno, {.op = "checkpoint read"});
  Header h{};
  if (read_all(fd.get(), &h, sizeof h, path) != sizeof h) throw corrupt(path, "is shorter than a checkpoint header");
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) throw corrupt(path, "is not a plait checkpoint");
  if (h.version != kVersion)
    throw corrupt(path, "has format version " + std::to_string(h.version) + ", this plait reads " +
                            std::to_string(kVersion));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw system_error("checkpoint: stat of " + path, errno, {.op = "checkpoint read"});
  // Checked before the subtraction, which would wrap: a FIFO or device has no size (0), a file
  // truncated since its header was read a smaller one, and a header naming the wrapped value
  // would have it allocated.
  if (static_cast<uint64_t>(st.st_size) < sizeof h)
    throw corrupt(path, "has no size to check its header against (not a regular file, or "
                        "truncated while being read)");
  const uint64_t have = static_cast<uint64_t>(st.st_size) - sizeof h;
  if (have != h.bytes)
    throw corrupt(path, "holds " + std::to_string(have) + " payload bytes, its header says " + std::to_string(h.bytes) +
                            " (a partial write)");
  std::vector<std::byte> payload(h.bytes);
  if (read_all(fd.get(), payload.data(), payload.size(), path) != payload.size())
    throw corrupt(path, "ended before its " + std::to_string(h.bytes) + " payload bytes");
  const Digest d = sha256(payload.data(), payload.size());
  if (std::memcmp(d.data(), h.digest, d.size()) != 0) throw corrupt(path, "fails its SHA-256 check (corrupt)");
  return payload;
}

bool verify_file(const std::string& path, std::string* why) {
  try {
    (void)read_file(path);
    return true;
  } catch (const Error& e) {
    if (why) *why = e.message();
    return false;
  }
}

}  // namespace plait::checkpoint
