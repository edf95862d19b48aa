// Zeroed, cache-line aligned memory that does not move: the server's parameter shards, ring
// buffers and optimizer state (registered with the fabric, so their address must not change).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace plait::ps {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    data_.reset(static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded)));
    if (!data_) throw std::bad_alloc();
    std::memset(data_.get(), 0, rounded);
  }
  std::byte* data() const { return data_.get(); }
  size_t size() const { return bytes_; }
  void swap(AlignedBuffer& other) noexcept {
    data_.swap(other.data_);
    std::swap(bytes_, other.bytes_);
  }

 private:
  static constexpr size_t kAlign = 64;
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t bytes_ = 0;
};

}  // namespace plait::ps
