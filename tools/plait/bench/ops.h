// What `plait bench` knows about each operation, in one table: how big its buffers are, what
// deterministic input each rank feeds it for --check and what every output element must then
// be, how to issue the call, and how nccl-tests (doc/PERFORMANCE.md) counts its bytes and
// turns algorithm bandwidth into bus bandwidth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/element.h"
#include "plait/communicator.h"
#include "plait/types.h"

namespace plait::cli {

enum class BenchOp : uint8_t {
  kAllreduce,
  kReduce,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kAlltoall,
  kGather,
  kScatter,
  kSendrecv,
  kPingpong,
  kBarrier,
};

// The shape of one benchmarked call on this rank.
struct OpShape {
  int rank = 0;
  int size = 1;
  int root = 0;
  size_t count = 0;  // elements per rank, as the Communicator call takes it
  DataType dtype = DataType::kF32;
  ReduceOp redop = ReduceOp::kSum;
  bool in_place = false;
};

// The handles of one issued operation; sendrecv needs two.
struct Pending {
  WorkPtr first;
  WorkPtr second;
  void wait() {
    if (first) first->wait();
    if (second) second->wait();
  }
};

// Buffers as the issue function sees them. In place, `in` points into `out` where this op
// expects its input (rank's block for allgather, the start otherwise).
struct OpBuffers {
  void* in = nullptr;
  void* out = nullptr;
};

struct OpSpec {
  BenchOp op;
  std::string_view name;
  bool reduces;          // takes --redop
  bool rooted;           // takes --root
  bool in_place_ok;      // --inplace has a defined meaning for the op
  bool bytes_are_total;  // nccl-tests counts the whole size*count buffer, not one rank's
  double (*busbw_factor)(int nranks);
  size_t (*input_count)(const OpShape&);   // elements of the send buffer
  size_t (*output_count)(const OpShape&);  // elements of the recv buffer
  // In place: where, in elements of the one buffer, the input sits.
  size_t (*in_place_offset)(const OpShape&);
  Pending (*issue)(Communicator& comm, const OpShape& shape, const OpBuffers& buffers,
                   const CallOptions& options);
  // --check: element i of this rank's input, and the value output element i must hold
  // (nullopt where the op leaves the element unspecified, e.g. reduce's non-roots).
  double (*input)(const OpShape&, size_t i);
  std::optional<double> (*expected)(const OpShape&, size_t i);
};

const OpSpec& op_spec(BenchOp op);
std::optional<BenchOp> parse_bench_op(std::string_view name);
std::string_view to_string(BenchOp op);
// "allreduce reduce broadcast ..." for usage and error messages.
std::string_view bench_op_names();

// Elements per rank for a sweep size, and the bytes nccl-tests reports for that count.
size_t count_for_bytes(const OpSpec& spec, size_t bytes, int nranks, DataType dtype);
size_t bytes_for_count(const OpSpec& spec, size_t count, int nranks, DataType dtype);

// Fills this rank's input buffer for --check (in place: the one buffer at its offset).
void fill_input(const OpSpec& spec, const OpShape& shape, void* in);
// Compares every output element with its expected value; returns how many differ.
int64_t count_wrong(const OpSpec& spec, const OpShape& shape, const void* out);

}  // namespace plait::cli
