// What UCX offers on this host, for provider selection and `plait info`: its version and the
// transports and devices a UCP context finds (PLAIT_UCX_TLS / UCX_TLS applied).
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace plait::transport::ucx {

struct UcxResource {
  std::string transport;  // "tcp", "posix", "rc_mlx5", ...
  std::string device;     // "lo", "memory", "mlx5_0:1", ...
};

struct UcxInfo {
  std::string version;  // "1.13.1"; empty when UCX could not be initialized
  std::vector<UcxResource> resources;
  std::string error;    // why not, when version is empty
  // A transport of an RDMA NIC (rc, dc, ud over verbs or mlx5) is among the resources.
  bool rdma() const;
  // "tcp/lo, posix/memory, ..."
  std::string resource_list() const;
};

// Initializes (and cleans up) a UCP context to see its resources; a few milliseconds.
UcxInfo ucx_info(const Config& config);

// Whether UCX drives an RDMA NIC here: ucx_info(config).rdma(), asked once per process and
// transport list (it initializes a UCP context).
bool ucx_sees_rdma(const Config& config);

// Whether a transport name is an RDMA NIC's.
bool is_rdma_transport(const std::string& transport);

}  // namespace plait::transport::ucx
