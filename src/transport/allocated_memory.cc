#include "transport/allocated_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <string>

#include "plait/error.h"

namespace plait::transport {

std::unique_ptr<MemoryRegion> Fabric::allocate_memory(size_t length, uint32_t access) {
  return allocate_anonymous_memory(*this, length, access);
}

std::unique_ptr<MemoryRegion> allocate_anonymous_memory(Fabric& fabric, size_t length,
                                                        uint32_t access) {
  if (length == 0)
    throw invalid_usage("allocate_memory: length 0",
                        {.rank = fabric.rank(), .op = "allocate_memory"});
  void* addr = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (addr == MAP_FAILED)
    throw system_error("allocate_memory: mmap of " + std::to_string(length) + " bytes", errno,
                       {.rank = fabric.rank(), .op = "allocate_memory",
                        .bytes = static_cast<int64_t>(length)});
  std::unique_ptr<MemoryRegion> registration;
  try {
    registration = fabric.register_memory(addr, length, access);
  } catch (...) {
    ::munmap(addr, length);
    throw;
  }
  return std::make_unique<OwningMemoryRegion>(std::move(registration),
                                              [addr, length] { ::munmap(addr, length); });
}

}  // namespace plait::transport
