// The compiled half of plait.torch: the ProcessGroupPlait class, a subclass of torch's own
// c10d Backend type, so torch.distributed's ProcessGroup calls its collectives directly.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "c10d_store.h"
#include "call_recorder.h"
#include "moe_py.h"
#include "process_group.h"

namespace py = pybind11;
using plait::torch_backend::PlaitProcessGroup;

PYBIND11_MODULE(_plait_torch, m) {
  // c10d's Backend and Store types must be registered before we derive from them.
  py::module::import("torch.distributed");
  m.doc() = "plait's c10d ProcessGroup (use plait.torch)";
  py::class_<PlaitProcessGroup, c10d::Backend, c10::intrusive_ptr<PlaitProcessGroup>>(
      m, "ProcessGroupPlait")
      .def_static(
          "create",
          [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
             std::chrono::milliseconds timeout) {
            return PlaitProcessGroup::create(store, rank, size, timeout);
          },
          py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
          py::call_guard<py::gil_scoped_release>())
      .def(
          "subgroup",
          [](PlaitProcessGroup& self, const std::vector<int>& ranks,
             std::chrono::milliseconds timeout) { return self.subgroup(ranks, timeout); },
          py::arg("ranks"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("timeout", &PlaitProcessGroup::timeout)
      .def_property_readonly("_timeline_id", &PlaitProcessGroup::group_id);
  // plait.torch.timeline's recording of every group's calls (see call_recorder.h).
  m.def("_timeline_start", &plait::torch_backend::CallRecorder::start);
  m.def(
      "_timeline_stop",
      [] {
        py::list calls;
        for (auto& c : plait::torch_backend::CallRecorder::stop())
          calls.append(py::make_tuple(c.op, c.group, c.peer, c.tag, c.bytes, c.algorithm,
                                      c.issued_ns, c.started_ns, c.finished_ns, c.waits));
        return calls;
      },
      "The calls recorded since _timeline_start: (op, group, peer, tag, bytes, algorithm, "
      "issued_ns, started_ns, finished_ns, [(wait_begin_ns, wait_end_ns)]), steady_clock.");
  // plait's view of a torch store, as the backend's setup uses it (for tests of it).
  m.def(
      "_store_wait",
      [](const c10::intrusive_ptr<c10d::Store>& store, const std::vector<std::string>& keys,
         std::chrono::milliseconds timeout) { plait::torch_backend::C10dStore(store).wait(keys, timeout); },
      py::arg("store"), py::arg("keys"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "_store_get",
      [](const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
         std::chrono::milliseconds timeout) {
        plait::Bytes b = plait::torch_backend::C10dStore(store).get(key, timeout);
        return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
      },
      py::arg("store"), py::arg("key"), py::arg("timeout"));
  plait::torch_backend::bind_moe(m);
  m.def("_finish_completion_jobs_at_exit",
        &plait::torch_backend::CompletionThread::finish_jobs_at_exit,
        "Waits for the completion threads' jobs, and runs no more (see plait.torch).",
        py::call_guard<py::gil_scoped_release>());
}
