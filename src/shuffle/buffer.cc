#include <sys/mman.h>

#include <cerrno>
#include <string>
#include <utility>

#include "plait/error.h"
#include "plait/shuffle.h"

namespace plait::shuffle {

Buffer::Buffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  mapped_ = bytes;
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw system_error("allocating " + std::to_string(bytes) + " bytes for records", errno);
  data_ = static_cast<uint8_t*>(p);
}

Buffer::~Buffer() {
  if (data_) ::munmap(data_, mapped_);
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, mapped_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

}  // namespace plait::shuffle
