// Sorts 100-byte records by their 10-byte keys (unsigned bytes, as memcmp orders them).
//
// The records themselves move once: a least-significant-digit radix sort orders 16-byte
// (key, index) entries, eight bits a pass, passes whose byte is the same in every key
// skipped, and the records are then gathered in that order into the output. Stable: equal
// keys keep their input order. Memory: the output plus 32 bytes a record.
#pragma once

#include <cstddef>
#include <cstdint>

namespace plait::shuffle {

// `out` must not overlap `in`; both hold count * kRecordBytes bytes.
void sort_records(const uint8_t* in, size_t count, uint8_t* out);

}  // namespace plait::shuffle
