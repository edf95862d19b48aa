// Setting a UCX fabric up and down: the context (features: active messages, RMA, 64-bit
// atomics, wake-up), one worker, its address published in the store, an endpoint to each
// peer from the peer's address (error handling mode peer: a dead peer is an error on its
// endpoint, not a hang), then a hello each way so that creation returns only once every
// peer is reachable, or fails naming the ranks that are not.
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ucs/debug/log_def.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "core/clock.h"
#include "core/log.h"
#include "core/rank_list.h"
#include "transport/host_identity.h"
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_fabric.h"
#include "transport/ucx/ucx_info.h"
#include "transport/ucx/ucx_settings.h"

namespace plait::transport::ucx {
namespace {

std::string address_key(const std::string& name, int rank) {
  return name + "/ucx/address/" + std::to_string(rank);
}

// "<host identity>\n<pid>": lets a peer on this host watch our process (see Peer::pidfd).
std::string process_key(const std::string& name, int rank) {
  return name + "/ucx/process/" + std::to_string(rank);
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// Set while this thread asks UCX for an endpoint that may be refused for want of error
// handling: UCX logs that refusal as an error, and we handle it (a watched process instead).
thread_local bool t_probing_endpoint = false;

ucs_log_func_rc_t quiet_probe(const char*, unsigned, const char*, ucs_log_level_t,
                              const ucs_log_component_config_t*, const char* message, va_list) {
  // The format, not the formatted text: "no %s transport to %s: %s".
  if (t_probing_endpoint && std::strstr(message, " transport to ")) return UCS_LOG_FUNC_RC_STOP;
  return UCS_LOG_FUNC_RC_CONTINUE;
}

void install_log_filter() {
  static std::once_flag once;
  std::call_once(once, [] { ucx().ucs_log_push_handler(&quiet_probe); });
}

std::string status_text(ucs_status_t s) { return ucx().ucs_status_string(s); }

[[noreturn]] void fail_setup(const char* call, ucs_status_t s) {
  throw Error(ErrorCategory::kSystem, std::string(call) + " failed: " + status_text(s),
              {.op = "ucx fabric setup"});
}

// The transports of an endpoint's lanes, as ucx().ucp_ep_print_info() names them
// ("lane[0]:  2:tcp/lo.0 md[1] ..."): the part before the '/' of each lane's resource.
std::set<std::string> endpoint_transports(ucp_ep_h ep) {
  std::set<std::string> out;
  char* text = nullptr;
  size_t bytes = 0;
  FILE* f = ::open_memstream(&text, &bytes);
  if (!f) return out;
  ucx().ucp_ep_print_info(ep, f);
  ::fclose(f);
  std::string s(text, bytes);
  ::free(text);
  for (size_t at = s.find("lane["); at != std::string::npos; at = s.find("lane[", at + 1)) {
    size_t colon = s.find(':', s.find(']', at));
    if (colon == std::string::npos) break;
    size_t start = s.find(':', colon + 1);  // after the resource index
    size_t slash = s.find('/', colon);
    if (start == std::string::npos || slash == std::string::npos || start > slash) continue;
    out.insert(s.substr(start + 1, slash - start - 1));
  }
  return out;
}

}  // namespace

void Worker::reset() {
  if (worker) ucx().ucp_worker_destroy(worker);
  if (context) ucx().ucp_cleanup(context);
  worker = nullptr;
  context = nullptr;
}

void UcxFabric::set_handler(AmId id, ucp_am_recv_callback_t cb) {
  ucp_am_handler_param_t p{};
  p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                 UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  p.id = id;
  p.cb = cb;
  p.arg = this;
  p.flags = UCP_AM_FLAG_WHOLE_MSG;
  if (ucs_status_t s = ucx().ucp_worker_set_am_recv_handler(w_.worker, &p); s != UCS_OK)
    fail_setup("ucp_worker_set_am_recv_handler", s);
}

void UcxFabric::setup_worker(const FabricOptions& o) {
  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucx().ucp_config_read(nullptr, nullptr, &config); s != UCS_OK)
    fail_setup("ucp_config_read", s);
  // PLAIT_UCX_TLS wins over UCX_TLS (which ucp_config_read took from the environment).
  if (!o.config.get<UcxSettings>().tls.empty()) {
    if (ucs_status_t s = ucx().ucp_config_modify(config, "TLS", o.config.get<UcxSettings>().tls.c_str()); s != UCS_OK) {
      ucx().ucp_config_release(config);
      throw invalid_usage("PLAIT_UCX_TLS=" + o.config.get<UcxSettings>().tls + " is not a transport list UCX "
                              "accepts: " + status_text(s),
                          {.rank = rank_, .op = "ucx fabric setup"});
    }
  }
  // Without an RDMA NIC, UCX's rendezvous "rails" are tcp sockets over several interfaces
  // (lo and eth0 to a peer on this host): a write's flush then waits on each, and a write
  // ping-pong over UCX's tcp took 48 us with two rails against 23 with one. A NIC's rails
  // stay as UCX sets them, as does a UCX_MAX_RNDV_RAILS of the user's.
  if (!std::getenv("UCX_MAX_RNDV_RAILS") && !ucx_sees_rdma(o.config))
    ucx().ucp_config_modify(config, "MAX_RNDV_RAILS", "1");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.estimated_num_eps = static_cast<size_t>(std::max(1, size_ - 1));
  params.name = "plait";
  ucs_status_t s = ucx().init(&params, config, &w_.context);
  ucx().ucp_config_release(config);
  if (s != UCS_OK) fail_setup("ucp_init", s);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // worker_mu_ serializes our threads
  if ((s = ucx().ucp_worker_create(w_.context, &wp, &w_.worker)) != UCS_OK)
    fail_setup("ucp_worker_create", s);
  if ((s = ucx().ucp_worker_get_efd(w_.worker, &w_.efd)) != UCS_OK) fail_setup("ucp_worker_get_efd", s);
  set_handler(kAmHello, [](void* arg, const void* header, size_t header_bytes, void*, size_t,
                           const ucp_am_recv_param_t*) -> ucs_status_t {
    auto& f = *static_cast<UcxFabric*>(arg);
    HelloHeader h;
    if (!read_header(header, header_bytes, &h)) return UCS_OK;
    if (!hello_matches(h, f.size_)) {
      log(LogLevel::kWarn, "rank ", f.rank_, ": ucx fabric '", f.name_,
          "': dropped a hello that is not from this job's plait (version ", h.version,
          ", size ", h.size, ")");
      return UCS_OK;
    }
    if (f.checked_source(h.source, "hello") >= 0) f.hello_from_[h.source] = true;
    return UCS_OK;
  });
  set_handler(kAmMessage, &UcxFabric::on_message);
  set_handler(kAmImm, &UcxFabric::on_imm);
  set_handler(kAmImmDone, &UcxFabric::on_imm_done);
  set_handler(kAmKeyRequest, &UcxFabric::on_key_request);
  set_handler(kAmKeyReply, &UcxFabric::on_key_reply);
  set_handler(kAmKeyRevoke, &UcxFabric::on_key_revoke);
  set_handler(kAmKeyRevoked, &UcxFabric::on_key_revoked);
  set_handler(kAmGoodbye, &UcxFabric::on_goodbye);

  ucp_address_t* address = nullptr;
  size_t address_bytes = 0;
  if ((s = ucx().ucp_worker_get_address(w_.worker, &address, &address_bytes)) != UCS_OK)
    fail_setup("ucp_worker_get_address", s);
  const auto* first = reinterpret_cast<const uint8_t*>(address);
  // The process first: whoever sees our address finds it.
  o.store->set(process_key(o.name, rank_),
               host_identity(o.config) + "\n" + std::to_string(::getpid()));
  o.store->set(address_key(o.name, rank_), Bytes(first, first + address_bytes));
  ucx().ucp_worker_release_address(w_.worker, address);
}

// An endpoint to a peer on another host is in error handling mode peer: UCX detects a dead
// or silent peer (keep-alives). One to a peer on this host is in mode none, with the peer's
// process watched instead (a pidfd): UCX 1.13's shared-memory transports cannot run in mode
// peer, and in mode peer UCX leaves out the zero-copy rendezvous lanes of its tcp transport
// (rendezvous data then goes in 64 KiB active messages: one 4 MiB message over loopback 3.0
// to 3.3 GB/s against 4.1 to 4.4 in mode none, as Open MPI's pml ucx runs by default).
void UcxFabric::create_endpoint(const FabricOptions& o, int peer, const Bytes& address) {
  const std::string process =
      o.store->get_string(process_key(o.name, peer), std::chrono::milliseconds(0));
  const size_t cut = process.rfind('\n');
  const bool same_host =
      cut != std::string::npos && process.substr(0, cut) == host_identity(o.config);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ep.err_mode = same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxFabric::on_endpoint_error;
  ep.err_handler.arg = this;
  install_log_filter();
  t_probing_endpoint = true;
  ucs_status_t s = ucx().ucp_ep_create(w_.worker, &ep, &w_.eps[peer]);
  t_probing_endpoint = false;
  if (s == UCS_OK && same_host) {
    Peer& p = *peers_[peer];
    p.pid = std::stoi(process.substr(cut + 1));
    if (p.pid != ::getpid()) {
      p.pidfd = net::Fd(pidfd_open(p.pid));
      if (!p.pidfd.valid())
        log(LogLevel::kWarn, "rank ", rank_, ": ucx fabric '", name_, "': cannot watch rank ",
            peer, " (pid ", p.pid, "): ", std::strerror(errno),
            "; its death would only show as a timeout");
    }
  }
  if (s != UCS_OK)
    throw Error(ErrorCategory::kRemote,
                "ucp_ep_create to rank " + std::to_string(peer) + " failed: " + status_text(s) +
                    (s == UCS_ERR_UNREACHABLE ? " (no UCX transport reaches it; PLAIT_UCX_TLS=" +
                                                    o.config.get<UcxSettings>().tls + ")"
                                              : ""),
                {.rank = rank_, .peer = peer, .op = "ucx fabric setup"});
}

void UcxFabric::exchange_hellos(const FabricOptions& o) {
  const Deadline deadline = Deadline::after(o.config.connect_timeout);
  w_.eps.assign(size_, nullptr);
  hello_from_.assign(size_, false);
  std::vector<int> unpublished;
  for (int p = 0; p < size_; ++p)
    if (peers_[p]) unpublished.push_back(p);

  // An endpoint to each peer as soon as its address appears, and our hello on it.
  std::set<std::string> transports;
  while (!unpublished.empty() && !deadline.expired()) {
    bool any = false;
    for (auto it = unpublished.begin(); it != unpublished.end();) {
      const std::string key = address_key(o.name, *it);
      if (!o.store->check(key)) {
        ++it;
        continue;
      }
      const Bytes address = o.store->get(key, std::chrono::milliseconds(0));
      std::lock_guard lock(worker_mu_);
      create_endpoint(o, *it, address);
      HelloHeader hello;
      hello.source = rank_;
      hello.size = size_;
      InFlight in;
      in.header = bytes_of(hello);
      send_tracked(*it, kAmHello, std::move(in), nullptr, 0, nullptr);
      it = unpublished.erase(it);
      any = true;
    }
    if (unpublished.empty()) break;
    {
      std::lock_guard lock(worker_mu_);
      drain_locked();
    }
    if (!any) {
      try {
        o.store->wait({address_key(o.name, unpublished.front())}, std::chrono::milliseconds(20));
      } catch (const Error& e) {
        if (e.category() != ErrorCategory::kTimeout) throw;
      }
    }
  }

  // Every peer's hello, progressing meanwhile.
  std::vector<int> silent;
  for (;;) {
    silent.clear();
    {
      std::lock_guard lock(worker_mu_);
      drain_locked();
      for (int p = 0; p < size_; ++p)
        if (peers_[p] && !hello_from_[p] && w_.eps[p]) silent.push_back(p);
    }
    std::vector<int> failed;
    for (int p = 0; p < size_; ++p)
      if (peers_[p] && peers_[p]->failed.load()) failed.push_back(p);
    // A peer that failed is fatal once nothing else is awaited; before, it may have given up
    // for the same reason we will (a rank that never came), which the timeout names.
    const bool waiting = !unpublished.empty() || silent.size() > failed.size();
    if (!failed.empty() && !waiting)
      throw Error(ErrorCategory::kRemote,
                  "rank " + std::to_string(failed.front()) + " could not be reached over UCX: " +
                      peers_[failed.front()]->reason(),
                  {.rank = rank_, .peer = failed.front(), .op = "ucx fabric setup"});
    if ((silent.empty() && unpublished.empty()) || deadline.expired()) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!unpublished.empty() || !silent.empty()) {
    std::string what = "timed out after " + std::to_string(o.config.connect_timeout.count()) +
                       " ms:";
    if (!unpublished.empty())
      what += " rank(s) " + rank_list(unpublished) + " never published a UCX address;";
    std::vector<int> quiet;
    for (int p : silent)
      if (!peers_[p]->failed.load()) quiet.push_back(p);
    if (!quiet.empty()) what += " no hello came from rank(s) " + rank_list(quiet) + ";";
    for (int p : silent)
      if (peers_[p]->failed.load()) what.append(" ").append(peers_[p]->reason()).append(";");
    what.pop_back();
    throw timeout_error(what, {.rank = rank_, .op = "ucx fabric setup"});
  }

  std::lock_guard lock(worker_mu_);
  for (int p = 0; p < size_; ++p)
    if (w_.eps[p])
      for (const std::string& t : endpoint_transports(w_.eps[p])) transports.insert(t);
  for (const std::string& t : transports) w_.transports += (w_.transports.empty() ? "" : ",") + t;
}

// Orderly where it can be: a peer that is healthy and has nothing of ours in flight gets a
// goodbye and its endpoint is flushed and closed; any other endpoint (a failed peer, or one
// holding transfers that never finished: a silent host, abandoned operations) is closed by
// force, which ends its requests. UCX asserts if its worker is destroyed with requests still
// on an endpoint; returns false when that could happen (a close that did not finish within
// its bound), and the caller then leaves the worker to the process's exit.
bool UcxFabric::close_endpoints() {
  std::unique_lock lock(worker_mu_);
  // What is about to finish (a last answer to a peer, a flush) is let finish: a peer with a
  // request in flight is closed by force, without a goodbye, and would report us failed.
  auto busy_with_live_peer = [&] {
    for (const auto& [request, in] : in_flight_) {
      const int p = in.op ? in.op->peer.load() : in.peer;
      if (p >= 0 && p < size_ && w_.eps[p] && !peers_[p]->failed.load()) return true;
    }
    return false;
  };
  for (const Deadline settle = Deadline::after(std::chrono::milliseconds(200));
       busy_with_live_peer() && !settle.expired();) {
    if (drain_locked()) continue;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lock.lock();
  }
  std::vector<bool> stuck(size_, false);
  for (const auto& [request, in] : in_flight_) {
    const int p = in.op ? in.op->peer.load() : in.peer;
    if (p >= 0 && p < size_) stuck[p] = true;
  }
  std::vector<void*> closing;
  std::string farewell = first_loss();  // why we lost a peer, if we did: the goodbye says
  if (farewell.size() > kMaxDenialBytes) farewell.resize(kMaxDenialBytes);
  for (int p = 0; p < size_; ++p) {
    if (!w_.eps[p]) continue;
    const bool force = stuck[p] || peers_[p]->failed.load();
    if (!force) {
      const int32_t source = rank_;
      InFlight in;
      in.header = bytes_of(source);
      in.payload.assign(farewell.begin(), farewell.end());
      const void* data = in.payload.data();
      const size_t bytes = in.payload.size();
      send_tracked(p, kAmGoodbye, std::move(in), data, bytes, nullptr);
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t r = ucx().ucp_ep_close_nbx(w_.eps[p], &param);
    if (UCS_PTR_IS_PTR(r)) closing.push_back(r);
    w_.eps[p] = nullptr;
  }
  const Deadline deadline = Deadline::after(std::chrono::seconds(2));
  while (!closing.empty()) {
    drain_locked();
    for (auto it = closing.begin(); it != closing.end();) {
      if (ucx().ucp_request_check_status(*it) != UCS_INPROGRESS) {
        ucx().ucp_request_free(*it);
        it = closing.erase(it);
      } else {
        ++it;
      }
    }
    if (closing.empty() || deadline.expired()) break;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    lock.lock();
  }
  // Requests of abandoned ops (completions are no longer reported): cancelled.
  std::vector<void*> left;
  for (auto& [request, in] : in_flight_) left.push_back(request);
  for (void* r : left) ucx().ucp_request_cancel(w_.worker, r);
  drain_locked();
  if (closing.empty() && in_flight_.empty()) return true;
  log(LogLevel::kDebug, "rank ", rank_, ": ucx fabric '", name_, "': ", closing.size(),
      " endpoint(s) did not close within 2 s and ", in_flight_.size(),
      " transfer(s) are still in UCX; the worker is left to the process's exit");
  for (void* r : closing) ucx().ucp_request_free(r);
  return false;
}

}  // namespace plait::transport::ucx
