#include "transport/ucx/ucx_info.h"

#include <stdio.h>
#include <stdlib.h>

#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_settings.h"

#include <map>
#include <mutex>
#include <sstream>

namespace plait::transport::ucx {

bool is_rdma_transport(const std::string& t) {
  for (const char* prefix : {"rc", "dc", "ud"})
    if (t.rfind(prefix, 0) == 0) return true;
  return false;
}

bool ucx_sees_rdma(const Config& config) {
  static std::mutex mu;
  static std::map<std::string, bool> seen;
  std::lock_guard lock(mu);
  auto it = seen.find(config.get<UcxSettings>().tls);
  if (it == seen.end()) it = seen.emplace(config.get<UcxSettings>().tls, ucx_info(config).rdma()).first;
  return it->second;
}

bool UcxInfo::rdma() const {
  for (const UcxResource& r : resources)
    if (is_rdma_transport(r.transport)) return true;
  return false;
}

std::string UcxInfo::resource_list() const {
  std::string out;
  for (const UcxResource& r : resources)
    out += (out.empty() ? "" : ", ") + r.transport + "/" + r.device;
  return out;
}

UcxInfo ucx_info(const Config& config) {
  UcxInfo info;
  const UcxApi* api = load_ucx(&info.error);
  if (!api) return info;
  ucp_config_t* uc = nullptr;
  if (ucs_status_t s = api->ucp_config_read(nullptr, nullptr, &uc); s != UCS_OK) {
    info.error = std::string("ucp_config_read: ") + api->ucs_status_string(s);
    return info;
  }
  if (!config.get<UcxSettings>().tls.empty()) api->ucp_config_modify(uc, "TLS", config.get<UcxSettings>().tls.c_str());
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_WAKEUP;
  ucp_context_h context = nullptr;
  const ucs_status_t s = api->init(&params, uc, &context);
  api->ucp_config_release(uc);
  if (s != UCS_OK) {
    info.error = std::string("ucp_init: ") + api->ucs_status_string(s);
    return info;
  }
  info.version = api->ucp_get_version_string();
  // UCP has no API that lists a context's resources; its printout does
  // ("#      resource 1  :  md 1  dev 1  flags -- tcp/lo").
  char* text = nullptr;
  size_t bytes = 0;
  if (FILE* f = ::open_memstream(&text, &bytes)) {
    api->ucp_context_print_info(context, f);
    ::fclose(f);
    std::istringstream lines(std::string(text, bytes));
    ::free(text);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.find("resource") == std::string::npos) continue;
      const size_t dashes = line.find("-- ");
      if (dashes == std::string::npos) continue;
      std::string res = line.substr(dashes + 3);
      while (!res.empty() && (res.back() == ' ' || res.back() == '\r')) res.pop_back();
      const size_t slash = res.find('/');
      if (slash == std::string::npos) continue;
      info.resources.push_back({res.substr(0, slash), res.substr(slash + 1)});
    }
  }
  api->ucp_cleanup(context);
  return info;
}

}  // namespace plait::transport::ucx
