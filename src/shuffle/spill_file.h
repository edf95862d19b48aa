// A mapper's spill file: the sorted runs that did not fit in its memory budget, appended one
// after another and read back in pieces when reducers ask for them.
//
// The file is created unlinked (O_TMPFILE) in the spill directory, so it is gone when the
// process is, however it ends: a killed job leaves no spill behind. Every failure names the
// directory and the OS error.
//
// Runs are written past the page cache (DirectFileWriter on a second, O_DIRECT descriptor of
// the same file; each run padded to a 4 KiB block) and read back through the cache: a spilled
// run is written once and read once, and buffered writes of it cost more CPU than the disk's
// own time here (docs/shuffle.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/socket.h"
#include "shuffle/direct_writer.h"

namespace plait::shuffle {

class SpillFile {
 public:
  // Throws when no file can be created in `dir` ("" = $TMPDIR, else /tmp). `direct` false:
  // written through the page cache. `memory_bytes`: the budget its staging buffers come out
  // of (a sixteenth of it, 64 KiB to 8 MiB a buffer; 0: the largest).
  explicit SpillFile(std::string dir, bool direct = true, size_t memory_bytes = 0);
  ~SpillFile();
  // Appends `bytes` at the end (copied: `data` is free on return; a thread writes them);
  // returns the offset they start at.
  uint64_t append(const void* data, size_t bytes);
  // Reads [offset, offset + bytes) into `out` (what was appended is written first); throws
  // when it is past the end.
  void read(uint64_t offset, size_t bytes, void* out) const;
  // The end of the last run appended (without its padding).
  uint64_t size() const { return size_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  net::Fd fd_;  // reads, through the cache
  std::unique_ptr<DirectFileWriter> writer_;
  mutable bool unflushed_ = false;  // appended bytes not yet all in the file
  uint64_t size_ = 0;
};

}  // namespace plait::shuffle
