// The compiled core of the Python module: Communicator and Work over plait's C++ API, with
// errors turned into plait.Error subclasses. Buffers stay pinned until their operation is
// done, whether or not Python keeps the Work; waits release the GIL, so other Python threads
// run meanwhile.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "communicator_py.h"
#include "errors_py.h"
#include "plait/ps.h"
#include "rdma_py.h"
#include "work_py.h"

namespace py = pybind11;

namespace plait::python {
void register_ps(py::module_& m);
void register_compress(py::module_& m);
void register_checkpoint(py::module_& m);
void register_deadline(py::module_& m);
void register_shuffle(py::module_& m);
}

namespace {

// Arguments every collective ends with.
constexpr const char* kCommonArgs =
    "algorithm: force one (\"ring\", \"naive\", ...); empty: the cost model picks.\n"
    "timeout: seconds for this call; 0: the communicator's timeout (PLAIT_TIMEOUT).\n"
    "Returns a Work at once; bad arguments raise plait.InvalidUsageError and start nothing.";

std::string doc(const char* what) { return std::string(what) + "\n\n" + kCommonArgs; }

}  // namespace

PYBIND11_MODULE(_plait, m) {
  using namespace plait::python;
  m.doc() = "plait's compiled core; import plait instead";
  register_errors(m);
  m.attr("ANY_SOURCE") = plait::kAnySource;

  py::class_<PyWork>(m, "Work",
                     "A non-blocking operation. Its buffers stay pinned until it is done, also "
                     "when this object is dropped first.")
      .def("wait", &PyWork::wait, py::arg("timeout") = py::none(),
           "Waits (seconds; default: the operation's own limit); raises plait.Error on failure.")
      .def("test", &PyWork::test, "True once the operation is done.")
      .def_property_readonly("source", [](PyWork& w) { return w.work().source(); },
                             "recv from ANY_SOURCE: the rank the message came from.")
      .def_property_readonly("bytes", [](PyWork& w) { return w.work().bytes(); },
                             "Bytes actually received.")
      .def_property_readonly("algorithm", [](PyWork& w) { return w.work().algorithm(); },
                             "The algorithm a collective runs (\"ring\", ...).")
      .def_property_readonly("version", [](PyWork& w) -> py::object {
        const auto* p = dynamic_cast<const plait::ps::PsWork*>(&w.work());
        if (!p) return py::none();
        return py::int_(p->version());
      }, "A parameter-server pull: the version it returned (None for other operations).");

  py::class_<PyCommunicator>(m, "Communicator",
                             "A group of ranks. Collectives must be issued in the same order on "
                             "every rank; dropping the communicator fails what it still runs.")
      .def_property_readonly("rank", &PyCommunicator::rank)
      .def_property_readonly("size", &PyCommunicator::size)
      .def("allreduce", &PyCommunicator::allreduce, py::arg("data"), py::arg("out") = py::none(),
           py::arg("op") = "sum", py::arg("algorithm") = "", py::arg("timeout") = 0.0,
           doc("Reduces data across ranks into out (default: in place).\n"
               "op: sum, prod, min, max or avg.")
               .c_str())
      .def("reduce", &PyCommunicator::reduce, py::arg("data"), py::arg("out") = py::none(),
           py::arg("op") = "sum", py::arg("root") = 0, py::arg("algorithm") = "",
           py::arg("timeout") = 0.0,
           doc("Reduces data across ranks into out on root (default: in place on root).\n"
               "out is only used on root; elsewhere data is only read.")
               .c_str())
      .def("broadcast", &PyCommunicator::broadcast, py::arg("data"), py::arg("root") = 0,
           py::arg("algorithm") = "", py::arg("timeout") = 0.0,
           doc("Copies root's data into data on every other rank.").c_str())
      .def("allgather", &PyCommunicator::allgather, py::arg("data"), py::arg("out"),
           py::arg("algorithm") = "", py::arg("timeout") = 0.0,
           doc("out (size x len(data)) gets every rank's data, rank r's at r * len(data).")
               .c_str())
      .def("allgatherv", &PyCommunicator::allgatherv, py::arg("data"), py::arg("out"),
           py::arg("counts"), py::arg("algorithm") = "", py::arg("timeout") = 0.0,
           doc("Like allgather with counts[r] elements from rank r, packed in rank order in "
               "out (sum(counts) elements). data=None: in place, this rank's block already "
               "at its offset in out.")
               .c_str())
      .def("reduce_scatter", &PyCommunicator::reduce_scatter, py::arg("data"), py::arg("out"),
           py::arg("op") = "sum", py::arg("algorithm") = "", py::arg("timeout") = 0.0,
           doc("Reduces data (size x len(out)) across ranks; out gets block rank of the "
               "result.")
               .c_str())
      .def("reduce_scatterv", &PyCommunicator::reduce_scatterv, py::arg("data"),
           py::arg("out"), py::arg("counts"), py::arg("op") = "sum", py::arg("algorithm") = "",
           py::arg("timeout") = 0.0,
           doc("Like reduce_scatter with blocks of counts[r] elements, packed in rank order "
               "in data (sum(counts)); out holds counts[rank].")
               .c_str())
      .def("alltoall", &PyCommunicator::alltoall, py::arg("data"), py::arg("out"),
           py::arg("algorithm") = "", py::arg("timeout") = 0.0,
           doc("Block p of data goes to rank p; block p of out comes from rank p (size equal "
               "blocks each).")
               .c_str())
      .def("alltoallv", &PyCommunicator::alltoallv, py::arg("data"), py::arg("out"),
           py::arg("send_counts"), py::arg("recv_counts"), py::arg("send_displs") = py::none(),
           py::arg("recv_displs") = py::none(), py::arg("algorithm") = "",
           py::arg("timeout") = 0.0,
           doc("send_counts[p] elements from data at send_displs[p] go to rank p; "
               "recv_counts[p] elements from rank p land in out at recv_displs[p]. "
               "Displacements default to the counts packed in rank order; data and out must "
               "be distinct.")
               .c_str())
      .def("gather", &PyCommunicator::gather, py::arg("data"), py::arg("out") = py::none(),
           py::arg("root") = 0, py::arg("algorithm") = "", py::arg("timeout") = 0.0,
           doc("out on root (size x len(data)) gets every rank's data in rank order; out is "
               "only used on root.")
               .c_str())
      .def("scatter", &PyCommunicator::scatter, py::arg("data"), py::arg("out"),
           py::arg("root") = 0, py::arg("algorithm") = "", py::arg("timeout") = 0.0,
           doc("Root's data (size x len(out)) is split in rank order; every rank gets its "
               "block in out. data is only read on root (others may pass None).")
               .c_str())
      .def("barrier", &PyCommunicator::barrier, py::arg("timeout") = 0.0,
           "Completes once every rank has called it.")
      .def("send", &PyCommunicator::send, py::arg("data"), py::arg("peer"), py::arg("tag") = 0,
           py::arg("timeout") = 0.0, "Sends data to peer; matched by (source, tag) in order.")
      .def("recv", &PyCommunicator::recv, py::arg("data"), py::arg("peer") = plait::kAnySource,
           py::arg("tag") = 0, py::arg("timeout") = 0.0,
           "Receives into data from peer (or ANY_SOURCE); Work.source and Work.bytes tell.")
      .def("split", &PyCommunicator::split, py::arg("color"), py::arg("key") = 0,
           "Ranks with equal color form a new communicator; None for a negative color.")
      .def("shrink", &PyCommunicator::shrink, py::arg("timeout") = 0.0,
           "In-job recovery after ranks died (ULFM's shrink): every survivor calls it and "
           "gets (comm, survivors), a communicator of the ranks still alive and their ranks "
           "here (new rank i was survivors[i]); every survivor gets the same list. Needs a "
           "store that outlives the dead (plait run serves one).")
      .def("abort", &PyCommunicator::abort, py::arg("reason") = "aborted from Python",
           "Fails every pending and future operation here and on the peers.");

  register_rdma(m);
  register_ps(m);
  register_compress(m);
  register_deadline(m);
  register_checkpoint(m);
  register_shuffle(m);

  m.def("init", &init, py::arg("timeout") = 60.0,
        "A communicator over every rank of the job, from the environment that plait run, "
        "torchrun, mpirun or srun set.");
}
