// The rooted collectives (reduce, gather, scatter), whose buffers differ between the root and
// the others, and the ones with per-rank counts (allgatherv, reduce_scatterv, alltoallv).
#include <numeric>

#include "communicator_py.h"

namespace py = pybind11;

namespace plait::python {
namespace {

std::string str(size_t n) { return std::to_string(n); }

std::vector<size_t> packed_displs(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size(), 0);
  for (size_t p = 1; p < counts.size(); ++p) displs[p] = displs[p - 1] + counts[p - 1];
  return displs;
}

size_t total(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

}  // namespace

PyWork PyCommunicator::reduce(py::object data, py::object out, const std::string& op, int root,
                              const std::string& algorithm, double timeout_s) {
  constexpr const char* kOp = "reduce";
  const ReduceOp redop = reduction(op, kOp);
  const bool is_root = rank() == root;
  const bool in_place = is_root && out.is_none();
  auto in = view(data, in_place, "input", kOp);
  std::vector<BufferRef> buffers{in};
  void* result = nullptr;  // non-roots: plait reduces their part into scratch of its own
  if (is_root) {
    BufferRef dst = in_place ? in : view(out, true, "output", kOp);
    same_type(*in, *dst, kOp);
    if (dst->count() != in->count())
      throw usage("output holds " + str(dst->count()) + " elements but input holds " +
                      str(in->count()),
                  kOp);
    result = dst->data();
    buffers.push_back(dst);
  }
  return start(std::move(buffers), [&](Communicator& c) {
    return c.reduce(in->data(), result, in->count(), in->dtype(), redop, root,
                    options(algorithm, timeout_s));
  });
}

PyWork PyCommunicator::gather(py::object data, py::object out, int root,
                              const std::string& algorithm, double timeout_s) {
  constexpr const char* kOp = "gather";
  const bool is_root = rank() == root;
  auto in = view(data, false, "input", kOp);
  std::vector<BufferRef> buffers{in};
  void* result = nullptr;
  if (is_root) {
    const size_t want = in->count() * static_cast<size_t>(size());
    if (out.is_none())
      throw usage("the root needs out: an array of size() x input = " + str(want) +
                      " elements to gather into",
                  kOp);
    auto dst = view(out, true, "output", kOp);
    same_type(*in, *dst, kOp);
    if (dst->count() != want)
      throw usage("output holds " + str(dst->count()) + " elements; the root needs size() x " +
                      "input = " + str(size()) + " x " + str(in->count()) + " = " + str(want),
                  kOp);
    result = dst->data();
    buffers.push_back(dst);
  }
  return start(std::move(buffers), [&](Communicator& c) {
    return c.gather(in->data(), result, in->count(), in->dtype(), root,
                    options(algorithm, timeout_s));
  });
}

PyWork PyCommunicator::scatter(py::object data, py::object out, int root,
                               const std::string& algorithm, double timeout_s) {
  constexpr const char* kOp = "scatter";
  const bool is_root = rank() == root;
  auto dst = view(out, true, "output", kOp);
  std::vector<BufferRef> buffers{dst};
  const void* source = nullptr;  // only the root's data is read
  if (is_root) {
    const size_t want = dst->count() * static_cast<size_t>(size());
    if (data.is_none())
      throw usage("the root needs data: an array of size() x output = " + str(want) +
                      " elements to scatter",
                  kOp);
    auto in = view(data, false, "input", kOp);
    same_type(*in, *dst, kOp);
    if (in->count() != want)
      throw usage("input holds " + str(in->count()) + " elements; the root needs size() x " +
                      "output = " + str(size()) + " x " + str(dst->count()) + " = " + str(want),
                  kOp);
    source = in->data();
    buffers.push_back(in);
  }
  return start(std::move(buffers), [&](Communicator& c) {
    return c.scatter(source, dst->data(), dst->count(), dst->dtype(), root,
                     options(algorithm, timeout_s));
  });
}

PyWork PyCommunicator::allgatherv(py::object data, py::object out,
                                  const std::vector<int64_t>& counts,
                                  const std::string& algorithm, double timeout_s) {
  constexpr const char* kOp = "allgatherv";
  const std::vector<size_t> recv_counts = per_rank(counts, "counts", kOp);
  const size_t mine = recv_counts[static_cast<size_t>(rank())];
  auto dst = view(out, true, "output", kOp);
  if (dst->count() != total(recv_counts))
    throw usage("output holds " + str(dst->count()) + " elements but the counts add up to " +
                    str(total(recv_counts)),
                kOp);
  std::vector<BufferRef> buffers{dst};
  const void* source = nullptr;  // in place: this rank's block already sits in out
  if (!data.is_none()) {
    auto in = view(data, false, "input", kOp);
    same_type(*in, *dst, kOp);
    if (in->count() != mine)
      throw usage("input holds " + str(in->count()) + " elements but counts[" +
                      str(rank()) + "] (this rank) is " + str(mine),
                  kOp);
    source = in->data();
    buffers.push_back(in);
  }
  return start(std::move(buffers), [&](Communicator& c) {
    return c.allgatherv(source, dst->data(), recv_counts, dst->dtype(),
                        options(algorithm, timeout_s));
  });
}

PyWork PyCommunicator::reduce_scatterv(py::object data, py::object out,
                                       const std::vector<int64_t>& counts, const std::string& op,
                                       const std::string& algorithm, double timeout_s) {
  constexpr const char* kOp = "reduce_scatterv";
  const ReduceOp redop = reduction(op, kOp);
  const std::vector<size_t> recv_counts = per_rank(counts, "counts", kOp);
  const size_t mine = recv_counts[static_cast<size_t>(rank())];
  auto in = view(data, false, "input", kOp);
  auto dst = view(out, true, "output", kOp);
  same_type(*in, *dst, kOp);
  if (in->count() != total(recv_counts))
    throw usage("input holds " + str(in->count()) + " elements but the counts add up to " +
                    str(total(recv_counts)),
                kOp);
  if (dst->count() != mine)
    throw usage("output holds " + str(dst->count()) + " elements but counts[" + str(rank()) +
                    "] (this rank) is " + str(mine),
                kOp);
  return start({in, dst}, [&](Communicator& c) {
    return c.reduce_scatterv(in->data(), dst->data(), recv_counts, in->dtype(), redop,
                             options(algorithm, timeout_s));
  });
}

PyWork PyCommunicator::alltoallv(py::object data, py::object out,
                                 const std::vector<int64_t>& send_counts,
                                 const std::vector<int64_t>& recv_counts,
                                 const std::optional<std::vector<int64_t>>& send_displs,
                                 const std::optional<std::vector<int64_t>>& recv_displs,
                                 const std::string& algorithm, double timeout_s) {
  constexpr const char* kOp = "alltoallv";
  const std::vector<size_t> sc = per_rank(send_counts, "send_counts", kOp);
  const std::vector<size_t> rc = per_rank(recv_counts, "recv_counts", kOp);
  const std::vector<size_t> sd =
      send_displs ? per_rank(*send_displs, "send_displs", kOp) : packed_displs(sc);
  const std::vector<size_t> rd =
      recv_displs ? per_rank(*recv_displs, "recv_displs", kOp) : packed_displs(rc);
  auto in = view(data, false, "input", kOp);
  auto dst = view(out, true, "output", kOp);
  same_type(*in, *dst, kOp);
  // plait only sees pointers: a block past the end of its array would be read or written
  // out of bounds, so every block is checked here.
  auto check_blocks = [&](const std::vector<size_t>& counts, const std::vector<size_t>& displs,
                          const BufferView& buf, const char* side, const char* array) {
    for (size_t p = 0; p < counts.size(); ++p) {
      size_t end = 0;
      if (__builtin_add_overflow(displs[p], counts[p], &end) || end > buf.count())
        throw usage(std::string("the ") + side + " block for rank " + str(p) +
                        " (displacement " + str(displs[p]) + ", count " + str(counts[p]) +
                        ") ends past the " + array + "'s " + str(buf.count()) + " elements",
                    kOp);
    }
  };
  check_blocks(sc, sd, *in, "send", "input");
  check_blocks(rc, rd, *dst, "recv", "output");
  return start({in, dst}, [&](Communicator& c) {
    return c.alltoallv(in->data(), sc, sd, dst->data(), rc, rd, in->dtype(),
                       options(algorithm, timeout_s));
  });
}

}  // namespace plait::python
