#include "shuffle/spill_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "plait/error.h"
#include "shuffle/record_file.h"

namespace plait::shuffle {

SpillFile::SpillFile(std::string dir) : dir_(std::move(dir)) {
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
}

uint64_t SpillFile::append(const void* data, size_t bytes) {
  const uint64_t start = size_;
  full_io(true, fd_.get(), static_cast<uint8_t*>(const_cast<void*>(data)), bytes, start,
          "the spill file in " + dir_);
  size_ += bytes;
  if (bytes > 0)
    ::sync_file_range(fd_.get(), static_cast<off_t>(start), static_cast<off_t>(bytes),
                      SYNC_FILE_RANGE_WRITE);
  return start;
}

void SpillFile::read(uint64_t offset, size_t bytes, void* out) const {
  if (offset > size_ || bytes > size_ - offset)
    throw invalid_usage("reading " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                            " of a spill file of " + std::to_string(size_),
                        {.op = "shuffle spill"});
  full_io(false, fd_.get(), static_cast<uint8_t*>(out), bytes, offset, "the spill file in " + dir_);
}

}  // namespace plait::shuffle
