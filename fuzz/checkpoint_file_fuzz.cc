// The checkpoint file reader (plait/checkpoint.h, core/checkpoint_file.cc): the input is the
// file, read back through a memfd so no disk is involved, or through a FIFO (a path such as
// /dev/stdin may be one: it has no size to check the header against). The first byte holds
// the flags, the rest is the file:
//
//   bit 0   fill in the length and SHA-256 the header should carry (a digest that matches by
//           chance would keep the fuzzer out of the success path)
//   bit 1   a FIFO, not a file
//
// Beyond "no crash": what read_file() accepts is the bytes after the header (from a file:
// all of them).
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fuzz_support.h"
#include "plait/checkpoint.h"
#include "plait/error.h"

namespace {

constexpr size_t kHeaderBytes = 56;  // magic 8, version 4, reserved 4, bytes 8, sha256 32
constexpr size_t kBytesAt = 16;
constexpr size_t kDigestAt = 24;

std::string g_fifo;  // one per process, removed at exit

void remove_fifo() {
  ::unlink(g_fifo.c_str());
  ::rmdir(g_fifo.substr(0, g_fifo.rfind('/')).c_str());
}

void fix_length_and_digest(std::vector<uint8_t>& file) {
  if (file.size() < kHeaderBytes) return;
  const uint64_t bytes = file.size() - kHeaderBytes;
  std::memcpy(file.data() + kBytesAt, &bytes, sizeof bytes);
  unsigned int len = 0;
  EVP_Digest(file.data() + kHeaderBytes, bytes, file.data() + kDigestAt, &len, EVP_sha256(),
             nullptr);
}

// Reads the file through the FIFO: the writer opens it once read_file() has (a reader must be
// there first), writes the file and closes, so the reader gets the bytes, then EOF. A reader
// that stops early makes the write fail with EPIPE (SIGPIPE is ignored), which is fine.
std::vector<std::byte> read_through_fifo(const std::vector<uint8_t>& file) {
  std::atomic<bool> done{false};
  std::thread writer([&] {
    plait::net::Fd fd;
    // Non-blocking, so that a reader that never comes does not hold this thread.
    while (!fd.valid() && !done.load()) {
      fd = plait::net::Fd(::open(g_fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
      if (!fd.valid()) std::this_thread::yield();
    }
    if (!fd.valid()) return;
    ::fcntl(fd.get(), F_SETFL, 0);
    for (size_t off = 0; off < file.size();) {
      const ssize_t n = ::write(fd.get(), file.data() + off, file.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  });
  struct Join {
    std::thread& t;
    std::atomic<bool>& done;
    ~Join() {
      done = true;
      t.join();
    }
  } join{writer, done};
  return plait::checkpoint::read_file(g_fifo);
}

std::vector<std::byte> read_through_memfd(const std::vector<uint8_t>& file) {
  const plait::net::Fd fd(::memfd_create("plait-fuzz-checkpoint", MFD_CLOEXEC));
  PLAIT_FUZZ_CHECK(fd.valid());
  PLAIT_FUZZ_CHECK(::write(fd.get(), file.data(), file.size()) ==
                   static_cast<ssize_t>(file.size()));
  return plait::checkpoint::read_file("/proc/self/fd/" + std::to_string(fd.get()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::signal(SIGPIPE, SIG_IGN);
  char dir[] = "/tmp/plait-fuzz-XXXXXX";
  PLAIT_FUZZ_CHECK(::mkdtemp(dir) != nullptr);
  g_fifo = std::string(dir) + "/checkpoint";
  PLAIT_FUZZ_CHECK(::mkfifo(g_fifo.c_str(), 0600) == 0);
  std::atexit(remove_fifo);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::vector<uint8_t> file(data + 1, data + size);
  if (data[0] & 1) fix_length_and_digest(file);
  const bool fifo = data[0] & 2;
  try {
    const std::vector<std::byte> payload =
        fifo ? read_through_fifo(file) : read_through_memfd(file);
    PLAIT_FUZZ_CHECK(payload.size() + kHeaderBytes <= file.size());
    if (!fifo) PLAIT_FUZZ_CHECK(payload.size() + kHeaderBytes == file.size());
    PLAIT_FUZZ_CHECK(payload.empty() ||
                     std::memcmp(payload.data(), file.data() + kHeaderBytes, payload.size()) == 0);
  } catch (const plait::Error& e) {
    PLAIT_FUZZ_CHECK(e.category() == plait::ErrorCategory::kSystem);
  }
  return 0;
}
