// Sorts fixed-size records by a key at their start (unsigned bytes, as memcmp orders them):
// the sort benchmark's 100-byte records with 10-byte keys by default, any size and key
// length for the shuffle's sorted runs.
//
// The records themselves move once: 16-byte (key, index) entries are scattered by their
// key's first 16 bits into 65,536 buckets (one counting pass, one scatter), each bucket is
// sorted on its own (a few hundred entries for random keys: in cache), and the records are
// gathered in that order. Stable: equal keys keep their input order (the index breaks ties),
// so skew (every key equal) costs one O(n log n) sort, no more. Memory: 32 bytes a record
// for the order, plus the output. Keys longer than 10 bytes compare their first 10 as
// integers and the rest with memcmp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plait/shuffle.h"
#include "shuffle/gensort.h"

namespace plait::shuffle {

// The sorted order of a block of records, computed once; the records can then be gathered
// in pieces (a sort writes each piece while it gathers the next).
class RecordOrder {
 public:
  // `in` must stay as it is while gather() is used. 0 < key_bytes <= record_bytes.
  RecordOrder(const uint8_t* in, size_t count, size_t record_bytes = kRecordBytes,
              size_t key_bytes = kKeyBytes);
  size_t size() const { return count_; }
  // Records first .. first + n - 1 of the sorted order into `out` (n records).
  void gather(size_t first, size_t n, uint8_t* out) const;

 private:
  const uint8_t* in_;
  size_t count_;
  size_t record_bytes_;
  Buffer entries_;  // sorted (key, index) entries
};

// `out` must not overlap `in`; both hold count records.
void sort_records(const uint8_t* in, size_t count, uint8_t* out, size_t record_bytes = kRecordBytes,
                  size_t key_bytes = kKeyBytes);

}  // namespace plait::shuffle
