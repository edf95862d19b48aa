#include "shuffle/direct_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "plait/error.h"
#include "shuffle/record_file.h"

namespace plait::shuffle {

DirectFileWriter::DirectFileWriter(std::string path, bool direct)
    : path_(std::move(path)), direct_(direct), busy_(kStages, false) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  int fd = direct_ ? ::open(path_.c_str(), kFlags | O_DIRECT, 0644) : -1;
  if (fd < 0) {
    if (direct_ && errno != EINVAL) throw system_error("create " + path_, errno);
    direct_ = false;  // EINVAL: this file system has no O_DIRECT (tmpfs)
    fd = ::open(path_.c_str(), kFlags, 0644);
    if (fd < 0) throw system_error("create " + path_, errno);
  }
  fd_ = net::Fd(fd);
  start();
}

DirectFileWriter::DirectFileWriter(net::Fd fd, std::string name, bool direct, size_t stage_bytes)
    : path_(std::move(name)),
      fd_(std::move(fd)),
      direct_(direct),
      stage_bytes_(std::max(kAlign, stage_bytes / kAlign * kAlign)),
      busy_(kStages, false) {
  start();
}

void DirectFileWriter::start() {
  stages_.resize(kStages);
  for (Stage& s : stages_) {
    void* p = std::aligned_alloc(kAlign, stage_bytes_);
    if (!p) throw system_error("allocating the staging buffers of " + path_, ENOMEM);
    s.data = {static_cast<uint8_t*>(p), &std::free};
  }
  thread_ = std::thread([this] { run(); });
}

DirectFileWriter::~DirectFileWriter() {
  if (thread_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
}

void DirectFileWriter::append(const void* data, size_t bytes) {
  const auto* from = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    Stage& s = stages_[current_];
    const size_t n = std::min(bytes, stage_bytes_ - s.filled);
    std::memcpy(s.data.get() + s.filled, from, n);
    s.filled += n;
    appended_ += n;
    from += n;
    bytes -= n;
    if (s.filled == stage_bytes_) {
      hand_off(current_);
      current_ = next_free_stage();
    }
  }
}

void DirectFileWriter::hand_off(int stage) {
  {
    std::lock_guard lock(mu_);
    busy_[stage] = true;
    queued_.push_back(stage);
  }
  cv_.notify_all();
}

int DirectFileWriter::next_free_stage() {
  std::unique_lock lock(mu_);
  int free = -1;
  cv_.wait(lock, [&] {
    for (int i = 0; i < kStages && free < 0; ++i)
      if (!busy_[i]) free = i;
    return free >= 0 || failure_;
  });
  rethrow_failure();
  stages_[free].filled = 0;
  stages_[free].offset = appended_;
  return free;
}

void DirectFileWriter::rethrow_failure() {
  if (failure_) std::rethrow_exception(failure_);
}

void DirectFileWriter::write_out(const uint8_t* data, size_t bytes, uint64_t offset) {
  full_io(true, fd_.get(), const_cast<uint8_t*>(data), bytes, offset, path_);
  // Buffered: the disk starts on these bytes now, not all at close().
  if (!direct_ && bytes > 0)
    (void)::sync_file_range(fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(bytes),
                            SYNC_FILE_RANGE_WRITE);
}

void DirectFileWriter::run() {
  for (;;) {
    int stage = -1;
    bool skip = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !queued_.empty() || stopping_; });
      if (queued_.empty()) return;  // stopping, and everything handed over is written
      stage = queued_.front();
      queued_.erase(queued_.begin());
      skip = failure_ != nullptr;  // after a failure nothing more is written
    }
    std::exception_ptr failed;
    if (!skip) try {
        const Stage& s = stages_[stage];
        write_out(s.data.get(), s.filled, s.offset);
      } catch (...) {
        failed = std::current_exception();
      }
    {
      std::lock_guard lock(mu_);
      if (failed && !failure_) failure_ = failed;
      busy_[stage] = false;
    }
    cv_.notify_all();
  }
}

void DirectFileWriter::flush() {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] {
      return queued_.empty() && std::find(busy_.begin(), busy_.end(), true) == busy_.end();
    });
    rethrow_failure();
  }
  Stage& s = stages_[current_];
  if (s.filled == 0) return;
  if (direct_ && s.filled % kAlign != 0)
    throw invalid_usage("flushing " + path_ + " at " + std::to_string(appended_) +
                        " bytes, not a multiple of " + std::to_string(kAlign) + " (O_DIRECT)");
  write_out(s.data.get(), s.filled, s.offset);
  s.filled = 0;
  s.offset = appended_;
}

void DirectFileWriter::close() {
  if (!fd_.valid()) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();  // every full stage is written (or failed)
  rethrow_failure();
  // The last stage: its aligned part directly, the tail (under one block) through the cache.
  const Stage& s = stages_[current_];
  const size_t aligned = direct_ ? s.filled / kAlign * kAlign : s.filled;
  write_out(s.data.get(), aligned, s.offset);
  if (aligned < s.filled) {
    const int flags = ::fcntl(fd_.get(), F_GETFL);
    if (flags < 0 || ::fcntl(fd_.get(), F_SETFL, flags & ~O_DIRECT) != 0)
      throw system_error("write " + path_ + " (leaving O_DIRECT for its last bytes)", errno);
    direct_ = false;
    write_out(s.data.get() + aligned, s.filled - aligned, s.offset + aligned);
  }
  if (::fdatasync(fd_.get()) != 0) throw system_error("sync " + path_, errno);
  if (::close(fd_.release()) != 0) throw system_error("close " + path_, errno);
}

}  // namespace plait::shuffle
