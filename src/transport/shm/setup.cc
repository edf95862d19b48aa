#include "transport/shm/setup.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/log.h"
#include "core/process.h"
#include "core/random.h"
#include "plait/error.h"
#include "transport/shm/cma.h"
#include "transport/shm/peer_header.h"
#include "transport/shm/shm_settings.h"

namespace plait::transport::shm {
namespace {

std::string segment_key(const std::string& name, int rank) {
  return name + "/shm/segment/" + std::to_string(rank);
}
std::string ready_key(const std::string& name, int rank) {
  return name + "/shm/ready/" + std::to_string(rank);
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

std::string os_error(int err) {
  char buf[256];
  return strerror_r(err, buf, sizeof buf);
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

bool pidfd_exited(const net::Fd& fd) {
  if (!fd.valid()) return false;
  pollfd p{fd.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

// Waits a little for `key` (returns either way), so that the caller can rescan.
void wait_a_little(Store& store, const std::string& key, const Deadline& deadline) {
  auto slice = std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(20),
                                                   deadline.remaining());
  try {
    store.wait({key}, std::chrono::duration_cast<std::chrono::milliseconds>(slice));
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::kTimeout) throw;
  }
}

void init_header(const SharedMemory& own, const FabricOptions& o, const Geometry& g,
                 const std::vector<int>& peer_ranks, const uint64_t* probe_word) {
  SegmentView v(own.base(), g);
  SegmentHeader& h = v.header();
  // The pid first: it is what tells a stale segment (dead creator) from one being set up.
  __atomic_store_n(&h.pid, static_cast<int32_t>(::getpid()), __ATOMIC_RELEASE);
  write_layout(h, o.rank, o.size, g);
  h.probe_addr = reinterpret_cast<uintptr_t>(probe_word);
  h.probe_value = *probe_word;
  auto tag = segment_tag(o.job_token, o.name, o.rank, own.name());
  std::memcpy(h.tag, tag.data(), tag.size());
  for (uint32_t i = 0; i < g.peer_count; ++i) v.peer_ranks()[i] = peer_ranks[i];
  h.magic.store(kSegmentMagic, std::memory_order_release);
}

// Checks that a peer's segment is one of this job's, set up for us (peer_header.h). Fills the
// link's geometry and our index.
void verify_peer(PeerLink& p, const FabricOptions& o, int peer) {
  const SharedMemory& seg = p.segment;
  const std::string who = "rank " + std::to_string(peer) + "'s shm segment " + seg.name();
  const CheckedPeer c = check_peer_segment(seg.base(), seg.bytes(),
                                           segment_tag(o.job_token, o.name, peer, seg.name()),
                                           peer, o.size, o.rank, who);
  p.geometry = c.geometry;
  p.my_index = c.my_index;
}

// Whether the peer serves exactly our group: its peers plus itself are our peers plus us.
bool same_group(const PeerLink& p, int rank, const std::vector<int>& peer_ranks) {
  if (p.geometry.peer_count != peer_ranks.size()) return false;
  const int32_t* listed = p.view().peer_ranks();
  std::vector<int> ours(peer_ranks), theirs(listed, listed + p.geometry.peer_count);
  ours.push_back(rank);
  theirs.push_back(p.rank);
  std::sort(ours.begin(), ours.end());
  std::sort(theirs.begin(), theirs.end());
  return ours == theirs;
}

// The pair's CMA decision, from both sides' probe results.
bool decide_cma(const FabricOptions& o, const Attachment& a, size_t i, int our_error) {
  const PeerLink& p = a.peers[i];
  const uint32_t ours = a.own_view().cma_state(static_cast<uint32_t>(i)).load();
  const uint32_t theirs = p.view().cma_state(p.my_index).load();
  const bool works = ours == kCmaWorks && theirs == kCmaWorks;
  if (works || o.config.get<ShmSettings>().cma != "on") {
    if (!works && ours != kCmaDisabled)
      log(LogLevel::kInfo, "rank ", o.rank, ": shm: no cross-memory attach with rank ", p.rank,
          " (", ours == kCmaFails ? "process_vm_readv: " + os_error(our_error)
                                  : "the peer's probe failed or it is disabled there",
          "); copying through shared memory instead");
    return works;
  }
  const ErrorContext ctx{.rank = o.rank, .peer = p.rank, .op = "shm setup"};
  if (theirs == kCmaDisabled)
    throw invalid_usage("PLAIT_SHM_CMA=on here, but rank " + std::to_string(p.rank) +
                        " has it off", ctx);
  std::string why = ours == kCmaFails
                        ? "process_vm_readv from rank " + std::to_string(p.rank) + " (pid " +
                              std::to_string(p.pid) + ") failed: " + os_error(our_error)
                        : "rank " + std::to_string(p.rank) + " cannot read this process";
  throw Error(ErrorCategory::kSystem,
              "PLAIT_SHM_CMA=on, but cross-memory attach does not work: " + why +
                  " (needs the same user and ptrace permission: Yama ptrace_scope <= 1, "
                  "or a seccomp profile that allows process_vm_readv; or set PLAIT_SHM_CMA=auto)",
              ctx);
}

}  // namespace

bool peer_exited(const PeerLink& peer) {
  return peer.pidfd.valid() ? pidfd_exited(peer.pidfd) : process_gone(peer.pid);
}

Attachment attach(const FabricOptions& o, const std::vector<int>& peer_ranks,
                  const Geometry& geometry) {
  const ErrorContext ctx{.rank = o.rank, .op = "shm fabric '" + o.name + "' setup"};
  const Deadline deadline = Deadline::after(o.config.connect_timeout);
  sweep_stale_shared_memory({kSegmentMagic});
  // Peers probe us before the barrier: the permission must be there by then.
  Attachment a;
  if (o.config.get<ShmSettings>().cma != "off") a.cma_permission = allow_cma_from_any_process();

  // Stays alive (and unchanged) until every peer is past the barrier, i.e. done probing.
  const uint64_t probe_word = random_u64() | 1;
  a.own = SharedMemory::create(segment_name(o.job_token, o.name, o.rank), geometry.total_bytes);
  a.own_geometry = geometry;
  a.peers.resize(peer_ranks.size());
  try {
    init_header(a.own, o, geometry, peer_ranks, &probe_word);
    o.store->set(segment_key(o.name, o.rank), a.own.name());

    // Map each peer as soon as its segment is published, so that one missing rank does not
    // keep the others from meeting (and the error names only the missing one).
    std::vector<size_t> missing(peer_ranks.size());
    for (size_t i = 0; i < missing.size(); ++i) missing[i] = i;
    while (!missing.empty()) {
      bool progressed = false;
      for (auto it = missing.begin(); it != missing.end();) {
        const int peer = peer_ranks[*it];
        const std::string key = segment_key(o.name, peer);
        if (!o.store->check(key)) {
          ++it;
          continue;
        }
        PeerLink& p = a.peers[*it];
        p.rank = peer;
        try {
          const std::string name = o.store->get_string(key, std::chrono::milliseconds(0));
          p.segment = SharedMemory::open(name, sizeof(SegmentHeader));
          if (!p.segment.base())
            throw remote_error("rank " + std::to_string(peer) + "'s shm segment " + name +
                               " is gone: its setup failed or it exited (see its error)");
          verify_peer(p, o, peer);
          p.pid = __atomic_load_n(&p.view().header().pid, __ATOMIC_RELAXED);
          // Without pidfd_open (old kernels, valgrind) liveness falls back to kill(pid, 0).
          p.pidfd = net::Fd(pidfd_open(p.pid));
          if (peer_exited(p))
            throw remote_error("rank " + std::to_string(peer) + " (pid " +
                               std::to_string(p.pid) + ") exited during setup");
        } catch (const Error& e) {
          throw e.with_context({.peer = peer});
        }
        it = missing.erase(it);
        progressed = true;
      }
      if (missing.empty() || deadline.expired()) break;
      if (!progressed) wait_a_little(*o.store, segment_key(o.name, peer_ranks[missing.front()]),
                                     deadline);
    }
    if (!missing.empty()) {
      std::vector<int> ranks;
      for (size_t i : missing) ranks.push_back(peer_ranks[i]);
      throw timeout_error("timed out after " + std::to_string(o.config.connect_timeout.count()) +
                          " ms: rank(s) " + rank_list(ranks) +
                          " never published a shm segment", ctx);
    }

    // Probe cross-memory attach: read each peer's probe word. Results go in our header for
    // the peer to see after the barrier (the pair uses CMA only if both directions work).
    std::vector<int> probe_errors(a.peers.size(), 0);
    for (size_t i = 0; i < a.peers.size(); ++i) {
      PeerLink& p = a.peers[i];
      uint32_t state = kCmaDisabled;
      if (o.config.get<ShmSettings>().cma != "off") {
        // The peer's own words: at worst a wrong value makes its probe fail.
        const SegmentHeader& h = p.view().header();
        probe_errors[i] = cma_probe(p.pid, h.probe_addr, h.probe_value);
        state = probe_errors[i] == 0 ? kCmaWorks : kCmaFails;
      }
      a.own_view().cma_state(static_cast<uint32_t>(i)).store(state, std::memory_order_release);
    }

    // The barrier: a peer says "ready" once it has mapped every segment it needs (ours too)
    // and published its probe results.
    o.store->set(ready_key(o.name, o.rank), "1");
    std::vector<size_t> waiting(a.peers.size());
    for (size_t i = 0; i < waiting.size(); ++i) waiting[i] = i;
    while (!waiting.empty()) {
      for (auto it = waiting.begin(); it != waiting.end();) {
        const PeerLink& p = a.peers[*it];
        if (o.store->check(ready_key(o.name, p.rank))) {
          it = waiting.erase(it);
          continue;
        }
        if (peer_exited(p))
          throw remote_error("rank " + std::to_string(p.rank) + " (pid " +
                             std::to_string(p.pid) + ") exited during setup",
                             {.rank = o.rank, .peer = p.rank, .op = ctx.op});
        ++it;
      }
      if (waiting.empty() || deadline.expired()) break;
      wait_a_little(*o.store, ready_key(o.name, a.peers[waiting.front()].rank), deadline);
    }
    if (!waiting.empty()) {
      std::vector<int> ranks;
      for (size_t i : waiting) ranks.push_back(a.peers[i].rank);
      throw timeout_error("timed out after " + std::to_string(o.config.connect_timeout.count()) +
                          " ms: rank(s) " + rank_list(ranks) +
                          " mapped no shm segments (never finished setup)", ctx);
    }
    // Every peer has mapped our segment: the name is no longer needed. Where a peer serves
    // the same group of ranks as we do (the ranks of a host: the usual case), every rank
    // that needs its segment is past the barrier too, so we unlink that one as well: then a
    // rank that crashes right after the barrier, before unlinking its own, leaves nothing.
    a.own.unlink();
    for (const PeerLink& p : a.peers)
      if (same_group(p, o.rank, peer_ranks)) ::shm_unlink(p.segment.name().c_str());

    bool any_cma = false;
    for (size_t i = 0; i < a.peers.size(); ++i)
      any_cma |= a.peers[i].cma = decide_cma(o, a, i, probe_errors[i]);
    if (!any_cma) a.cma_permission.reset();
  } catch (const Error& e) {
    a.own.unlink();
    // A peer that died during setup cannot remove its segment; we know its name.
    for (PeerLink& p : a.peers)
      if (p.segment.base() && (pidfd_exited(p.pidfd) || process_gone(p.pid)))
        ::shm_unlink(p.segment.name().c_str());
    throw e.with_context(ctx);
  }
  return a;
}

}  // namespace plait::transport::shm
