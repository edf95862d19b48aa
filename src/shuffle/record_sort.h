// Sorts 100-byte records by their 10-byte keys (unsigned bytes, as memcmp orders them).
//
// The records themselves move once: 16-byte (key, index) entries are scattered by their
// key's first 16 bits into 65,536 buckets (one counting pass, one scatter), each bucket is
// sorted on its own (a few hundred entries for random keys: in cache), and the records are
// gathered in that order. Stable: equal keys keep their input order (the index breaks ties),
// so skew (every key equal) costs one O(n log n) sort, no more. Memory: 32 bytes a record
// for the order, plus the output.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plait/shuffle.h"

namespace plait::shuffle {

// The sorted order of a block of records, computed once; the records can then be gathered
// in pieces (a sort writes each piece while it gathers the next).
class RecordOrder {
 public:
  // `in` must stay as it is while gather() is used.
  RecordOrder(const uint8_t* in, size_t count);
  size_t size() const { return count_; }
  // Records first .. first + n - 1 of the sorted order into `out` (n * kRecordBytes bytes).
  void gather(size_t first, size_t n, uint8_t* out) const;

 private:
  const uint8_t* in_;
  size_t count_;
  Buffer entries_;  // sorted (key, index) entries
};

// `out` must not overlap `in`; both hold count * kRecordBytes bytes.
void sort_records(const uint8_t* in, size_t count, uint8_t* out);

}  // namespace plait::shuffle
