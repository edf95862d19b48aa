#include "shuffle/spill_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "plait/error.h"
#include "shuffle/record_file.h"

namespace plait::shuffle {

SpillFile::SpillFile(std::string dir, bool direct, size_t memory_bytes) : dir_(std::move(dir)) {
  if (dir_.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    dir_ = tmp && *tmp ? tmp : "/tmp";
  }
  int fd = ::open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR)) {
    // A file system without O_TMPFILE: a named file, unlinked at once.
    std::string path = dir_ + "/plait-spill.XXXXXX";
    std::vector<char> name(path.begin(), path.end());
    name.push_back('\0');
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.data());
  }
  if (fd < 0) throw system_error("creating a spill file in " + dir_, errno, {.op = "shuffle spill"});
  fd_ = net::Fd(fd);
  // A second open file description of the same (unlinked) file, for O_DIRECT writes: the
  // flag belongs to the description, and reads of any offset stay on the first.
  const std::string self = "/proc/self/fd/" + std::to_string(fd_.get());
  int wfd = direct ? ::open(self.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC) : -1;
  const bool is_direct = wfd >= 0;
  if (wfd < 0) wfd = ::dup(fd_.get());  // no O_DIRECT there (or not asked): the cache
  if (wfd < 0) throw system_error("opening the spill file in " + dir_ + " for writing", errno,
                                  {.op = "shuffle spill"});
  const size_t stage = memory_bytes == 0 ? DirectFileWriter::kStageBytes
                                          : std::clamp(memory_bytes / 16, size_t{64} << 10,
                                                       DirectFileWriter::kStageBytes);
  writer_ = std::make_unique<DirectFileWriter>(net::Fd(wfd), "the spill file in " + dir_,
                                               is_direct, stage);
}

SpillFile::~SpillFile() = default;

uint64_t SpillFile::append(const void* data, size_t bytes) {
  const uint64_t start = writer_->bytes();  // after the last run's padding
  writer_->append(data, bytes);
  // The next run starts on a block: O_DIRECT writes whole blocks, and a flush may come
  // between any two runs.
  static const std::vector<uint8_t> zeros(DirectFileWriter::kAlign, 0);
  const size_t pad = (DirectFileWriter::kAlign - bytes % DirectFileWriter::kAlign) % DirectFileWriter::kAlign;
  if (writer_->direct() && pad > 0) writer_->append(zeros.data(), pad);
  size_ = start + bytes;
  unflushed_ = unflushed_ || bytes > 0;
  return start;
}

void SpillFile::read(uint64_t offset, size_t bytes, void* out) const {
  if (offset > size_ || bytes > size_ - offset)
    throw invalid_usage("reading " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                            " of a spill file of " + std::to_string(size_),
                        {.op = "shuffle spill"});
  if (unflushed_) {
    writer_->flush();
    unflushed_ = false;
  }
  full_io(false, fd_.get(), static_cast<uint8_t*>(out), bytes, offset, "the spill file in " + dir_);
}

}  // namespace plait::shuffle
