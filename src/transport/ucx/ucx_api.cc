#include "transport/ucx/ucx_api.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>

#include <mutex>

#include "plait/error.h"

namespace plait::transport::ucx {
namespace {

struct Loaded {
  UcxApi api;
  std::string error;  // empty when api is complete
};

// dlsym into `fn`; false (and the error) when the symbol is missing.
template <typename Fn>
bool bind(void* library, const char* name, Fn* fn, std::string* error) {
  *fn = reinterpret_cast<Fn>(::dlsym(library, name));
  if (*fn == nullptr && error->empty()) *error = std::string("UCX lacks ") + name;
  return *fn != nullptr;
}

Loaded load() {
  Loaded out;
  // The libraries stay loaded for the life of the process (UCX keeps global state).
  void* ucs = ::dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
  void* ucp = ucs ? ::dlopen("libucp.so.0", RTLD_NOW | RTLD_GLOBAL) : nullptr;
  if (!ucp) {
    const char* why = ::dlerror();
    out.error = std::string(why ? why : "dlopen failed") +
                " (the ucx provider needs UCX: apt-get install libucx0)";
    return out;
  }
  UcxApi& a = out.api;
  std::string& e = out.error;
#define PLAIT_UCX_BIND(lib, name) bind(lib, #name, &a.name, &e)
  PLAIT_UCX_BIND(ucp, ucp_am_data_release);
  PLAIT_UCX_BIND(ucp, ucp_am_recv_data_nbx);
  PLAIT_UCX_BIND(ucp, ucp_am_send_nbx);
  PLAIT_UCX_BIND(ucp, ucp_atomic_op_nbx);
  PLAIT_UCX_BIND(ucp, ucp_cleanup);
  PLAIT_UCX_BIND(ucp, ucp_config_modify);
  PLAIT_UCX_BIND(ucp, ucp_config_read);
  PLAIT_UCX_BIND(ucp, ucp_config_release);
  PLAIT_UCX_BIND(ucp, ucp_context_print_info);
  PLAIT_UCX_BIND(ucp, ucp_ep_close_nbx);
  PLAIT_UCX_BIND(ucp, ucp_ep_create);
  PLAIT_UCX_BIND(ucp, ucp_ep_flush_nbx);
  PLAIT_UCX_BIND(ucp, ucp_ep_print_info);
  PLAIT_UCX_BIND(ucp, ucp_ep_rkey_unpack);
  PLAIT_UCX_BIND(ucp, ucp_get_nbx);
  PLAIT_UCX_BIND(ucp, ucp_get_version_string);
  PLAIT_UCX_BIND(ucp, ucp_init_version);
  PLAIT_UCX_BIND(ucp, ucp_mem_map);
  PLAIT_UCX_BIND(ucp, ucp_mem_query);
  PLAIT_UCX_BIND(ucp, ucp_mem_unmap);
  PLAIT_UCX_BIND(ucp, ucp_put_nbx);
  PLAIT_UCX_BIND(ucp, ucp_request_cancel);
  PLAIT_UCX_BIND(ucp, ucp_request_check_status);
  PLAIT_UCX_BIND(ucp, ucp_request_free);
  PLAIT_UCX_BIND(ucp, ucp_rkey_buffer_release);
  PLAIT_UCX_BIND(ucp, ucp_rkey_destroy);
  PLAIT_UCX_BIND(ucp, ucp_rkey_pack);
  PLAIT_UCX_BIND(ucp, ucp_worker_arm);
  PLAIT_UCX_BIND(ucp, ucp_worker_create);
  PLAIT_UCX_BIND(ucp, ucp_worker_destroy);
  PLAIT_UCX_BIND(ucp, ucp_worker_get_address);
  PLAIT_UCX_BIND(ucp, ucp_worker_get_efd);
  PLAIT_UCX_BIND(ucp, ucp_worker_progress);
  PLAIT_UCX_BIND(ucp, ucp_worker_release_address);
  PLAIT_UCX_BIND(ucp, ucp_worker_set_am_recv_handler);
  PLAIT_UCX_BIND(ucs, ucs_log_push_handler);
  PLAIT_UCX_BIND(ucs, ucs_status_string);
#undef PLAIT_UCX_BIND
  // libucs's constructor took over SIGSEGV, SIGBUS, SIGILL and SIGFPE (UCX_HANDLE_ERRORS,
  // default "bt"). They are the application's: give them back, unless the user asked UCX for
  // its handling. (Under AddressSanitizer, UCX's SIGSEGV handler also broke LeakSanitizer.)
  if (std::getenv("UCX_HANDLE_ERRORS") == nullptr) {
    using Disable = void (*)(int);
    if (auto disable = reinterpret_cast<Disable>(::dlsym(ucs, "ucs_debug_disable_signal")))
      for (int signum : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) disable(signum);
  }
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

}  // namespace

const UcxApi* load_ucx(std::string* why) {
  const Loaded& l = loaded();
  if (!l.error.empty()) {
    if (why) *why = l.error;
    return nullptr;
  }
  return &l.api;
}

std::atomic<const UcxApi*> g_loaded_api{nullptr};

const UcxApi& load_ucx_or_throw() {
  std::string why;
  const UcxApi* api = load_ucx(&why);
  if (!api) throw Error(ErrorCategory::kSystem, "cannot load UCX: " + why, {.op = "ucx"});
  g_loaded_api.store(api, std::memory_order_release);
  return *api;
}

}  // namespace plait::transport::ucx
