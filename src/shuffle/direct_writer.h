// Appends to a file past the page cache: bytes are copied into aligned staging buffers that a
// thread of the writer's own writes with O_DIRECT, while the caller fills the next one.
//
// Why: a sort writes each byte once and never reads it back, and on the machines we measure
// (a VM) a buffered write costs more CPU than the disk's own time: every page-cache page is
// fresh memory to the host, and copying 4 GB into the cache took 12 CPU seconds of a 16 s sort
// (perf: copy_folio_from_iter_atomic) where O_DIRECT writes the same 4 GB in 2 s. Where the
// file system refuses O_DIRECT (tmpfs), the same thread writes through the cache instead.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/socket.h"

namespace plait::shuffle {

class DirectFileWriter {
 public:
  // Creates (truncates) `path`. `direct` false: buffered writes (the disk started on each
  // piece with sync_file_range), for file systems or users that want the cache.
  explicit DirectFileWriter(std::string path, bool direct = true);
  // `stage_bytes` (a multiple of kAlign) per staging buffer, kStages of them: what the writer
  // holds on top of its caller's memory.
  // Writes into an open file from offset 0 on; `direct`: `fd` was opened with O_DIRECT.
  // `name` is what errors call the file.
  DirectFileWriter(net::Fd fd, std::string name, bool direct,
                   size_t stage_bytes = kStageBytes);
  // Stops the thread; what was handed to it is written, later errors are dropped (close()
  // reports them).
  ~DirectFileWriter();
  DirectFileWriter(const DirectFileWriter&) = delete;
  DirectFileWriter& operator=(const DirectFileWriter&) = delete;

  // Appends; returns once the bytes are copied (a full staging buffer goes to the thread).
  // Throws what an earlier write failed with.
  void append(const void* data, size_t bytes);
  // Everything appended so far is in the file (readable through another descriptor) when it
  // returns. With O_DIRECT what was appended must end on a kAlign boundary (pad it).
  void flush();
  // Writes the rest, waits for the disk (fdatasync) and closes; throws on any failure.
  void close();
  uint64_t bytes() const { return appended_; }
  // Whether O_DIRECT is in use (false where the file system refused it).
  bool direct() const { return direct_; }

  static constexpr size_t kAlign = 4096;
  static constexpr size_t kStageBytes = size_t{8} << 20;
  static constexpr int kStages = 3;

 private:
  struct Stage {
    std::unique_ptr<uint8_t, void (*)(void*)> data{nullptr, nullptr};
    size_t filled = 0;
    uint64_t offset = 0;  // where in the file its first byte goes
  };
  void start();                   // the staging buffers and the thread
  void hand_off(int stage);       // queues `stage` for the thread
  int next_free_stage();          // waits for a stage the thread is done with
  // pwrite it all (on the thread, and in flush() and close() once the thread is idle).
  void write_out(const uint8_t* data, size_t bytes, uint64_t offset);
  void run();                     // the thread
  void rethrow_failure();         // under mu_

  std::string path_;
  net::Fd fd_;
  bool direct_ = true;
  size_t stage_bytes_ = kStageBytes;
  uint64_t appended_ = 0;
  std::vector<Stage> stages_;
  int current_ = 0;  // the stage the caller fills

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> queued_;       // stages full, in file order (under mu_)
  std::vector<bool> busy_;        // queued or being written (under mu_)
  bool stopping_ = false;         // under mu_
  std::exception_ptr failure_;    // under mu_
  std::thread thread_;
};

}  // namespace plait::shuffle
