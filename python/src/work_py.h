// Work handles as Python sees them, and what keeps their buffers alive: a buffer stays pinned
// until its operation is done, also when Python drops the Work object first
// (`comm.allreduce(a)` without keeping the Work, then `del a`), since the transport may still
// be writing into it.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "arrays.h"
#include "plait/communicator.h"

namespace plait::python {

std::chrono::milliseconds to_ms(double seconds);

// The operations of one communicator wrapper whose Work object Python dropped before they
// were done, with the buffers they still use. Shared by the wrapper and its Works (never
// global: communicators do not hold each other's buffers). Used only with the GIL held, which
// also guards it: PyBuffer_Release needs the GIL anyway.
class InFlight {
 public:
  void adopt(WorkPtr work, std::vector<BufferRef> buffers);
  // Lets go of the buffers of every operation that is done. Called on each call into the
  // communicator and after each wait/test, so finished work does not pin memory for long.
  void reap();
  // Called once the C++ communicator is gone: its engine has cancelled whatever was pending
  // in the transport and failed it (comm_engine.cc), so every buffer can go. Releases the
  // GIL while it waits for an operation that is still finishing.
  void close();
  bool closed() const { return closed_; }

 private:
  struct Entry {
    WorkPtr work;
    std::vector<BufferRef> buffers;
  };
  std::vector<Entry> entries_;
  bool closed_ = false;
};

// Buffers whose operation never reported done: pinned for the rest of the process, because
// releasing them could let the transport write into freed memory.
void keep_forever(std::vector<BufferRef> buffers);

class PyWork {
 public:
  PyWork(WorkPtr work, std::vector<BufferRef> buffers, std::shared_ptr<InFlight> in_flight);
  PyWork(PyWork&&) = default;
  PyWork& operator=(PyWork&&) = delete;
  // Hands the buffers of an unfinished operation to the communicator's InFlight instead of
  // releasing them; never waits.
  ~PyWork();

  void wait(std::optional<double> timeout_s);
  bool test();
  const Work& work() const { return *work_; }

 private:
  // After a wait or test: once done, the buffers can go now rather than with this object.
  void settle();

  WorkPtr work_;
  std::vector<BufferRef> buffers_;
  std::shared_ptr<InFlight> in_flight_;
};

}  // namespace plait::python
