// Sort-benchmark records (sortbenchmark.org's gensort): 100 bytes each, a 10-byte key first.
// Record i is made from the (i+1)-th number of a 128-bit linear congruential generator
// started at 0, so any range of records can be generated on its own (skip ahead) and the
// bytes equal the reference gensort's for the same record numbers: a user who has gensort
// and valsort can check plait's input and output with them.
//
//   binary  key: the generator's high 10 bytes; 00 11; the record number as 32 hex digits;
//           88 99 AA BB; 12 hex digits of the number's low 48 bits, each 4 times; CC DD EE FF
//   ascii   key: 10 printable characters (' '..'~') from the number; 2 spaces; the record
//           number as 32 hex digits; 2 spaces; 13 hex digits of the low 52 bits, each 4
//           times; CR LF (the PennySort form, and what GNU sort reads as lines)
#pragma once

#include <cstddef>
#include <cstdint>

namespace plait::shuffle {

inline constexpr size_t kRecordBytes = 100;
inline constexpr size_t kKeyBytes = 10;

using u128 = unsigned __int128;

enum class RecordFormat : uint8_t { kBinary, kAscii };

// The generator's state after `n` steps from 0: x(n) = a x(n-1) + c mod 2^128. Record i is
// made from x(i + 1).
u128 gensort_state(u128 n);
u128 gensort_next(u128 x);

// Writes records first .. first + count - 1 to `out` (count * kRecordBytes bytes).
void generate_records(u128 first, size_t count, RecordFormat format, uint8_t* out);

// One record from its generator number and record number.
void make_record(u128 random, u128 number, RecordFormat format, uint8_t* out);

// Lower-case hex without leading zeros, as valsort prints its checksum; "0" for zero.
const char* format_u128(u128 v, char (&buf)[40]);

}  // namespace plait::shuffle
