// The map side of a round: each map() call's records partitioned (and sorted within each
// partition when key_bytes is set) into a registered region, and spilled to the spill file
// when the runs held in memory pass the budget.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "plait/error.h"
#include "shuffle/record_sort.h"
#include "shuffle/shuffle_impl.h"

namespace plait::shuffle {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

Shuffle::Impl::Impl(rdma::Fabric& fabric, ShuffleOptions options)
    : fabric_(fabric), options_(std::move(options)), rank_(fabric.rank()), size_(fabric.size()),
      cq_(fabric.create_cq()) {
  if (options_.record_bytes == 0) throw invalid_usage("shuffle: record_bytes must be positive");
  if (options_.key_bytes > options_.record_bytes)
    throw invalid_usage("shuffle: key_bytes " + std::to_string(options_.key_bytes) +
                        " past record_bytes " + std::to_string(options_.record_bytes));
  if (options_.memory_bytes > 0 && options_.mode == ShuffleMode::kPush && options_.key_bytes == 0)
    throw invalid_usage("shuffle: a memory budget in push mode needs key_bytes (without a key "
                        "push writes a partition whole into the reducer's memory; with one the "
                        "reducer merges windows it gives credits for)");
  if (options_.fetch_bytes < options_.record_bytes) options_.fetch_bytes = options_.record_bytes;
  options_.fetch_bytes -= options_.fetch_bytes % options_.record_bytes;
  if (options_.in_flight < 1) options_.in_flight = 1;
  part_bytes_.assign(size_, 0);
}

Shuffle::Impl::~Impl() = default;

const uint8_t* Shuffle::Impl::run_data(const Run& run) const {
  return run.region ? static_cast<const uint8_t*>(run.region->addr()) : nullptr;
}

void Shuffle::Impl::map(const void* records, size_t count,
                        const std::function<int(const uint8_t*)>& partition_of) {
  if (runs_.size() >= Shuffle::kMaxRuns)
    throw invalid_usage("map() called " + std::to_string(runs_.size()) +
                            " times in one round; at most " + std::to_string(Shuffle::kMaxRuns),
                        {.rank = rank_, .op = "shuffle map"});
  const auto start = Clock::now();
  const auto* in = static_cast<const uint8_t*>(records);
  const size_t rb = options_.record_bytes;
  // Counting pass: each record's partition, once.
  std::vector<uint32_t> part(count);
  for (size_t i = 0; i < count; ++i) {
    const int p = partition_of(in + i * rb);
    if (p < 0 || p >= size_)
      throw invalid_usage("record " + std::to_string(i) + " mapped to partition " +
                              std::to_string(p) + ", not one of 0.." + std::to_string(size_ - 1),
                          {.rank = rank_, .op = "shuffle map"});
    part[i] = static_cast<uint32_t>(p);
  }
  Run run;
  write_run(in, count, part, run);
  for (int p = 0; p < size_; ++p) part_bytes_[p] += run.bytes[p];
  held_bytes_ += run.total;
  runs_.push_back(std::move(run));
  stats_.records_mapped += count;
  spill_over_budget();
  stats_.map_s += since(start);
}

void Shuffle::Impl::write_run(const uint8_t* in, size_t count, const std::vector<uint32_t>& part,
                              Run& run) {
  const size_t rb = options_.record_bytes;
  std::vector<uint64_t> counts(size_, 0);
  for (size_t i = 0; i < count; ++i) ++counts[part[i]];
  run.offset.assign(size_, 0);
  run.bytes.assign(size_, 0);
  for (int p = 0; p < size_; ++p) {
    run.offset[p] = run.total;
    run.bytes[p] = counts[p] * rb;
    run.total += run.bytes[p];
  }
  if (run.total == 0) return;
  run.region = fabric_.allocate_memory(run.total, rdma::kAccessRemoteRead);
  auto* base = static_cast<uint8_t*>(run.region->addr());
  // Unsorted: one stable scatter into the region. Sorted: the scatter into a scratch
  // buffer, then each partition's records gathered into the region in key order.
  uint8_t* scatter_to = base;
  Buffer scratch;
  if (options_.key_bytes > 0) {
    scratch = Buffer(run.total);
    scatter_to = scratch.data();
  }
  std::vector<uint64_t> next = run.offset;
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(scatter_to + next[part[i]], in + i * rb, rb);
    next[part[i]] += rb;
  }
  if (options_.key_bytes == 0) return;
  for (int p = 0; p < size_; ++p) {
    if (run.bytes[p] == 0) continue;
    sort_records(scratch.data() + run.offset[p], run.bytes[p] / rb, base + run.offset[p], rb,
                 options_.key_bytes);
  }
}

void Shuffle::Impl::spill_over_budget() {
  if (options_.memory_bytes == 0) return;
  // Oldest runs first: the last one is the likeliest to be read soon after a small round.
  for (Run& run : runs_) {
    if (held_bytes_ <= options_.memory_bytes) return;
    if (run.spilled || !run.region) continue;
    if (!spill_)
      spill_ = std::make_unique<SpillFile>(options_.spill_dir, options_.direct_io, options_.memory_bytes);
    run.file_offset = spill_->append(run.region->addr(), run.total);
    run.spilled = true;
    run.region.reset();
    held_bytes_ -= run.total;
    ++stats_.runs_spilled;
    stats_.bytes_spilled += run.total;
  }
}

}  // namespace plait::shuffle
