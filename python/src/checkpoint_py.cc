// plait.checkpoint files from Python (plait/checkpoint.h): bytes written atomically with a
// SHA-256, read back only whole and uncorrupted (the digest is unkeyed: a rewrite passes).
#include <pybind11/pybind11.h>

#include <string>

#include "plait/checkpoint.h"

namespace py = pybind11;

namespace plait::python {

void register_checkpoint(py::module_& m) {
  m.def(
      "checkpoint_write",
      [](const std::string& path, py::buffer data) {
        py::buffer_info info = data.request();
        const size_t bytes = static_cast<size_t>(info.size) * static_cast<size_t>(info.itemsize);
        py::gil_scoped_release nogil;
        checkpoint::write_file(path, info.ptr, bytes);
      },
      py::arg("path"), py::arg("data"),
      "Writes data's bytes to path atomically (temporary file, fsync, rename) with their SHA-256.");
  m.def(
      "checkpoint_read",
      [](const std::string& path) {
        std::vector<std::byte> payload;
        {
          py::gil_scoped_release nogil;
          payload = checkpoint::read_file(path);
        }
        return py::bytes(reinterpret_cast<const char*>(payload.data()), payload.size());
      },
      py::arg("path"), "The bytes of a checkpoint file; plait.SystemError if it is partial, altered or missing.");
  m.def(
      "checkpoint_verify",
      [](const std::string& path) {
        std::string why;
        bool ok;
        {
          py::gil_scoped_release nogil;
          ok = checkpoint::verify_file(path, &why);
        }
        return py::make_tuple(ok, why);
      },
      py::arg("path"), "(True, '') for a whole, unaltered checkpoint file, else (False, what is wrong).");
}

}  // namespace plait::python
