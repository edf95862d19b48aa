// plait.DeadlineAllreduce: the deadline allreduce (plait/deadline_allreduce.h) on buffer-
// protocol objects (NumPy arrays; plait/deadline.py passes torch tensors as their NumPy view).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "arrays.h"
#include "communicator_py.h"
#include "plait/deadline_allreduce.h"

namespace py = pybind11;

namespace plait::python {
namespace {

deadline::LatePolicy parse_late(const std::string& s) {
  if (s == "drop") return deadline::LatePolicy::kDrop;
  if (s == "carry") return deadline::LatePolicy::kCarry;
  throw invalid_usage("late must be \"drop\" or \"carry\", not \"" + s + "\"", {.op = "deadline allreduce"});
}

deadline::DeadlineFrom parse_from(const std::string& s) {
  if (s == "first_arrival") return deadline::DeadlineFrom::kFirstArrival;
  if (s == "step_start") return deadline::DeadlineFrom::kStepStart;
  throw invalid_usage("start must be \"first_arrival\" or \"step_start\", not \"" + s + "\"",
                      {.op = "deadline allreduce"});
}

class PyDeadlineAllreduce {
 public:
  PyDeadlineAllreduce(PyCommunicator& comm, double deadline_s, const std::string& start,
                      const std::string& late, int min_contributors, int backup, int report_after,
                      int root, size_t chunk_bytes, double max_dropped) {
    deadline::Options o;
    o.deadline = std::chrono::microseconds(static_cast<int64_t>(deadline_s * 1e6));
    o.from = parse_from(start);
    o.late = parse_late(late);
    o.min_contributors = min_contributors;
    o.backup = backup;
    o.report_after = report_after;
    o.root = root;
    o.chunk_bytes = chunk_bytes;
    o.max_dropped = max_dropped;
    py::gil_scoped_release nogil;
    impl_ = std::make_unique<deadline::DeadlineAllreduce>(comm.native(), o);
  }

  py::dict allreduce(py::handle data, const std::string& op, uint64_t key, bool contribute) {
    if (!impl_) throw invalid_usage("this DeadlineAllreduce was closed", {.op = "deadline allreduce"});
    auto buf = std::make_shared<BufferView>(data, true, "data");
    const ReduceOp rop = parse_op(op);
    deadline::StepResult r;
    {
      py::gil_scoped_release nogil;
      r = impl_->allreduce(buf->data(), buf->count(), buf->dtype(), rop, key, contribute);
    }
    py::dict out;
    out["step"] = r.step;
    out["contributors"] = r.contributors;
    out["contributed"] = r.contributed;
    out["late"] = r.late;
    out["slow"] = r.slow;
    out["dropped_fraction"] = r.dropped_fraction;
    out["wait_seconds"] = r.wait_seconds;
    out["chunk_contributors"] = r.chunk_contributors;
    return out;
  }

  void close() {
    py::gil_scoped_release nogil;
    impl_.reset();
  }

 private:
  std::unique_ptr<deadline::DeadlineAllreduce> impl_;
};

}  // namespace

void register_deadline(py::module_& m) {
  py::class_<PyDeadlineAllreduce>(
      m, "DeadlineAllreduce",
      "Allreduce with a deadline (collective to make): each step reduces the contributions that "
      "reached the aggregator (rank `root`) by the deadline, the same values and contributor set "
      "on every rank; late ones are dropped, or with late=\"carry\" added to that rank's next "
      "call with the same key.")
      .def(py::init<PyCommunicator&, double, const std::string&, const std::string&, int, int, int, int,
                    size_t, double>(),
           py::arg("comm"), py::arg("deadline"), py::arg("start") = "first_arrival",
           py::arg("late") = "drop", py::arg("min_contributors") = 1, py::arg("backup") = 0,
           py::arg("report_after") = 3, py::arg("root") = 0, py::arg("chunk_bytes") = 0,
           py::arg("max_dropped") = 1.0)
      .def("allreduce", &PyDeadlineAllreduce::allreduce, py::arg("data"), py::arg("op") = "sum",
           py::arg("key") = 0, py::arg("contribute") = true,
           "In place; returns {step, contributors, contributed, late, slow, dropped_fraction, "
           "wait_seconds, chunk_contributors}. contribute=False joins the step without values (a rank catching up "
           "after it was late; a value it carries still goes).")
      .def("close", &PyDeadlineAllreduce::close,
           "Waits until the last results and contributions are delivered, then frees it.");
}

}  // namespace plait::python
