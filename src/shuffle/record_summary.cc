#include "shuffle/record_summary.h"

#include <zlib.h>

#include <cstring>
#include <vector>

#include "shuffle/record_file.h"

namespace plait::shuffle {

namespace {
Key key_of(const uint8_t* record) {
  Key k;
  std::memcpy(k.data(), record, kKeyBytes);
  return k;
}
}  // namespace

void RecordSummary::append(const RecordSummary& next) {
  if (next.records == 0) return;
  if (records == 0) {
    *this = next;
    return;
  }
  const int seam = std::memcmp(last_key.data(), next.first_key.data(), kKeyBytes);
  if (seam == 0) ++duplicates;
  if (seam > 0) {
    if (unordered == 0) first_unordered = records;
    ++unordered;
  }
  if (next.unordered > 0 && unordered == 0) first_unordered = records + next.first_unordered;
  unordered += next.unordered;
  duplicates += next.duplicates;
  checksum += next.checksum;
  records += next.records;
  last_key = next.last_key;
}

RecordSummary summarize(const uint8_t* records, size_t count) {
  RecordSummary s;
  if (count == 0) return s;
  s.records = count;
  s.first_key = key_of(records);
  s.last_key = key_of(records + (count - 1) * kRecordBytes);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* r = records + i * kRecordBytes;
    s.checksum += crc32(0, r, kRecordBytes);
    if (i == 0) continue;
    const int c = std::memcmp(r - kRecordBytes, r, kKeyBytes);
    if (c == 0) ++s.duplicates;
    if (c > 0) {
      if (s.unordered == 0) s.first_unordered = i;
      ++s.unordered;
    }
  }
  return s;
}

RecordSummary summarize_file(const std::string& path) {
  RecordReader in(path);
  RecordSummary total;
  std::vector<uint8_t> block(kRecordBytes << 16);
  size_t n;
  while ((n = in.read(block.data(), block.size() / kRecordBytes)) > 0)
    total.append(summarize(block.data(), n));
  return total;
}

}  // namespace plait::shuffle
