// plait.Fabric, plait.CompletionQueue, plait.Region: the one-sided API (plait/rdma.h) on
// Python buffers. Every operation pins the buffers it reads or writes until its completion
// has been taken from its queue through these wrappers (or the fabric is dropped, which
// cancels what is pending first), so Python cannot free memory the transport still uses.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "arrays.h"
#include "plait/rdma.h"

namespace plait::python {

// What a pending operation holds until its completion is taken.
struct Pending {
  uint64_t context = 0;  // the caller's
  std::vector<BufferRef> buffers;
  std::unique_ptr<uint64_t> result;  // atomics: where the old value lands
};

// Pending operations by internal id, shared by a fabric and its queues.
class PendingTable {
 public:
  uint64_t add(Pending pending);
  // Removes the entry (null if there is none: a target-side completion).
  std::unique_ptr<Pending> take(uint64_t id);
  void clear();

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<Pending>> entries_;
  uint64_t next_ = 1;
};

// Whether the fabric behind a queue still exists: a queue drives its fabric's progress while
// it waits, so waits hold this shared and the fabric's end takes it exclusively.
struct FabricLife {
  std::shared_mutex mu;
  bool alive = true;
};

struct PyCompletion {
  uint64_t context = 0;
  std::string op;
  int peer = -1;
  size_t bytes = 0;
  uint64_t tag = 0;
  uint64_t header = 0;
  uint32_t imm = 0;
  uint64_t offset = 0;
  uint64_t key = 0;
  std::optional<uint64_t> value;  // atomics: the old value
  std::shared_ptr<const Error> error;
};

class PyCompletionQueue {
 public:
  PyCompletionQueue(std::unique_ptr<rdma::CompletionQueue> cq, std::shared_ptr<PendingTable> pending,
                    std::shared_ptr<FabricLife> life)
      : cq_(std::move(cq)), pending_(std::move(pending)), life_(std::move(life)) {}
  std::optional<PyCompletion> poll();
  std::optional<PyCompletion> wait(double timeout_s);
  rdma::CompletionQueue& queue() { return *cq_; }

 private:
  PyCompletion convert(const rdma::Completion& c);
  std::unique_ptr<rdma::CompletionQueue> cq_;
  std::shared_ptr<PendingTable> pending_;
  std::shared_ptr<FabricLife> life_;
};

// Memory a fabric allocated (Fabric::allocate_memory), exposed as a writable byte buffer:
// np.frombuffer keeps this object alive while an array views it, and a region registered
// inside it (plait.rdma.Region) holds that array, so the memory outlives its registrations.
class PyMemory {
 public:
  explicit PyMemory(std::unique_ptr<rdma::MemoryRegion> region) : region_(std::move(region)) {}
  ~PyMemory();
  pybind11::buffer_info buffer() const;
  size_t size() const { return region_->length(); }

 private:
  std::unique_ptr<rdma::MemoryRegion> region_;
};

class PyRegion {
 public:
  PyRegion(std::unique_ptr<rdma::MemoryRegion> region, BufferRef buffer)
      : region_(std::move(region)), buffer_(std::move(buffer)) {}
  rdma::RemoteKey key() const { return region_->remote_key(); }
  void deregister();

 private:
  std::unique_ptr<rdma::MemoryRegion> region_;
  BufferRef buffer_;
};

class PyFabric {
 public:
  PyFabric(const std::string& name, const std::map<std::string, std::string>& settings,
           double timeout_s);
  ~PyFabric();

  int rank() const { return fabric_->rank(); }
  int size() const { return fabric_->size(); }
  std::string provider(int peer) const { return fabric_->provider(peer); }
  bool peer_failed(int peer) const { return fabric_->peer_failed(peer); }
  // For services built on the fabric (plait.shuffle); valid while this object lives.
  rdma::Fabric& raw() { return *fabric_; }

  std::shared_ptr<PyCompletionQueue> completion_queue();
  std::shared_ptr<PyRegion> register_buffer(pybind11::object buffer, const std::string& access);
  std::shared_ptr<PyMemory> allocate(size_t bytes);
  std::vector<std::vector<rdma::RemoteKey>> exchange(const std::vector<rdma::RemoteKey>& mine);
  void set_imm_queue(std::shared_ptr<PyCompletionQueue> cq);

  void send(int peer, pybind11::object data, uint64_t tag, uint64_t header,
            PyCompletionQueue& cq, uint64_t context);
  void recv(int peer, pybind11::object data, uint64_t tag, PyCompletionQueue& cq, uint64_t context);
  void write(int peer, pybind11::object data, const rdma::RemoteKey& remote, uint64_t offset,
             std::optional<uint32_t> imm, PyCompletionQueue& cq, uint64_t context);
  void read(int peer, pybind11::object data, const rdma::RemoteKey& remote, uint64_t offset,
            PyCompletionQueue& cq, uint64_t context);
  void fetch_add(int peer, const rdma::RemoteKey& remote, uint64_t offset, uint64_t add,
                 PyCompletionQueue& cq, uint64_t context);
  void compare_swap(int peer, const rdma::RemoteKey& remote, uint64_t offset, uint64_t expected,
                    uint64_t desired, PyCompletionQueue& cq, uint64_t context);

 private:
  std::unique_ptr<rdma::Fabric> fabric_;
  std::shared_ptr<PendingTable> pending_;
  std::shared_ptr<FabricLife> life_ = std::make_shared<FabricLife>();
  std::vector<std::shared_ptr<PyCompletionQueue>> queues_;  // cancelled when the fabric goes
  std::vector<std::weak_ptr<PyRegion>> regions_;            // deregistered then
  std::shared_ptr<PyCompletionQueue> imm_queue_;
};

void register_rdma(pybind11::module_& m);

}  // namespace plait::python
