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

std::vector<uint32_t> Shuffle::Impl::partitions_of(const uint8_t* in, size_t count,
                                                   const PartitionOf& partition_of) const {
  if (runs_.size() >= Shuffle::kMaxRuns)
    throw invalid_usage("map() called " + std::to_string(runs_.size()) +
                            " times in one round; at most " + std::to_string(Shuffle::kMaxRuns),
                        {.rank = rank_, .op = "shuffle map"});
  const size_t rb = options_.record_bytes;
  std::vector<uint32_t> part(count);
  for (size_t i = 0; i < count; ++i) {
    const int p = partition_of(in + i * rb);
    if (p < 0 || p >= size_)
      throw invalid_usage("record " + std::to_string(i) + " mapped to partition " +
                              std::to_string(p) + ", not one of 0.." + std::to_string(size_ - 1),
                          {.rank = rank_, .op = "shuffle map"});
    part[i] = static_cast<uint32_t>(p);
  }
  return part;
}

void Shuffle::Impl::keep_run(Run run, size_t count) {
  for (int p = 0; p < size_; ++p) part_bytes_[p] += run.bytes[p];
  held_bytes_ += run.total;
  runs_.push_back(std::move(run));
  stats_.records_mapped += count;
  spill_over_budget();
}

void Shuffle::Impl::map(const void* records, size_t count, const PartitionOf& partition_of) {
  const auto start = Clock::now();
  const auto* in = static_cast<const uint8_t*>(records);
  const std::vector<uint32_t> part = partitions_of(in, count, partition_of);
  Run run;
  write_run(in, count, part, run);
  keep_run(std::move(run), count);
  stats_.map_s += since(start);
}

void Shuffle::Impl::map(Buffer records, const PartitionOf& partition_of) {
  const size_t rb = options_.record_bytes;
  if (records.size() % rb != 0)
    throw invalid_usage("map() given " + std::to_string(records.size()) +
                            " bytes, not a whole number of " + std::to_string(rb) + "-byte records",
                        {.rank = rank_, .op = "shuffle map"});
  const size_t count = records.size() / rb;
  // Sorted runs are sorted out of place: the copying map does that.
  if (options_.key_bytes > 0 || count == 0) return map(records.data(), count, partition_of);
  const auto start = Clock::now();
  std::vector<uint32_t> part = partitions_of(records.data(), count, partition_of);
  Run run;
  lay_out(part, run);
  permute_in_place(records.data(), part, run.offset);
  run.region = fabric_.register_memory(records.data(), run.total, rdma::kAccessRemoteRead);
  run.owned = std::move(records);
  keep_run(std::move(run), count);
  stats_.map_s += since(start);
}

// American flag sort's permutation: each record not yet in its partition is lifted out and
// dropped into the next free slot of its own partition, whose record is carried on the same
// way until one belongs where the first was lifted from. Every record is read and written
// once; part[] moves with the records.
void Shuffle::Impl::permute_in_place(uint8_t* base, std::vector<uint32_t>& part,
                                     const std::vector<uint64_t>& offset) const {
  const size_t rb = options_.record_bytes;
  std::vector<size_t> next(size_), end(size_);
  for (int p = 0; p < size_; ++p) {
    next[p] = offset[p] / rb;
    end[p] = p + 1 < size_ ? offset[p + 1] / rb : part.size();
  }
  std::vector<uint8_t> carried(rb), displaced(rb);
  for (int p = 0; p < size_; ++p) {
    while (next[p] < end[p]) {
      const size_t hole = next[p];
      if (part[hole] == static_cast<uint32_t>(p)) {
        ++next[p];
        continue;
      }
      std::memcpy(carried.data(), base + hole * rb, rb);
      uint32_t q = part[hole];
      for (;;) {
        while (part[next[q]] == q) ++next[q];  // already home: the counts keep this in range
        const size_t slot = next[q]++;
        if (slot == hole) {  // q == p: the cycle closes
          std::memcpy(base + hole * rb, carried.data(), rb);
          part[hole] = q;
          break;
        }
        std::memcpy(displaced.data(), base + slot * rb, rb);
        std::memcpy(base + slot * rb, carried.data(), rb);
        std::swap(carried, displaced);
        std::swap(q, part[slot]);
      }
    }
  }
}

// Each partition's bytes and where its block starts: blocks back to back in partition order.
void Shuffle::Impl::lay_out(const std::vector<uint32_t>& part, Run& run) const {
  run.offset.assign(size_, 0);
  run.bytes.assign(size_, 0);
  for (uint32_t p : part) run.bytes[p] += options_.record_bytes;
  for (int p = 0; p < size_; ++p) {
    run.offset[p] = run.total;
    run.total += run.bytes[p];
  }
}

void Shuffle::Impl::write_run(const uint8_t* in, size_t count, const std::vector<uint32_t>& part,
                              Run& run) {
  const size_t rb = options_.record_bytes;
  lay_out(part, run);
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
    run.owned = Buffer();
    held_bytes_ -= run.total;
    ++stats_.runs_spilled;
    stats_.bytes_spilled += run.total;
  }
}

}  // namespace plait::shuffle
