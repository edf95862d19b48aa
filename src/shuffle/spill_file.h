// A mapper's spill file: the sorted runs that did not fit in its memory budget, appended one
// after another and read back in pieces when reducers ask for them.
//
// The file is created unlinked (O_TMPFILE) in the spill directory, so it is gone when the
// process is, however it ends: a killed job leaves no spill behind. Every failure names the
// directory and the OS error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/socket.h"

namespace plait::shuffle {

class SpillFile {
 public:
  // Throws when no file can be created in `dir` ("" = $TMPDIR, else /tmp).
  explicit SpillFile(std::string dir);
  // Appends `bytes` at the end; returns the offset they start at. The disk starts on them at
  // once (sync_file_range), so that dirty pages do not pile up in the page cache.
  uint64_t append(const void* data, size_t bytes);
  // Reads [offset, offset + bytes) into `out`; throws when it is past the end.
  void read(uint64_t offset, size_t bytes, void* out) const;
  uint64_t size() const { return size_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  net::Fd fd_;
  uint64_t size_ = 0;
};

}  // namespace plait::shuffle
