// Whether compressing a gradient pays, decided by the cost model: per candidate (and for an
// uncompressed f32 allreduce) the predicted seconds for `count` values,
//
//   t = alpha x messages + wire bytes x share / bandwidth + count / speed
//
// where share is 2(w-1)/w for a method moved by allreduce and w-1 for one moved by
// allgather, alpha and the bandwidth are measured on the communicator, and speed is the
// candidate's measured compress (with error feedback) + decompress rate on this core. On a
// fast link the uncompressed allreduce wins; on a slow one the compressor with the best
// wire for its cost does.
//
//   auto chooser = plait::compress::AutoCompression::measure(*comm);  // collective
//   plait::compress::State state;                                     // per tensor
//   chooser.allreduce(*comm, grad, n, &state);                        // grad: the mean
//
// The choice is logged at PLAIT_LOG=info by rank 0, once per count, with every prediction;
// AutoOptions::force overrides it.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "plait/communicator.h"
#include "plait/compress.h"
#include "plait/compressed_allreduce.h"

namespace plait::compress {

struct AutoOptions {
  // Weighed against an uncompressed f32 allreduce, each with `params`.
  std::vector<Method> candidates = {Method::kFp16, Method::kPowerSgd};
  Params params;
  // "" (the model decides), "none" (never compress) or a candidate's name (always it).
  std::string force;
};

class AutoCompression {
 public:
  // Collective: every rank passes equal options. Times allreduces of 1 and 2^20 floats (the
  // median of 5 after a warm-up, the slowest rank's) for alpha and the bandwidth, and each
  // candidate's round trip on 2^20 values; every rank takes the same figures, so every rank
  // makes the same choice. Throws plait::Error: invalid usage for a `force` that names
  // neither "none" nor a candidate; the communicator's errors as they come.
  static AutoCompression measure(Communicator& comm, const AutoOptions& options = {});

  // Seconds predicted for count values by `method` (nullopt: uncompressed), with w ranks.
  double predict(std::optional<Method> method, size_t count) const;
  // A compressor is chosen only when predicted to take at most this share of the
  // uncompressed allreduce's time: timings on a shared host are noisy, and a near tie does
  // not pay for compression's error.
  static constexpr double kMargin = 0.8;
  // The method with the least predicted time, if it is within kMargin of the uncompressed
  // allreduce's (else nullopt: uncompressed), or the forced one.
  std::optional<Method> choose(size_t count) const;

  // Collective, as compress::allreduce (same count and state rules): the values move by the
  // method choose(count) names, or by a plain f32 allreduce; the stats' path says which
  // ("auto: ..." first).
  AllreduceStats allreduce(Communicator& comm, float* data, size_t count, State* state,
                           bool average = true) const;

  double alpha_seconds() const { return alpha_s_; }
  double bytes_per_second() const { return bytes_per_s_; }
  // Values per second of `method`'s compress + decompress, as measured.
  double speed(Method method) const;

 private:
  AutoCompression() = default;

  int ranks_ = 1;
  int rank_ = 0;
  double alpha_s_ = 0;
  double bytes_per_s_ = 0;
  std::optional<Method> forced_;
  bool force_none_ = false;
  std::map<Method, double> speed_;
  std::map<Method, std::unique_ptr<Compressor>> compressors_;
  // Counts whose choice was logged; guarded: choose() is const and may run on any thread.
  struct Logged {
    std::mutex mutex;
    std::map<size_t, bool> counts;
  };
  std::unique_ptr<Logged> logged_ = std::make_unique<Logged>();
};

}  // namespace plait::compress
