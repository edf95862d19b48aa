// Provider-independent parts of the Fabric interface.
#include "transport/fabric.h"

#include "transport/allocated_memory.h"
#include "transport/shm/shm_provider.h"
#include "transport/tcp/tcp_provider.h"
#include "transport/ucx/ucx_provider.h"

namespace plait::rdma {

std::string_view to_string(OpType op) {
  switch (op) {
    case OpType::kSend: return "send";
    case OpType::kRecv: return "recv";
    case OpType::kWrite: return "write";
    case OpType::kRead: return "read";
    case OpType::kFetchAdd: return "fetch_add";
    case OpType::kCompareSwap: return "compare_swap";
    case OpType::kRemoteWriteImm: return "remote write_imm";
  }
  return "unknown op";
}

}  // namespace plait::rdma

namespace plait::transport {

std::unique_ptr<MemoryRegion> Fabric::allocate_memory(size_t length, uint32_t access) {
  return allocate_anonymous_memory(*this, length, access);
}

std::vector<Capabilities> provider_capabilities(const Config& config) {
  return {shm_capabilities(config), tcp_capabilities(config), ucx_capabilities()};
}

}  // namespace plait::transport
