// What valsort says of a sequence of records: how many, the sum of their CRC-32s (zlib's, of
// all 100 bytes; order-independent, so a sort's output must have its input's), how many
// adjacent pairs have equal keys, and how many are out of order (with the first). Summaries
// of consecutive pieces combine with append(), which also checks the seam between them, so
// one output file per rank is validated piecewise and then as the whole, as valsort -s does.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "shuffle/gensort.h"

namespace plait::shuffle {

using Key = std::array<uint8_t, kKeyBytes>;

struct RecordSummary {
  uint64_t records = 0;
  u128 checksum = 0;
  uint64_t duplicates = 0;       // adjacent records with equal keys
  uint64_t unordered = 0;        // adjacent records whose key is less than the one before
  uint64_t first_unordered = 0;  // index of the first of those (when unordered > 0)
  Key first_key{};
  Key last_key{};

  // `next` holds the records that follow these.
  void append(const RecordSummary& next);
  bool sorted() const { return unordered == 0; }
};

RecordSummary summarize(const uint8_t* records, size_t count);

// Reads a file of records in blocks. Throws plait::Error naming the file when it cannot be
// read or its length is not a whole number of records.
RecordSummary summarize_file(const std::string& path);

}  // namespace plait::shuffle
