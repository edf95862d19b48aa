// A k-way merge of sorted runs of fixed-size records, each run arriving a window at a time
// (the reducer's side of a sort-based shuffle: the runs are the mappers' sorted blocks,
// fetched while they are merged).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

namespace plait::shuffle {

// The next window of run `run`'s records (whole records); empty when the run is over. The
// window stays valid until the next call for the same run.
using NextWindow = std::function<std::span<const uint8_t>(size_t run)>;
using RecordSink = std::function<void(const uint8_t* records, size_t count)>;

// Calls `sink` with the runs' records in key order (memcmp of the first key_bytes bytes),
// equal keys in run order, a batch of up to batch_records at a time (copied through `batch`,
// which holds batch_records records). key_bytes 0: the runs one after another.
void merge_runs(size_t runs, size_t record_bytes, size_t key_bytes, const NextWindow& next,
                uint8_t* batch, size_t batch_records, const RecordSink& sink);

}  // namespace plait::shuffle
