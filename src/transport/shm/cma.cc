#include "transport/shm/cma.h"

#include <sys/prctl.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <mutex>

namespace plait::transport::shm {
namespace {

// The syscalls may stop short (at an unmapped page, or a signal); go on from where they did.
template <typename Call>
int transfer(Call call, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = call(done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EFAULT;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// Process-wide, as the kernel setting is: every fabric of the process shares one grant.
std::mutex grant_mu;
std::weak_ptr<void> granted;  // guarded by grant_mu

}  // namespace

CmaPermission allow_cma_from_any_process() {
  std::lock_guard lock(grant_mu);
  if (CmaPermission held = granted.lock()) return held;
#ifdef PR_SET_PTRACER
  ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
  CmaPermission grant(nullptr, [](void*) {
    std::lock_guard lock(grant_mu);
    // A new grant made while this one was dying must not be withdrawn.
    if (!granted.expired()) return;
#ifdef PR_SET_PTRACER
    ::prctl(PR_SET_PTRACER, 0, 0, 0, 0);
#endif
  });
  granted = grant;
  return grant;
}

bool cma_permission_granted() {
  std::lock_guard lock(grant_mu);
  return !granted.expired();
}

int cma_read(pid_t pid, void* local, uint64_t remote, size_t len) {
  return transfer(
      [&](size_t done) {
        iovec l{static_cast<char*>(local) + done, len - done};
        iovec r{reinterpret_cast<void*>(remote + done), len - done};
        return ::process_vm_readv(pid, &l, 1, &r, 1, 0);
      },
      len);
}

int cma_write(pid_t pid, const void* local, uint64_t remote, size_t len) {
  return transfer(
      [&](size_t done) {
        iovec l{const_cast<char*>(static_cast<const char*>(local)) + done, len - done};
        iovec r{reinterpret_cast<void*>(remote + done), len - done};
        return ::process_vm_writev(pid, &l, 1, &r, 1, 0);
      },
      len);
}

int cma_write_gathered(pid_t pid, const iovec* local, size_t count, uint64_t remote, size_t len) {
  if (count > kCmaMaxPieces) return EINVAL;
  iovec pieces[kCmaMaxPieces];
  std::copy(local, local + count, pieces);
  size_t first = 0, skipped = 0;  // pieces[first] starts `skipped` bytes into the source
  return transfer(
      [&](size_t done) {
        // After a short copy, start where it stopped, perhaps inside a piece.
        for (size_t skip = done - skipped; skip > 0;) {
          const size_t n = std::min(skip, pieces[first].iov_len);
          pieces[first].iov_base = static_cast<char*>(pieces[first].iov_base) + n;
          pieces[first].iov_len -= n;
          skip -= n;
          if (pieces[first].iov_len == 0) ++first;
        }
        skipped = done;
        iovec r{reinterpret_cast<void*>(remote + done), len - done};
        return ::process_vm_writev(pid, pieces + first, count - first, &r, 1, 0);
      },
      len);
}

int cma_probe(pid_t pid, uint64_t addr, uint64_t expected) {
  uint64_t seen = 0;
  if (int err = cma_read(pid, &seen, addr, sizeof seen); err != 0) return err;
  return seen == expected ? 0 : EIO;
}

}  // namespace plait::transport::shm
