// UCX, loaded on first use (dlopen) rather than linked. Linking libucs runs its constructor
// in every process that loads plait, and that installs UCX's own SIGSEGV / SIGBUS / SIGILL /
// SIGFPE handlers (a UCX backtrace instead of the program's own crash handling): a PyTorch
// job on shm and tcp would carry them without ever using UCX. Loaded here, UCX comes into a
// process only with the ucx provider or `plait info`, its signal handlers are given back to
// the application (unless UCX_HANDLE_ERRORS is set), and a host without libucx0 runs every
// other provider and says why ucx is missing.
#pragma once

#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include <atomic>
#include <string>

namespace plait::transport::ucx {

// The UCX functions plait calls, under their own names (ucp_init is an inline wrapper of
// ucp_init_version in UCX's header: init() below stands for it).
struct UcxApi {
#define PLAIT_UCX_FN(name) decltype(&::name) name = nullptr
  PLAIT_UCX_FN(ucp_am_data_release);
  PLAIT_UCX_FN(ucp_am_recv_data_nbx);
  PLAIT_UCX_FN(ucp_am_send_nbx);
  PLAIT_UCX_FN(ucp_atomic_op_nbx);
  PLAIT_UCX_FN(ucp_cleanup);
  PLAIT_UCX_FN(ucp_config_modify);
  PLAIT_UCX_FN(ucp_config_read);
  PLAIT_UCX_FN(ucp_config_release);
  PLAIT_UCX_FN(ucp_context_print_info);
  PLAIT_UCX_FN(ucp_ep_close_nbx);
  PLAIT_UCX_FN(ucp_ep_create);
  PLAIT_UCX_FN(ucp_ep_flush_nbx);
  PLAIT_UCX_FN(ucp_ep_print_info);
  PLAIT_UCX_FN(ucp_ep_rkey_unpack);
  PLAIT_UCX_FN(ucp_get_nbx);
  PLAIT_UCX_FN(ucp_get_version_string);
  PLAIT_UCX_FN(ucp_init_version);
  PLAIT_UCX_FN(ucp_mem_map);
  PLAIT_UCX_FN(ucp_mem_query);
  PLAIT_UCX_FN(ucp_mem_unmap);
  PLAIT_UCX_FN(ucp_put_nbx);
  PLAIT_UCX_FN(ucp_request_cancel);
  PLAIT_UCX_FN(ucp_request_check_status);
  PLAIT_UCX_FN(ucp_request_free);
  PLAIT_UCX_FN(ucp_rkey_buffer_release);
  PLAIT_UCX_FN(ucp_rkey_destroy);
  PLAIT_UCX_FN(ucp_rkey_pack);
  PLAIT_UCX_FN(ucp_worker_arm);
  PLAIT_UCX_FN(ucp_worker_create);
  PLAIT_UCX_FN(ucp_worker_destroy);
  PLAIT_UCX_FN(ucp_worker_get_address);
  PLAIT_UCX_FN(ucp_worker_get_efd);
  PLAIT_UCX_FN(ucp_worker_progress);
  PLAIT_UCX_FN(ucp_worker_release_address);
  PLAIT_UCX_FN(ucp_worker_set_am_recv_handler);
  PLAIT_UCX_FN(ucs_log_push_handler);
  PLAIT_UCX_FN(ucs_status_string);
#undef PLAIT_UCX_FN

  ucs_status_t init(const ucp_params_t* params, const ucp_config_t* config,
                    ucp_context_h* context) const {
    return ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, params, config, context);
  }
};

// The API, loaded once per process; null when UCX's libraries cannot be loaded (then *why
// says what is missing, e.g. "libucp.so.0: cannot open shared object file ... (install
// libucx0)").
const UcxApi* load_ucx(std::string* why);

// The API once loaded (a pointer read: ucx() is on every message's path).
extern std::atomic<const UcxApi*> g_loaded_api;
const UcxApi& load_ucx_or_throw();

// The API; throws plait::Error(kSystem) naming what is missing when it cannot be loaded.
inline const UcxApi& ucx() {
  if (const UcxApi* api = g_loaded_api.load(std::memory_order_acquire)) return *api;
  return load_ucx_or_throw();
}

}  // namespace plait::transport::ucx
