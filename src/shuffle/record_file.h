// Files of 100-byte records: read and written in whole records, every failure a plait::Error
// naming the file and the OS error (a short read or write is retried, never taken for the end).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/socket.h"
#include "shuffle/direct_writer.h"

namespace plait::shuffle {

// pread (writing false) or pwrite until `len` bytes moved at `offset`, retried on EINTR and
// short counts; a failure or an early end throws, naming `path`.
void full_io(bool writing, int fd, uint8_t* buf, size_t len, uint64_t offset, const std::string& path);

class RecordReader {
 public:
  // Throws when the file cannot be opened or its length is not a whole number of records.
  // `direct`: reads of 1 MiB and more go past the page cache (O_DIRECT, through an aligned
  // bounce buffer), where the file system has it: a sort reads its input once, and filling
  // the cache with it costs more CPU here than the disk's own time (docs/shuffle.md).
  explicit RecordReader(std::string path, bool direct = true);
  uint64_t records() const { return records_; }
  // Reads up to `max_records` whole records; 0 at the end.
  size_t read(uint8_t* out, size_t max_records);
  // Reads records [first, first + count) into out (pread; the position of read() is kept).
  void read_at(uint64_t first, size_t count, uint8_t* out) const;
  const std::string& path() const { return path_; }

 private:
  void read_direct(uint64_t offset, size_t bytes, uint8_t* out) const;

  std::string path_;
  net::Fd fd_;
  net::Fd direct_fd_;  // invalid: no O_DIRECT
  mutable std::unique_ptr<uint8_t, void (*)(void*)> bounce_{nullptr, nullptr};
  uint64_t records_ = 0;
  uint64_t position_ = 0;  // records read so far
};

class RecordWriter {
 public:
  // Creates (truncates) the file. `direct`: written past the page cache (DirectFileWriter);
  // false, or a file system without O_DIRECT: through it.
  explicit RecordWriter(std::string path, bool direct = true);
  // Appends (copied: the caller's buffer is free on return); a thread writes while the
  // caller goes on, close() waits for all.
  void write(const uint8_t* records, size_t count);
  // Flushes to the disk and closes; a writer destroyed without close() leaves a file with
  // what it had handed to its thread (not the last, partly filled staging buffer).
  void close();
  uint64_t records() const { return records_; }

 private:
  std::unique_ptr<DirectFileWriter> file_;
  uint64_t records_ = 0;
};

}  // namespace plait::shuffle
