// plait.Communicator: the collectives and point-to-point calls of plait::Communicator on
// Python buffers. Each call checks its arguments (plait.InvalidUsageError naming this rank and
// the call; nothing is started then), pins its buffers and returns a Work without blocking.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "plait/communicator.h"
#include "work_py.h"

namespace plait::python {

class PyCommunicator {
 public:
  explicit PyCommunicator(std::shared_ptr<Communicator> comm);
  PyCommunicator(PyCommunicator&&) = default;
  PyCommunicator& operator=(PyCommunicator&&) = delete;
  // Drops the C++ communicator (which fails and cancels what it still runs), then lets go of
  // the buffers of dropped Works.
  ~PyCommunicator();

  int rank() const { return comm_->rank(); }
  Communicator& native() const { return *comm_; }
  int size() const { return comm_->size(); }

  // communicator_py.cc
  PyWork allreduce(pybind11::object data, pybind11::object out, const std::string& op,
                   const std::string& algorithm, double timeout_s);
  PyWork broadcast(pybind11::object data, int root, const std::string& algorithm,
                   double timeout_s);
  PyWork allgather(pybind11::object data, pybind11::object out, const std::string& algorithm,
                   double timeout_s);
  PyWork reduce_scatter(pybind11::object data, pybind11::object out, const std::string& op,
                        const std::string& algorithm, double timeout_s);
  PyWork alltoall(pybind11::object data, pybind11::object out, const std::string& algorithm,
                  double timeout_s);
  PyWork barrier(double timeout_s);
  PyWork send(pybind11::object data, int peer, uint32_t tag, double timeout_s);
  PyWork recv(pybind11::object data, int peer, uint32_t tag, double timeout_s);
  std::optional<PyCommunicator> split(int color, int key);
  // (the survivors' communicator, their old ranks)
  pybind11::tuple shrink(double timeout_s);
  void abort(const std::string& reason);

  // communicator_v_py.cc: rooted collectives and per-rank counts
  PyWork reduce(pybind11::object data, pybind11::object out, const std::string& op, int root,
                const std::string& algorithm, double timeout_s);
  PyWork gather(pybind11::object data, pybind11::object out, int root,
                const std::string& algorithm, double timeout_s);
  PyWork scatter(pybind11::object data, pybind11::object out, int root,
                 const std::string& algorithm, double timeout_s);
  PyWork allgatherv(pybind11::object data, pybind11::object out,
                    const std::vector<int64_t>& counts, const std::string& algorithm,
                    double timeout_s);
  PyWork reduce_scatterv(pybind11::object data, pybind11::object out,
                         const std::vector<int64_t>& counts, const std::string& op,
                         const std::string& algorithm, double timeout_s);
  PyWork alltoallv(pybind11::object data, pybind11::object out,
                   const std::vector<int64_t>& send_counts,
                   const std::vector<int64_t>& recv_counts,
                   const std::optional<std::vector<int64_t>>& send_displs,
                   const std::optional<std::vector<int64_t>>& recv_displs,
                   const std::string& algorithm, double timeout_s);

 private:
  // invalid_usage naming this rank and `op`.
  Error usage(const std::string& message, const char* op) const;
  // A pinned view of `object`; its errors name this rank and `op`.
  BufferRef view(pybind11::handle object, bool writable, const char* what, const char* op) const;
  ReduceOp reduction(const std::string& name, const char* op) const;
  void same_type(const BufferView& in, const BufferView& out, const char* op) const;
  // One count per rank, none negative.
  std::vector<size_t> per_rank(const std::vector<int64_t>& values, const char* what,
                               const char* op) const;

  // Issues the call without the GIL and ties `buffers` to the Work it returns.
  template <typename Issue>
  PyWork start(std::vector<BufferRef> buffers, Issue&& issue) {
    in_flight_->reap();
    WorkPtr work;
    {
      pybind11::gil_scoped_release nogil;
      work = issue(*comm_);
    }
    return PyWork(std::move(work), std::move(buffers), in_flight_);
  }

  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<InFlight> in_flight_;
};

CallOptions options(const std::string& algorithm, double timeout_s);

// A communicator over every rank of the job, from the launcher's environment.
PyCommunicator init(double timeout_s);

}  // namespace plait::python
