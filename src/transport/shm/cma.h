// Cross-memory attach (CMA): process_vm_readv / process_vm_writev copy between our memory
// and another process's private memory in one pass, without the other process's CPU. The
// kernel allows it like ptrace attach: same user, and under Yama ptrace_scope=1 only if the
// target said so (allow_cma_from_any_process()). Docker's default seccomp profile blocks it;
// setup probes it per pair and falls back to copying through the rings (PLAIT_SHM_CMA).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace plait::transport::shm {

// PR_SET_PTRACER_ANY: lets peers of the job CMA into this process under Yama ptrace_scope=1
// (and, like any ptracer permission, lets any process of this user attach to it). Held only
// while some fabric of this process may use CMA: the setting is the process's, so the last
// handle gone resets it. Harmless without Yama (the call then fails and is ignored).
using CmaPermission = std::shared_ptr<void>;
CmaPermission allow_cma_from_any_process();
// Whether some handle from allow_cma_from_any_process() is alive (the permission is held).
bool cma_permission_granted();

// Copies `len` bytes between `local` and address `remote` of process `pid`. Returns 0, or
// the errno: ESRCH (the process is gone), EFAULT (the remote range is not mapped), EPERM.
int cma_read(pid_t pid, void* local, uint64_t remote, size_t len);
int cma_write(pid_t pid, const void* local, uint64_t remote, size_t len);
// The same, gathered from `count` local pieces (at most kCmaMaxPieces) of `len` bytes in all.
constexpr size_t kCmaMaxPieces = 1024;  // the kernel's UIO_MAXIOV
int cma_write_gathered(pid_t pid, const iovec* local, size_t count, uint64_t remote, size_t len);

// Whether we can read the 8-byte word at `addr` in `pid` and it holds `expected`: returns 0,
// the errno of the failed read, or EIO for a wrong value.
int cma_probe(pid_t pid, uint64_t addr, uint64_t expected);

}  // namespace plait::transport::shm
