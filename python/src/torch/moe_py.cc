// plait.torch.moe's native half: a plait::moe::Dispatcher on a plait process group, on torch
// tensors. Every call keeps the tensors it reads and writes alive until it is waited for; the
// outputs are allocated when their size is known, without the GIL.
#include <ATen/ATen.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moe_py.h"
#include "plait/moe.h"
#include "process_group.h"

namespace py = pybind11;

namespace plait::torch_backend {
namespace {

using moe::Path;

DataType row_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DataType::kF32;
    case at::kHalf: return DataType::kF16;
    case at::kBFloat16: return DataType::kBF16;
    default: throw invalid_usage("plait.torch.moe: rows must be float32, float16 or bfloat16");
  }
}
at::ScalarType torch_dtype(DataType t) {
  return t == DataType::kF32 ? at::kFloat : t == DataType::kF16 ? at::kHalf : at::kBFloat16;
}

// A tensor's floats, never null for a defined tensor: the dispatcher reads null as "no
// weights", and an empty tensor's data_ptr() is null.
float* floats_or_null(const at::Tensor& t) {
  static float none[1];
  if (!t.defined()) return nullptr;
  return t.numel() > 0 ? t.data_ptr<float>() : none;
}

struct PyHandle {
  std::shared_ptr<const moe::Handle> handle;
};

// A call in flight and what it holds: its inputs, and its outputs once allocated.
struct PyCall {
  std::shared_ptr<moe::Call> call;
  std::vector<at::Tensor> inputs;
  at::Tensor recv_x, recv_idx, recv_w, out, out_w;
  std::string kind;  // "dispatch", "repeat", "combine"
  bool waited = false;

  py::object wait() {
    if (!waited) {
      py::gil_scoped_release nogil;
      call->wait();
      waited = true;
      inputs.clear();
    }
    if (kind == "dispatch") {
      const auto& per = call->tokens_per_expert();
      at::Tensor counts = at::tensor(std::vector<int64_t>(per.begin(), per.end()), at::kLong);
      return py::make_tuple(recv_x, recv_idx, recv_w, counts, PyHandle{call->handle()});
    }
    if (kind == "repeat") return py::cast(recv_x);
    if (out_w.defined()) return py::make_tuple(out, out_w);
    return py::cast(out);
  }
};

class PyDispatcher {
 public:
  PyDispatcher(const c10::intrusive_ptr<PlaitProcessGroup>& group, int num_experts, int topk,
               size_t hidden, const std::string& dtype, size_t max_tokens, const std::string& path,
               const std::string& name) {
    const at::ScalarType st = dtype == "float32" ? at::kFloat
                              : dtype == "float16" ? at::kHalf
                              : dtype == "bfloat16" ? at::kBFloat16
                                                    : throw invalid_usage("plait.torch.moe: dtype " + dtype +
                                                                          " (float32, float16 or bfloat16)");
    dtype_ = st;
    moe::DispatcherOptions o{.num_experts = num_experts, .topk = topk, .hidden = hidden,
                             .dtype = row_dtype(st), .max_tokens = max_tokens,
                             .path = moe::parse_path(path), .name = name};
    py::gil_scoped_release nogil;
    d_ = std::make_unique<moe::Dispatcher>(group->communicator(), group->bootstrap(), o);
  }

  moe::Dispatcher& live() const {
    if (!d_) throw invalid_usage("plait.torch.moe: the dispatcher was closed");
    return *d_;
  }

  std::shared_ptr<PyCall> dispatch(const at::Tensor& x_in, const at::Tensor& idx_in,
                                   const std::optional<at::Tensor>& w_in, const std::string& path) {
    const auto& o = live().options();
    at::Tensor x = rows(x_in, "x");
    at::Tensor idx = idx_in.contiguous();
    TORCH_CHECK(idx.scalar_type() == at::kLong && idx.dim() == 2 && idx.size(1) == o.topk &&
                    idx.size(0) == x.size(0),
                "plait.torch.moe dispatch: topk_idx must be int64 [", x.size(0), ", ", o.topk, "]");
    at::Tensor w;
    if (w_in) {
      w = w_in->to(at::kFloat).contiguous();
      TORCH_CHECK(w.sizes() == idx.sizes(), "plait.torch.moe dispatch: topk_weights must be [", x.size(0), ", ", o.topk, "]");
    }
    auto c = std::make_shared<PyCall>();
    c->kind = "dispatch";
    c->inputs = {x, idx, w};
    const int k = o.topk;
    const int64_t hidden = static_cast<int64_t>(o.hidden);
    const at::ScalarType dt = dtype_;
    PyCall* raw = c.get();  // the call outlives its allocator's use (inside wait)
    auto allocate = [raw, k, hidden, dt](size_t n) {
      const auto rows = static_cast<int64_t>(n);
      raw->recv_x = at::empty({rows, hidden}, at::TensorOptions().dtype(dt));
      raw->recv_idx = at::empty({rows, k}, at::kLong);
      raw->recv_w = at::empty({rows, k}, at::kFloat);
      return moe::RecvBuffers{raw->recv_x.data_ptr(), raw->recv_idx.data_ptr<int64_t>(),
                              raw->recv_w.data_ptr<float>()};
    };
    {
      py::gil_scoped_release nogil;
      c->call = live().dispatch(x.data_ptr(), idx.data_ptr<int64_t>(), floats_or_null(w),
                             static_cast<size_t>(x.size(0)), allocate, moe::parse_path(path));
    }
    return c;
  }

  std::shared_ptr<PyCall> dispatch_again(const PyHandle& h, const at::Tensor& x_in, const std::string& path) {
    at::Tensor x = rows(x_in, "x");
    TORCH_CHECK(static_cast<size_t>(x.size(0)) == h.handle->num_tokens(), "plait.torch.moe dispatch: ",
                x.size(0), " rows where the handle's dispatch had ", h.handle->num_tokens());
    auto c = std::make_shared<PyCall>();
    c->kind = "repeat";
    c->inputs = {x};
    c->recv_x = at::empty({static_cast<int64_t>(h.handle->num_recv()), x.size(1)}, x.options());
    py::gil_scoped_release nogil;
    c->call = live().dispatch(h.handle, x.data_ptr(), c->recv_x.data_ptr(), moe::parse_path(path));
    return c;
  }

  std::shared_ptr<PyCall> combine(const PyHandle& h, const at::Tensor& y_in,
                                  const std::optional<at::Tensor>& w_in, const std::string& path) {
    const auto& o = live().options();
    at::Tensor y = rows(y_in, "y");
    TORCH_CHECK(static_cast<size_t>(y.size(0)) == h.handle->num_recv(), "plait.torch.moe combine: ", y.size(0),
                " rows where the dispatch received ", h.handle->num_recv());
    auto c = std::make_shared<PyCall>();
    c->kind = "combine";
    at::Tensor w;
    if (w_in) {
      w = w_in->to(at::kFloat).contiguous();
      TORCH_CHECK(w.size(0) == y.size(0) && w.size(1) == o.topk, "plait.torch.moe combine: weights must be [",
                  y.size(0), ", ", o.topk, "]");
      c->out_w = at::empty({static_cast<int64_t>(h.handle->num_tokens()), o.topk}, at::kFloat);
    }
    c->inputs = {y, w};
    c->out = at::empty({static_cast<int64_t>(h.handle->num_tokens()), y.size(1)}, y.options());
    py::gil_scoped_release nogil;
    c->call = live().combine(h.handle, y.data_ptr(), floats_or_null(w), c->out.data_ptr(), floats_or_null(c->out_w),
                             moe::parse_path(path));
    return c;
  }

  py::tuple layout(const at::Tensor& idx_in) {
    at::Tensor idx = idx_in.contiguous();
    TORCH_CHECK(idx.scalar_type() == at::kLong && idx.dim() == 2 && idx.size(1) == live().options().topk,
                "plait.torch.moe layout: topk_idx must be int64 [tokens, ", live().options().topk, "]");
    moe::Layout l = live().layout(idx.data_ptr<int64_t>(), static_cast<size_t>(idx.size(0)));
    at::Tensor in_rank = at::tensor(std::vector<uint8_t>(l.token_in_rank.begin(), l.token_in_rank.end()), at::kByte)
                             .to(at::kBool)
                             .reshape({idx.size(0), live().size()});
    return py::make_tuple(at::tensor(l.tokens_per_rank, at::kLong), at::tensor(l.tokens_per_expert, at::kLong),
                          in_rank);
  }

  // Releases the windows and their fabric (collective in spirit: peers may still write into
  // ours until they have closed too, which the fabric's shutdown waits for).
  void close() {
    py::gil_scoped_release nogil;
    d_.reset();
  }

  std::string chosen(bool fresh, bool combine) const {
    return std::string(moe::to_string(live().chosen_path(fresh, combine)));
  }
  std::string cost_summary() const { return live().cost_summary(); }
  int rank() const { return live().rank(); }
  int size() const { return live().size(); }

 private:
  at::Tensor rows(const at::Tensor& t, const char* what) const {
    TORCH_CHECK(t.device().is_cpu() && t.dim() == 2 && static_cast<size_t>(t.size(1)) == live().options().hidden &&
                    t.scalar_type() == dtype_,
                "plait.torch.moe: ", what, " must be a CPU ", c10::toString(dtype_), " tensor [tokens, ",
                live().options().hidden, "]");
    return t.contiguous();
  }

  std::unique_ptr<moe::Dispatcher> d_;
  at::ScalarType dtype_;
};

}  // namespace

void bind_moe(py::module_& m) {
  py::class_<PyHandle>(m, "MoeHandle", "A dispatch's routing, for its combine and for backward.")
      .def_property_readonly("num_tokens", [](const PyHandle& h) { return h.handle->num_tokens(); })
      .def_property_readonly("num_recv", [](const PyHandle& h) { return h.handle->num_recv(); })
      .def_property_readonly("recv_offsets", [](const PyHandle& h) { return h.handle->recv_offsets(); })
      .def_property_readonly("send_offsets", [](const PyHandle& h) { return h.handle->send_offsets(); });
  py::class_<PyCall, std::shared_ptr<PyCall>>(m, "MoeCall", "A dispatch or combine in flight.")
      .def("wait", &PyCall::wait)
      .def_property_readonly("path", [](const PyCall& c) { return std::string(moe::to_string(c.call->path())); });
  py::class_<PyDispatcher>(m, "MoeDispatcher")
      .def(py::init<const c10::intrusive_ptr<PlaitProcessGroup>&, int, int, size_t, const std::string&, size_t,
                    const std::string&, const std::string&>(),
           py::arg("group"), py::arg("num_experts"), py::arg("topk"), py::arg("hidden"), py::arg("dtype"),
           py::arg("max_tokens"), py::arg("path") = "auto", py::arg("name") = "moe")
      .def("dispatch", &PyDispatcher::dispatch, py::arg("x"), py::arg("topk_idx"), py::arg("topk_weights"),
           py::arg("path") = "auto")
      .def("dispatch_again", &PyDispatcher::dispatch_again, py::arg("handle"), py::arg("x"), py::arg("path") = "auto")
      .def("combine", &PyDispatcher::combine, py::arg("handle"), py::arg("y"), py::arg("weights"),
           py::arg("path") = "auto")
      .def("layout", &PyDispatcher::layout)
      .def("close", &PyDispatcher::close)
      .def("chosen_path", &PyDispatcher::chosen, py::arg("fresh"), py::arg("combine"))
      .def_property_readonly("cost_summary", &PyDispatcher::cost_summary)
      .def_property_readonly("rank", &PyDispatcher::rank)
      .def_property_readonly("size", &PyDispatcher::size);
}

}  // namespace plait::torch_backend
