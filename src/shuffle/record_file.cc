#include "shuffle/record_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "plait/error.h"
#include "shuffle/gensort.h"

namespace plait::shuffle {

namespace {
// Reads smaller than this (samples, single records) go through the cache.
constexpr size_t kDirectReadMin = size_t{1} << 20;
}  // namespace

void full_io(bool writing, int fd, uint8_t* buf, size_t len, uint64_t offset,
             const std::string& path) {
  while (len > 0) {
    const ssize_t n = writing ? ::pwrite(fd, buf, len, static_cast<off_t>(offset))
                              : ::pread(fd, buf, len, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw system_error((writing ? "write " : "read ") + path, errno);
    if (n == 0)
      throw invalid_usage(path + ": ended at byte " + std::to_string(offset) +
                          " while it was being read (truncated by someone else?)");
    buf += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

RecordReader::RecordReader(std::string path, bool direct) : path_(std::move(path)) {
  fd_ = net::Fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd_.valid()) throw system_error("open " + path_, errno);
  if (direct) direct_fd_ = net::Fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
  struct stat st{};
  if (::fstat(fd_.get(), &st) != 0) throw system_error("stat " + path_, errno);
  const auto bytes = static_cast<uint64_t>(st.st_size);
  if (bytes % kRecordBytes != 0)
    throw invalid_usage(path_ + ": " + std::to_string(bytes) +
                        " bytes is not a whole number of " + std::to_string(kRecordBytes) +
                        "-byte records");
  records_ = bytes / kRecordBytes;
}

size_t RecordReader::read(uint8_t* out, size_t max_records) {
  const size_t n = static_cast<size_t>(std::min<uint64_t>(max_records, records_ - position_));
  read_at(position_, n, out);
  position_ += n;
  return n;
}

void RecordReader::read_at(uint64_t first, size_t count, uint8_t* out) const {
  if (first + count > records_)
    throw invalid_usage(path_ + ": records " + std::to_string(first) + ".." +
                        std::to_string(first + count) + " asked of " +
                        std::to_string(records_));
  const size_t bytes = count * kRecordBytes;
  if (direct_fd_.valid() && bytes >= kDirectReadMin)
    read_direct(first * kRecordBytes, bytes, out);
  else
    full_io(false, fd_.get(), out, bytes, first * kRecordBytes, path_);
}

void RecordReader::read_direct(uint64_t offset, size_t bytes, uint8_t* out) const {
  constexpr size_t kAlign = DirectFileWriter::kAlign, kBounce = size_t{8} << 20;
  if (!bounce_) {
    void* p = std::aligned_alloc(kAlign, kBounce);
    if (!p) throw system_error("allocating a read buffer for " + path_, ENOMEM);
    bounce_ = {static_cast<uint8_t*>(p), &std::free};
  }
  while (bytes > 0) {
    const uint64_t start = offset / kAlign * kAlign;
    const size_t skip = static_cast<size_t>(offset - start);
    const size_t want = std::min(kBounce, (skip + bytes + kAlign - 1) / kAlign * kAlign);
    const ssize_t n = ::pread(direct_fd_.get(), bounce_.get(), want, static_cast<off_t>(start));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw system_error("read " + path_, errno);
    if (static_cast<size_t>(n) <= skip)
      throw invalid_usage(path_ + ": ended at byte " + std::to_string(start + n) +
                          " while it was being read (truncated by someone else?)");
    const size_t got = std::min(static_cast<size_t>(n) - skip, bytes);
    std::memcpy(out, bounce_.get() + skip, got);
    out += got;
    offset += got;
    bytes -= got;
  }
}

RecordWriter::RecordWriter(std::string path, bool direct)
    : file_(std::make_unique<DirectFileWriter>(std::move(path), direct)) {}

void RecordWriter::write(const uint8_t* records, size_t count) {
  file_->append(records, count * kRecordBytes);
  records_ += count;
}

void RecordWriter::close() { file_->close(); }

}  // namespace plait::shuffle
