// Sorts 100-byte records by their 10-byte keys (unsigned bytes, as memcmp orders them).
//
// The records themselves move once: 16-byte (key, index) entries are scattered by their
// key's first 16 bits into 65,536 buckets (one counting pass, one scatter), each bucket is
// sorted on its own (a few hundred entries for random keys: in cache), and the records are
// gathered in that order into the output. Stable: equal keys keep their input order (the
// index breaks ties), so skew (every key equal) costs one O(n log n) sort, no more. Memory:
// the output plus 32 bytes a record.
#pragma once

#include <cstddef>
#include <cstdint>

namespace plait::shuffle {

// `out` must not overlap `in`; both hold count * kRecordBytes bytes.
void sort_records(const uint8_t* in, size_t count, uint8_t* out);

}  // namespace plait::shuffle
