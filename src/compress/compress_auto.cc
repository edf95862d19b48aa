// AutoCompression: the cost model's inputs measured on the communicator and this core, and
// the cheapest way to move a gradient of a given size (see the header).
#include "plait/compress_auto.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "compress/kernels.h"
#include "compress/quantized_sum.h"
#include "core/clock.h"
#include "core/log.h"
#include "plait/error.h"

namespace plait::compress {
namespace {

constexpr size_t kSampleValues = size_t{1} << 20;
constexpr int kReps = 5;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The median of kReps timed allreduces of `count` floats, after a warm-up, each started
// together (a barrier) so that the time is the collective's and not a late rank's.
double timed_allreduce(Communicator& comm, size_t count) {
  std::vector<float> v(std::max<size_t>(1, count), 1.0f);
  comm.allreduce(v.data(), v.data(), count, DataType::kF32, ReduceOp::kSum)->wait();
  std::vector<double> times;
  for (int i = 0; i < kReps; ++i) {
    comm.barrier()->wait();
    const Clock::time_point start = Clock::now();
    comm.allreduce(v.data(), v.data(), count, DataType::kF32, ReduceOp::kSum)->wait();
    times.push_back(seconds_since(start));
  }
  std::nth_element(times.begin(), times.begin() + kReps / 2, times.end());
  return times[kReps / 2];
}

// Values per second of a compress with error feedback (a second call: the state holds a
// residual, PowerSGD a Q) and a decompress.
double round_trip_speed(const Compressor& c, const std::vector<float>& sample) {
  std::vector<std::byte> wire(c.max_wire_bytes(sample.size()));
  std::vector<float> out(sample.size());
  State state;
  c.compress(sample.data(), sample.size(), wire.data(), &state);
  const Clock::time_point start = Clock::now();
  const size_t bytes = c.compress(sample.data(), sample.size(), wire.data(), &state);
  c.decompress(wire.data(), bytes, out.data(), out.size());
  return static_cast<double>(sample.size()) / std::max(1e-9, seconds_since(start));
}

// Collectives a method's compressed allreduce makes, and whether they gather every rank's
// wire (allgather) rather than reduce one (compressed_allreduce.cc).
struct Moves {
  int messages;
  bool gathered;
};
Moves moves_of(Method m) {
  switch (m) {
    case Method::kFp16:
    case Method::kBf16:
    case Method::kRandomK: return {1, false};
    case Method::kInt8: return {2, false};      // the scales' max, then the quanta's sum
    case Method::kPowerSgd: return {2, false};  // P, then Q
    case Method::kThreshold: return {2, true};  // the sizes, then an allgatherv
    default: return {1, true};                  // sign, topk
  }
}

}  // namespace

AutoCompression AutoCompression::measure(Communicator& comm, const AutoOptions& options) {
  AutoCompression a;
  a.ranks_ = comm.size();
  a.rank_ = comm.rank();
  for (Method m : options.candidates)
    if (!a.compressors_.count(m)) a.compressors_.emplace(m, Compressor::create(m, options.params));
  if (options.force == "none") {
    a.force_none_ = true;
  } else if (!options.force.empty()) {
    const Method m = parse_method(options.force);
    if (!a.compressors_.count(m))
      throw invalid_usage("auto: force = \"" + options.force + "\" is not a candidate (none, or one of the candidates)",
                          {.rank = comm.rank(), .op = "compress auto"});
    a.forced_ = m;
  }

  // The link: a 4-byte allreduce is alpha; a 4 MiB one adds its share of bytes at the bandwidth.
  double link[2] = {timed_allreduce(comm, 1), timed_allreduce(comm, kSampleValues)};
  comm.allreduce(link, link, 2, DataType::kF64, ReduceOp::kMax)->wait();
  const double share = a.ranks_ > 1 ? 2.0 * (a.ranks_ - 1) / a.ranks_ : 1.0;
  a.alpha_s_ = link[0];
  a.bytes_per_s_ = share * 4.0 * kSampleValues / std::max(1e-9, link[1] - link[0]);

  // The candidates on this core, in a fixed order; every rank takes the slowest rank's.
  std::vector<float> sample(kSampleValues);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& x : sample) x = normal(rng);
  std::vector<double> speeds;
  for (const auto& [m, c] : a.compressors_) speeds.push_back(round_trip_speed(*c, sample));
  if (!speeds.empty())
    comm.allreduce(speeds.data(), speeds.data(), speeds.size(), DataType::kF64, ReduceOp::kMin)->wait();
  size_t i = 0;
  for (const auto& [m, c] : a.compressors_) a.speed_[m] = speeds[i++];
  return a;
}

double AutoCompression::speed(Method method) const {
  auto it = speed_.find(method);
  if (it == speed_.end())
    throw invalid_usage("auto: " + std::string(to_string(method)) + " is not a candidate", {.op = "compress auto"});
  return it->second;
}

double AutoCompression::predict(std::optional<Method> method, size_t count) const {
  const double w = ranks_;
  if (!method) return alpha_s_ + (w > 1 ? 2.0 * (w - 1) / w : 0.0) * 4.0 * count / bytes_per_s_;
  const double values_per_s = speed(*method);  // throws for a method that is not a candidate
  const Moves mv = moves_of(*method);
  const Compressor& c = *compressors_.at(*method);
  double wire = static_cast<double>(c.max_wire_bytes(count));
  if (*method == Method::kInt8) {
    // Past 127 ranks the quanta are summed on a wider wire (quantized_sum.h).
    const size_t chunks = (count + c.params().chunk - 1) / c.params().chunk;
    wire = static_cast<double>(4 * chunks + detail::plan_quantized_sum(ranks_, c.params().levels).bytes(count));
  }
  const double share = mv.gathered ? w - 1 : (w > 1 ? 2.0 * (w - 1) / w : 0.0);
  return mv.messages * alpha_s_ + share * wire / bytes_per_s_ + count / values_per_s;
}

std::optional<Method> AutoCompression::choose(size_t count) const {
  std::optional<Method> best;
  const double none_s = predict(std::nullopt, count);
  if (forced_ || force_none_) {
    best = forced_;
  } else {
    double best_s = kMargin * none_s;
    for (const auto& [m, c] : compressors_) {
      const double t = predict(m, count);
      if (t <= best_s) {
        best = m;
        best_s = t;
      }
    }
  }
  if (rank_ == 0 && log_enabled(LogLevel::kInfo)) {
    std::lock_guard<std::mutex> lock(logged_->mutex);
    if (logged_->counts.emplace(count, true).second) {
      std::ostringstream line;
      line.precision(3);
      line << "compress auto: " << (best ? to_string(*best) : "none") << " for " << count << " values"
           << (forced_ || force_none_ ? " (forced)" : "") << " (predicted: none " << predict(std::nullopt, count) * 1e3
           << " ms";
      for (const auto& [m, c] : compressors_) line << ", " << to_string(m) << " " << predict(m, count) * 1e3 << " ms";
      line << "; alpha " << alpha_s_ * 1e6 << " us, bandwidth " << bytes_per_s_ / 1e9 << " GB/s)";
      log_line(LogLevel::kInfo, line.str());
    }
  }
  return best;
}

AllreduceStats AutoCompression::allreduce(Communicator& comm, float* data, size_t count, State* state,
                                          bool average) const {
  const std::optional<Method> m = choose(count);
  AllreduceStats st;
  if (m) {
    st = compress::allreduce(comm, data, count, *compressors_.at(*m), state, average);
    st.path = "auto: " + std::string(to_string(*m)) + ", " + st.path;
    return st;
  }
  if (!data && count > 0) throw invalid_usage("null buffer", {.rank = comm.rank(), .op = "compress auto allreduce"});
  const Clock::time_point start = Clock::now();
  comm.allreduce(data, data, count, DataType::kF32, ReduceOp::kSum)->wait();
  if (average && comm.size() > 1) kernels::scale(data, 1.0f / static_cast<float>(comm.size()), count);
  st.communicate_seconds = seconds_since(start);
  st.wire_bytes = 4 * count;
  st.path = "auto: none, allreduce f32";
  return st;
}

}  // namespace plait::compress
