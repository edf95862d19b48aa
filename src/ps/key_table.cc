#include "ps/key_table.h"

#include <algorithm>

#include "ps/update_kernels.h"
#include "ps/wire.h"

namespace plait::ps {

const KeyInfo& KeyTable::add(const KeySpec& spec, int rank) {
  const ErrorContext ctx{.rank = rank, .op = "ps register_keys"};
  if (keys_.count(spec.key))
    throw invalid_usage("key " + std::to_string(spec.key) + " is already registered", ctx);
  if (spec.count == 0)
    throw invalid_usage("key " + std::to_string(spec.key) + " has no elements", ctx);
  const Rule rule = spec.options.update.rule;
  if (rule != Rule::kSum && rule != Rule::kMean && !is_float(spec.dtype))
    throw invalid_usage("key " + std::to_string(spec.key) + ": the " + std::string(to_string(rule)) +
                            " rule needs a floating-point key, not " +
                            std::string(to_string(spec.dtype)),
                        ctx);
  if (parts_.size() + spec.count / std::max<size_t>(1, parts_.chunk_bytes() / dtype_size(spec.dtype)) + 2 >
      wire::kMaxPartitions)
    throw invalid_usage("key " + std::to_string(spec.key) + ": more than 2^24 chunks in all; "
                        "raise PLAIT_PS_CHUNK", ctx);
  KeyInfo info;
  info.key = spec.key;
  info.count = spec.count;
  info.dtype = spec.dtype;
  info.update = spec.options.update;
  info.partitions = parts_.add(spec.key, spec.count, spec.dtype);
  return keys_.emplace(spec.key, std::move(info)).first->second;
}

std::string describe_partition(const KeyInfo& key, const Partition& p, int server_rank) {
  const auto it = std::find(key.partitions.begin(), key.partitions.end(), p.id);
  const size_t index = static_cast<size_t>(it - key.partitions.begin());
  std::string text = "key " + std::to_string(key.key);
  if (key.partitions.size() > 1)
    text += " (partition " + std::to_string(index) + " of " + std::to_string(key.partitions.size()) + ")";
  return text + " on server rank " + std::to_string(server_rank);
}

}  // namespace plait::ps
