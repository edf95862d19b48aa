// plait._plait.Shuffle: the shuffle (plait/shuffle.h) on Python buffers of fixed-size
// records. The pure-Python front (plait/shuffle.py) turns NumPy arrays of any dtype into
// the byte view taken here and the received bytes back into the caller's dtype.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "plait/error.h"
#include "plait/shuffle.h"
#include "rdma_py.h"

namespace py = pybind11;

namespace plait::python {

namespace {

class PyShuffle {
 public:
  PyShuffle(PyFabric& fabric, size_t record_bytes, const std::string& mode)
      : fabric_(fabric.raw()), record_bytes_(record_bytes) {
    if (mode != "pull" && mode != "push") throw invalid_usage("mode is pull or push, not '" + mode + "'");
    if (record_bytes == 0) throw invalid_usage("record_bytes must be positive");
    shuffle_ = std::make_unique<shuffle::Shuffle>(
        fabric_, shuffle::ShuffleOptions{.record_bytes = record_bytes,
                                         .mode = mode == "push" ? shuffle::ShuffleMode::kPush
                                                                : shuffle::ShuffleMode::kPull});
  }

  // records: bytes of whole records; partitions: one int32 per record.
  py::array_t<uint8_t> exchange(py::object records, py::object partitions) {
    BufferView data(records, false, "records");
    BufferView parts(partitions, false, "partitions");
    if (data.dtype() != DataType::kU8 && data.dtype() != DataType::kI8)
      throw invalid_usage("records must be a byte buffer (uint8); plait.shuffle views arrays so");
    const size_t bytes = data.count();
    if (bytes % record_bytes_ != 0)
      throw invalid_usage(std::to_string(bytes) + " bytes of records is not a whole number of " +
                          std::to_string(record_bytes_) + "-byte records");
    const size_t count = bytes / record_bytes_;
    if (parts.dtype() != DataType::kI32 || parts.count() != count)
      throw invalid_usage("partitions must be " + std::to_string(count) +
                          " int32 values, one per record");
    auto* out = new shuffle::Buffer();
    py::capsule owner(out, [](void* p) { delete static_cast<shuffle::Buffer*>(p); });
    {
      py::gil_scoped_release nogil;
      const auto* base = static_cast<const uint8_t*>(data.data());
      const auto* dest = static_cast<const int32_t*>(parts.data());
      const size_t rb = record_bytes_;
      shuffle_->map(base, count, [&](const uint8_t* r) { return dest[(r - base) / rb]; });
      *out = shuffle_->exchange();
    }
    static uint8_t empty[1];  // NumPy wants an address even for no bytes
    return py::array_t<uint8_t>({static_cast<py::ssize_t>(out->size())}, {1},
                                out->empty() ? empty : out->data(), owner);
  }

  py::dict stats() const {
    const shuffle::ShuffleStats& s = shuffle_->stats();
    py::dict d;
    d["map_s"] = s.map_s;
    d["exchange_s"] = s.exchange_s;
    d["records_mapped"] = s.records_mapped;
    d["records_received"] = s.records_received;
    d["bytes_sent"] = s.bytes_sent;
    d["bytes_received"] = s.bytes_received;
    return d;
  }

 private:
  rdma::Fabric& fabric_;
  size_t record_bytes_;
  std::unique_ptr<shuffle::Shuffle> shuffle_;
};

}  // namespace

void register_shuffle(py::module_& m) {
  py::class_<PyShuffle>(m, "Shuffle",
                        "The shuffle of plait/shuffle.h on byte buffers of fixed-size records; "
                        "use plait.shuffle.Shuffle.")
      .def(py::init<PyFabric&, size_t, const std::string&>(), py::arg("fabric"),
           py::arg("record_bytes"), py::arg("mode") = "pull", py::keep_alive<1, 2>())
      .def("exchange", &PyShuffle::exchange, py::arg("records"), py::arg("partitions"),
           "Collective: sends record i to rank partitions[i]; returns the bytes of every record "
           "sent to this rank, mapper 0's first, each mapper's in its order.")
      .def("stats", &PyShuffle::stats);
}

}  // namespace plait::python
