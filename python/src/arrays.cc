#include "arrays.h"

#include <string>

#include "plait/error.h"

namespace plait::python {
namespace {

// The struct-module format character (native size) of each plait DataType; '=' / '<' / '@'
// prefixes are accepted. bf16 has no buffer format: pass it through torch, or view as uint16.
bool dtype_of(const Py_buffer& v, DataType* out) {
  std::string f = v.format ? v.format : "B";
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f = f.substr(1);
  if (f.size() != 1) return false;
  switch (f[0]) {
    case 'f': *out = DataType::kF32; return v.itemsize == 4;
    case 'd': *out = DataType::kF64; return v.itemsize == 8;
    case 'e': *out = DataType::kF16; return v.itemsize == 2;
    case 'b': *out = DataType::kI8; return true;
    case 'B': case 'c': *out = DataType::kU8; return true;
    case 'i': case 'l': case 'q':
      if (v.itemsize == 4) *out = DataType::kI32;
      else if (v.itemsize == 8) *out = DataType::kI64;
      else return false;
      return true;
  }
  return false;
}

}  // namespace

BufferView::BufferView(pybind11::handle object, bool writable, const char* what) {
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) {
    PyErr_Clear();
    throw invalid_usage(std::string(what) + " must be a C-contiguous" +
                        (writable ? ", writable" : "") + " buffer (a NumPy array, bytearray...)");
  }
  if (!dtype_of(view_, &dtype_)) {
    std::string format = view_.format ? view_.format : "?";
    PyBuffer_Release(&view_);
    throw invalid_usage(std::string(what) + " has element format '" + format +
                        "', which plait has no data type for (f32 f64 f16 i8 u8 i32 i64)");
  }
  count_ = static_cast<size_t>(view_.len) / static_cast<size_t>(view_.itemsize);
}

BufferView::~BufferView() {
  // May run on a thread without the GIL (a Work released from C++): take it.
  pybind11::gil_scoped_acquire gil;
  PyBuffer_Release(&view_);
}

ReduceOp parse_op(const std::string& name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "prod") return ReduceOp::kProd;
  if (name == "min") return ReduceOp::kMin;
  if (name == "max") return ReduceOp::kMax;
  if (name == "avg") return ReduceOp::kAvg;
  throw invalid_usage("unknown reduction '" + name + "' (sum, prod, min, max, avg)");
}

}  // namespace plait::python
