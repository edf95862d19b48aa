// plait.compress: the compressors (plait/compress.h) and the compressed allreduce
// (plait/compressed_allreduce.h) on Python buffers of float32. Other element types are an
// InvalidUsageError naming the call; so are parameters out of range.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "arrays.h"
#include "communicator_py.h"
#include "plait/compress.h"
#include "plait/compress_auto.h"
#include "plait/compressed_allreduce.h"
#include "compress/power_sgd.h"

namespace py = pybind11;

namespace plait::python {
namespace {

std::shared_ptr<BufferView> floats(py::handle object, bool writable, const char* what, const char* op) {
  auto view = std::make_shared<BufferView>(object, writable, what);
  if (view->dtype() != DataType::kF32)
    throw invalid_usage(std::string(what) + " holds " + std::string(to_string(view->dtype())) +
                            "; compression takes float32 values",
                        {.op = op});
  return view;
}

py::dict stats_dict(const compress::AllreduceStats& st) {
  py::dict out;
  out["path"] = st.path;
  out["wire_bytes"] = st.wire_bytes;
  out["compress_seconds"] = st.compress_seconds;
  out["communicate_seconds"] = st.communicate_seconds;
  out["decompress_seconds"] = st.decompress_seconds;
  return out;
}

compress::Params params_of(int levels, size_t chunk, double ratio, size_t k, float threshold, int rank, size_t rows,
                           uint64_t seed) {
  return {.levels = levels, .chunk = chunk, .ratio = ratio, .k = k, .threshold = threshold, .rank = rank,
          .rows = rows, .seed = seed};
}

class PyCompressor {
 public:
  PyCompressor(const std::string& method, int levels, size_t chunk, double ratio, size_t k,
               float threshold, int rank, size_t rows, uint64_t seed)
      : c_(compress::Compressor::create(compress::parse_method(method),
                                        params_of(levels, chunk, ratio, k, threshold, rank, rows, seed))) {}

  std::string method() const { return std::string(compress::to_string(c_->method())); }
  size_t max_wire_bytes(size_t count) const { return c_->max_wire_bytes(count); }

  size_t compress(py::handle data, py::handle wire, compress::State* state) const {
    auto in = floats(data, false, "data", "compress");
    BufferView out(wire, true, "wire");
    if (static_cast<size_t>(out.count()) * dtype_size(out.dtype()) < c_->max_wire_bytes(in->count()))
      throw invalid_usage("wire has room for " + std::to_string(out.count() * dtype_size(out.dtype())) +
                              " bytes; " + std::to_string(c_->max_wire_bytes(in->count())) + " needed",
                          {.op = "compress"});
    py::gil_scoped_release nogil;
    return c_->compress(static_cast<const float*>(in->data()), in->count(), static_cast<std::byte*>(out.data()),
                        state);
  }

  void decompress(py::handle wire, size_t bytes, py::handle out, bool accumulate) const {
    BufferView w(wire, false, "wire");
    auto o = floats(out, true, "out", "decompress");
    if (bytes > w.count() * dtype_size(w.dtype()))
      throw invalid_usage("nbytes " + std::to_string(bytes) + " is more than the wire holds", {.op = "decompress"});
    py::gil_scoped_release nogil;
    c_->decompress(static_cast<const std::byte*>(w.data()), bytes, static_cast<float*>(o->data()), o->count(),
                   accumulate);
  }

  py::dict allreduce(PyCommunicator& comm, py::handle data, compress::State* state, bool average) const {
    auto d = floats(data, true, "data", "compressed allreduce");
    compress::AllreduceStats st;
    {
      py::gil_scoped_release nogil;
      st = compress::allreduce(comm.native(), static_cast<float*>(d->data()), d->count(), *c_, state, average);
    }
    return stats_dict(st);
  }

 private:
  std::unique_ptr<compress::Compressor> c_;
};

// compress::AutoCompression: measured when made (collective), then the cheapest path per size.
class PyAutoCompression {
 public:
  PyAutoCompression(PyCommunicator& comm, const std::vector<std::string>& candidates, const std::string& force,
                    int levels, size_t chunk, double ratio, size_t k, float threshold, int rank, size_t rows,
                    uint64_t seed) {
    compress::AutoOptions options;
    options.candidates.clear();
    for (const std::string& name : candidates) options.candidates.push_back(compress::parse_method(name));
    options.params = params_of(levels, chunk, ratio, k, threshold, rank, rows, seed);
    options.force = force;
    py::gil_scoped_release nogil;
    auto_ = std::make_unique<compress::AutoCompression>(compress::AutoCompression::measure(comm.native(), options));
  }

  std::string choose(size_t count) const {
    const auto m = auto_->choose(count);
    return m ? std::string(compress::to_string(*m)) : "none";
  }
  double predict(const std::string& method, size_t count) const {
    return auto_->predict(method == "none" ? std::nullopt : std::optional(compress::parse_method(method)), count);
  }
  double alpha_seconds() const { return auto_->alpha_seconds(); }
  double bytes_per_second() const { return auto_->bytes_per_second(); }

  py::dict allreduce(PyCommunicator& comm, py::handle data, compress::State* state, bool average) const {
    auto d = floats(data, true, "data", "compress auto allreduce");
    compress::AllreduceStats st;
    {
      py::gil_scoped_release nogil;
      st = auto_->allreduce(comm.native(), static_cast<float*>(d->data()), d->count(), state, average);
    }
    return stats_dict(st);
  }

 private:
  std::unique_ptr<compress::AutoCompression> auto_;
};

// PowerSGD's steps on float32 buffers, for a schedule that runs its collectives elsewhere
// (the DDP hooks, on any process group's all_reduce).
class PyPowerSgdSteps {
 public:
  PyPowerSgdSteps(size_t count, int rank, size_t rows) : count_(count) {
    if (rank < 1) throw invalid_usage("rank " + std::to_string(rank) + " (at least 1)", {.op = "powersgd"});
    compress::Params p;
    p.rank = rank;
    p.rows = rows;
    shape_ = compress::detail::power_sgd_shape(p, count);
  }
  size_t rows() const { return shape_.rows; }
  size_t cols() const { return shape_.cols; }
  size_t rank() const { return shape_.rank; }

  void initial_q(py::handle qt, uint64_t seed) const {
    auto q = sized(qt, shape_.q_values(), true, "q");
    compress::detail::power_sgd_initial_q(static_cast<float*>(q->data()), shape_, seed);
  }
  // p = (M Q)^T; with `add`, first m += add (error feedback) in the same pass over m.
  void mq(py::handle m, py::handle qt, py::handle pt, py::object add) const {
    const bool adding = !add.is_none();
    auto mm = sized(m, count_, adding, "m"), q = sized(qt, shape_.q_values(), false, "q"),
         p = sized(pt, shape_.p_values(), true, "p");
    auto x = adding ? sized(add, count_, false, "add") : nullptr;
    py::gil_scoped_release nogil;
    if (adding)
      compress::detail::power_sgd_add_mq(static_cast<float*>(mm->data()), static_cast<const float*>(x->data()),
                                         count_, shape_, static_cast<const float*>(q->data()),
                                         static_cast<float*>(p->data()));
    else
      compress::detail::power_sgd_mq(static_cast<const float*>(mm->data()), count_, shape_,
                                     static_cast<const float*>(q->data()), static_cast<float*>(p->data()));
  }
  void orthonormalize(py::handle pt) const {
    auto p = sized(pt, shape_.p_values(), true, "p");
    py::gil_scoped_release nogil;
    compress::detail::power_sgd_orthonormalize(static_cast<float*>(p->data()), shape_);
  }
  void mtp(py::handle m, py::handle pt, py::handle qt) const {
    auto mm = sized(m, count_, false, "m"), p = sized(pt, shape_.p_values(), false, "p"),
         q = sized(qt, shape_.q_values(), true, "q");
    py::gil_scoped_release nogil;
    compress::detail::power_sgd_mtp(static_cast<const float*>(mm->data()), count_, shape_,
                                    static_cast<const float*>(p->data()), static_cast<float*>(q->data()));
  }
  // out = P Q^T, or out -= P Q^T with subtract; with `residual`, out = P Q^T and residual -= out.
  void reconstruct(py::handle pt, py::handle qt, py::handle out, bool subtract, py::object residual) const {
    auto p = sized(pt, shape_.p_values(), false, "p"), q = sized(qt, shape_.q_values(), false, "q"),
         o = sized(out, count_, true, "out");
    if (!residual.is_none()) {
      if (subtract) throw invalid_usage("reconstruct takes subtract or residual, not both", {.op = "powersgd"});
      auto r = sized(residual, count_, true, "residual");
      py::gil_scoped_release nogil;
      compress::detail::power_sgd_reconstruct_residual(static_cast<const float*>(p->data()),
                                                       static_cast<const float*>(q->data()), shape_,
                                                       static_cast<float*>(o->data()), static_cast<float*>(r->data()),
                                                       count_);
      return;
    }
    py::gil_scoped_release nogil;
    compress::detail::power_sgd_reconstruct(static_cast<const float*>(p->data()), static_cast<const float*>(q->data()),
                                            shape_, static_cast<float*>(o->data()), count_, false, subtract);
  }

 private:
  std::shared_ptr<BufferView> sized(py::handle a, size_t want, bool writable, const char* what) const {
    auto v = floats(a, writable, what, "powersgd");
    if (v->count() != want)
      throw invalid_usage(std::string(what) + " holds " + std::to_string(v->count()) + " values, not " +
                              std::to_string(want),
                          {.op = "powersgd"});
    return v;
  }
  size_t count_;
  compress::detail::PowerSgdShape shape_;
};

}  // namespace

void register_compress(py::module_& m) {
  py::class_<PyPowerSgdSteps>(m, "PowerSgdSteps",
                              "PowerSGD's steps for `count` values as a rows x cols matrix, P and Q "
                              "kept transposed (rank x rows, rank x cols float32).")
      .def(py::init<size_t, int, size_t>(), py::arg("count"), py::arg("rank"), py::arg("rows") = 0)
      .def_property_readonly("rows", &PyPowerSgdSteps::rows)
      .def_property_readonly("cols", &PyPowerSgdSteps::cols)
      .def_property_readonly("rank", &PyPowerSgdSteps::rank)
      .def("initial_q", &PyPowerSgdSteps::initial_q, py::arg("q"), py::arg("seed"))
      .def("mq", &PyPowerSgdSteps::mq, py::arg("m"), py::arg("q"), py::arg("p"), py::arg("add") = py::none())
      .def("orthonormalize", &PyPowerSgdSteps::orthonormalize, py::arg("p"))
      .def("mtp", &PyPowerSgdSteps::mtp, py::arg("m"), py::arg("p"), py::arg("q"))
      .def("reconstruct", &PyPowerSgdSteps::reconstruct, py::arg("p"), py::arg("q"), py::arg("out"),
           py::arg("subtract") = false, py::arg("residual") = py::none());
  py::class_<compress::State>(m, "CompressState",
                              "Per-tensor state: the error-feedback residual, PowerSGD's Q, a call count.")
      .def(py::init<>())
      .def_readonly("calls", &compress::State::calls)
      .def_property_readonly("residual", [](const compress::State& s) { return s.residual; },
                             "A copy of the residual (empty before the first call).")
      .def(py::init([](std::vector<float> residual, uint64_t calls) {
             compress::State st;
             st.residual = std::move(residual);
             st.calls = calls;
             return st;
           }),
           py::arg("residual"), py::arg("calls"),
           "A state resumed from a checkpoint (plait.torch.hooks' HookState.load_state_dict).");
  py::class_<PyCompressor>(m, "Compressor", "A gradient compressor (plait/compress.h) on float32 buffers.")
      .def(py::init<const std::string&, int, size_t, double, size_t, float, int, size_t, uint64_t>(),
           py::arg("method"), py::arg("levels") = 127, py::arg("chunk") = 1024, py::arg("ratio") = 0.01,
           py::arg("k") = 0, py::arg("threshold") = 0.0f, py::arg("rank") = 4, py::arg("rows") = 0,
           py::arg("seed") = 0x706c616974ull)
      .def_property_readonly("method", &PyCompressor::method)
      .def("max_wire_bytes", &PyCompressor::max_wire_bytes, py::arg("count"))
      .def("compress", &PyCompressor::compress, py::arg("data"), py::arg("wire"), py::arg("state") = nullptr,
           "Compresses data into wire (max_wire_bytes(len) bytes of room); returns the bytes written.")
      .def("decompress", &PyCompressor::decompress, py::arg("wire"), py::arg("nbytes"), py::arg("out"),
           py::arg("accumulate") = false)
      .def("allreduce", &PyCompressor::allreduce, py::arg("comm"), py::arg("data"), py::arg("state") = nullptr,
           py::arg("average") = true,
           "Collective: data (in place) becomes every rank's compressed values reduced; returns the stats.");
  py::class_<PyAutoCompression>(m, "AutoCompression",
                                "compress::AutoCompression: the link and the candidates measured when made "
                                "(collective), then per size the path with the least predicted time.")
      .def(py::init<PyCommunicator&, const std::vector<std::string>&, const std::string&, int, size_t, double, size_t,
                    float, int, size_t, uint64_t>(),
           py::arg("comm"), py::arg("candidates"), py::arg("force") = "", py::arg("levels") = 127,
           py::arg("chunk") = 1024, py::arg("ratio") = 0.01, py::arg("k") = 0, py::arg("threshold") = 0.0f,
           py::arg("rank") = 4, py::arg("rows") = 0, py::arg("seed") = 0x706c616974ull)
      .def("choose", &PyAutoCompression::choose, py::arg("count"), "The method for count values, or \"none\".")
      .def("predict", &PyAutoCompression::predict, py::arg("method"), py::arg("count"),
           "Predicted seconds for count values by method (\"none\": uncompressed).")
      .def_property_readonly("alpha_seconds", &PyAutoCompression::alpha_seconds)
      .def_property_readonly("bytes_per_second", &PyAutoCompression::bytes_per_second)
      .def("allreduce", &PyAutoCompression::allreduce, py::arg("comm"), py::arg("data"), py::arg("state") = nullptr,
           py::arg("average") = true, "Collective: data (in place) moved by choose(len(data)); returns the stats.");
}

}  // namespace plait::python
