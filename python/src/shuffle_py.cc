// plait._plait.Shuffle: the shuffle (plait/shuffle.h) on Python buffers of fixed-size
// records. The pure-Python front (plait/shuffle.py) turns NumPy arrays of any dtype into
// the byte view taken here and the received bytes back into the caller's dtype.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <deque>
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
  PyShuffle(PyFabric& fabric, size_t record_bytes, const std::string& mode, size_t key_bytes,
            size_t memory_bytes, const std::string& spill_dir)
      : fabric_(fabric.raw()), record_bytes_(record_bytes) {
    if (mode != "pull" && mode != "push") throw invalid_usage("mode is pull or push, not '" + mode + "'");
    if (record_bytes == 0) throw invalid_usage("record_bytes must be positive");
    shuffle_ = std::make_unique<shuffle::Shuffle>(
        fabric_, shuffle::ShuffleOptions{.record_bytes = record_bytes,
                                         .mode = mode == "push" ? shuffle::ShuffleMode::kPush
                                                                : shuffle::ShuffleMode::kPull,
                                         .key_bytes = key_bytes,
                                         .memory_bytes = memory_bytes,
                                         .spill_dir = spill_dir});
  }

  // runs[i]: bytes of whole records; partitions[i]: one int32 per record of runs[i]. Each
  // run is mapped on its own (sorted by key, spilled past the budget); then one exchange.
  py::array_t<uint8_t> exchange(const py::list& runs, const py::list& partitions) {
    if (runs.size() != partitions.size())
      throw invalid_usage(std::to_string(runs.size()) + " runs of records but " +
                          std::to_string(partitions.size()) + " arrays of partitions");
    std::deque<BufferView> data, parts;  // held (not movable) until the exchange is done
    for (size_t i = 0; i < runs.size(); ++i) {
      data.emplace_back(runs[i], false, "records");
      parts.emplace_back(partitions[i], false, "partitions");
      if (data[i].dtype() != DataType::kU8 && data[i].dtype() != DataType::kI8)
        throw invalid_usage("records must be a byte buffer (uint8); plait.shuffle views arrays so");
      const size_t bytes = data[i].count();
      if (bytes % record_bytes_ != 0)
        throw invalid_usage(std::to_string(bytes) + " bytes of records is not a whole number of " +
                            std::to_string(record_bytes_) + "-byte records");
      const size_t count = bytes / record_bytes_;
      if (parts[i].dtype() != DataType::kI32 || parts[i].count() != count)
        throw invalid_usage("partitions must be " + std::to_string(count) +
                            " int32 values, one per record");
    }
    auto* out = new shuffle::Buffer();
    py::capsule owner(out, [](void* p) { delete static_cast<shuffle::Buffer*>(p); });
    {
      py::gil_scoped_release nogil;
      const size_t rb = record_bytes_;
      for (size_t i = 0; i < data.size(); ++i) {
        const auto* base = static_cast<const uint8_t*>(data[i].data());
        const auto* dest = static_cast<const int32_t*>(parts[i].data());
        shuffle_->map(base, data[i].count() / rb,
                      [&](const uint8_t* r) { return dest[(r - base) / rb]; });
      }
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
    d["runs_spilled"] = s.runs_spilled;
    d["bytes_spilled"] = s.bytes_spilled;
    d["spill_requests_served"] = s.spill_requests_served;
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
      .def(py::init<PyFabric&, size_t, const std::string&, size_t, size_t, const std::string&>(),
           py::arg("fabric"), py::arg("record_bytes"), py::arg("mode") = "pull",
           py::arg("key_bytes") = 0, py::arg("memory_bytes") = 0, py::arg("spill_dir") = "",
           py::keep_alive<1, 2>())
      .def("exchange", &PyShuffle::exchange, py::arg("runs"), py::arg("partitions"),
           "Collective: maps each run (sends record i of runs[k] to rank partitions[k][i]); "
           "returns the bytes of every record sent to this rank: mapper 0's first, each "
           "mapper's in its order, or with key_bytes merged in key order.")
      .def("stats", &PyShuffle::stats);
}

}  // namespace plait::python
