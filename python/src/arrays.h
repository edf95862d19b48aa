// Python buffers as plait sees them: a pinned, C-contiguous view of any buffer-protocol
// object (NumPy arrays, bytearray, memoryview, array.array) with its plait DataType. The view
// is held until the operation that uses it completes, so the memory cannot move or go away
// under the transport.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>

#include "plait/types.h"

namespace plait::python {

class BufferView {
 public:
  // Throws plait::Error(kInvalidUsage) for a non-contiguous buffer, a read-only one where
  // `writable`, or an element type plait has no DataType for.
  BufferView(pybind11::handle object, bool writable, const char* what);
  ~BufferView();
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;

  void* data() const { return view_.buf; }
  size_t count() const { return count_; }
  DataType dtype() const { return dtype_; }

 private:
  Py_buffer view_{};
  size_t count_ = 0;
  DataType dtype_ = DataType::kU8;
};

using BufferRef = std::shared_ptr<BufferView>;

// Parses "sum", "prod", "min", "max", "avg".
ReduceOp parse_op(const std::string& name);

}  // namespace plait::python
