// plait.ps: the parameter server (plait/ps.h) on Python buffers. Calls check their arguments
// in C++ (plait.InvalidUsageError naming the key and the rank; nothing is sent then), pin
// their buffers until the operation is done, and return a Work whose `version` says which
// parameters a pull returned.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "plait/bootstrap.h"
#include "plait/ps.h"
#include "work_py.h"

namespace py = pybind11;

namespace plait::python {
namespace {

ps::Consistency parse_consistency(const std::string& name) {
  if (name == "bsp") return ps::Consistency::kBsp;
  if (name == "asp") return ps::Consistency::kAsp;
  if (name == "ssp") return ps::Consistency::kSsp;
  throw invalid_usage("consistency takes bsp, asp or ssp, not '" + name + "'");
}

ps::Rule parse_rule(const std::string& name) {
  for (ps::Rule r : {ps::Rule::kSum, ps::Rule::kMean, ps::Rule::kSgd, ps::Rule::kMomentum, ps::Rule::kAdam})
    if (name == ps::to_string(r)) return r;
  throw invalid_usage("rule takes sum, mean, sgd, momentum or adam, not '" + name + "'");
}

class PyKVStore {
 public:
  PyKVStore(int servers, const std::string& consistency, int staleness, bool servers_first,
            const std::string& name, const std::map<std::string, std::string>& settings,
            double timeout_s, int backup_workers, bool fold_late)
      : in_flight_(std::make_shared<InFlight>()) {
    ps::Options o{.servers = servers,
                  .servers_first = servers_first,
                  .consistency = parse_consistency(consistency),
                  .staleness = staleness,
                  .backup_workers = backup_workers,
                  .fold_late = fold_late,
                  .name = name,
                  .settings = settings};
    py::gil_scoped_release nogil;
    kv_ = ps::KVStore::create(bootstrap_from_env(to_ms(timeout_s)), o);
  }
  ~PyKVStore() {
    {
      py::gil_scoped_release nogil;
      kv_.reset();
    }
    in_flight_->close();
  }

  void register_key(uint64_t key, size_t count, const std::string& dtype, const std::string& rule,
                    float lr, float momentum, float beta1, float beta2, float eps,
                    float weight_decay, py::object init) {
    const std::optional<DataType> type = parse_dtype(dtype);
    if (!type) throw invalid_usage("unknown dtype '" + dtype + "'", {.rank = kv_->rank(), .op = "ps register_key"});
    ps::KeySpec spec{.key = key, .count = count, .dtype = *type};
    spec.options.update = {.rule = parse_rule(rule), .lr = lr, .momentum = momentum, .beta1 = beta1,
                           .beta2 = beta2, .eps = eps, .weight_decay = weight_decay};
    BufferRef view;
    if (!init.is_none()) {
      view = std::make_shared<BufferView>(init, false, "init");
      if (view->dtype() != *type || view->count() != count)
        throw invalid_usage("init holds " + std::to_string(view->count()) + " " +
                                std::string(to_string(view->dtype())) + " elements; key " +
                                std::to_string(key) + " is " + std::to_string(count) + " " + dtype,
                            {.rank = kv_->rank(), .op = "ps register_key"});
      spec.options.init = view->data();
    }
    py::gil_scoped_release nogil;
    kv_->register_keys({spec});
  }

  PyWork push(py::object keys, py::object data) { return call(keys, data, py::none()); }
  PyWork pull(py::object keys, py::object out) { return call(keys, py::none(), out); }
  PyWork push_pull(py::object keys, py::object data, py::object out) {
    return call(keys, data, out);
  }

  void finalize() {
    py::gil_scoped_release nogil;
    kv_->finalize();
  }

  py::dict stats() const {
    const ps::Stats s = kv_->stats();
    py::dict d;
    d["pushes"] = s.pushes;
    d["pulls"] = s.pulls;
    d["bytes_pushed"] = s.bytes_pushed;
    d["bytes_pulled"] = s.bytes_pulled;
    d["credit_waits"] = s.credit_waits;
    d["peak_bytes_on_wire"] = s.peak_bytes_on_wire;
    d["deferred"] = s.deferred;
    d["cpu_seconds"] = s.cpu_seconds;
    return d;
  }

  ps::KVStore& kv() const { return *kv_; }

 private:
  // One key (an int) or a list of keys, with one buffer or a list of buffers each. Every
  // buffer is checked against its key's registered shape before anything is sent: the
  // servers write a key's whole size into each pull buffer and a push reads as much.
  PyWork call(py::object keys, py::object data, py::object out) {
    in_flight_->reap();
    const char* op = data.is_none() ? "ps pull" : out.is_none() ? "ps push" : "ps push_pull";
    const ErrorContext ctx{.rank = kv_->rank(), .op = op};
    const bool many = py::isinstance<py::list>(keys) || py::isinstance<py::tuple>(keys);
    std::vector<uint64_t> ids;
    std::vector<py::object> ins, outs;
    auto items = [&](py::object buffers, const char* what, std::vector<py::object>& into) {
      if (buffers.is_none()) return;
      if (!many) {
        into.push_back(buffers);
        return;
      }
      if (!py::isinstance<py::list>(buffers) && !py::isinstance<py::tuple>(buffers))
        throw invalid_usage(std::string("a list of keys takes a list of ") + what + " buffers", ctx);
      for (py::handle b : buffers) into.push_back(py::reinterpret_borrow<py::object>(b));
      if (into.size() != ids.size())
        throw invalid_usage(std::to_string(ids.size()) + " keys and " + std::to_string(into.size()) +
                                " " + what + " buffers",
                            ctx);
    };
    if (many) {
      for (py::handle k : keys) ids.push_back(k.cast<uint64_t>());
    } else {
      ids.push_back(keys.cast<uint64_t>());
    }
    items(data, "data", ins);
    items(out, "out", outs);
    std::vector<BufferRef> pinned;
    std::vector<const void*> src;
    std::vector<void*> dst;
    auto pin = [&](const py::object& b, bool writable, size_t i) {
      const std::string what = (writable ? "the out buffer of key " : "the data of key ") + std::to_string(ids[i]);
      BufferRef v;
      try {
        v = std::make_shared<BufferView>(b, writable, what.c_str());
      } catch (const Error& e) {
        throw e.with_context(ctx);
      }
      // An unregistered key is refused below, by the call itself, with the same words.
      if (const auto shape = kv_->key_shape(ids[i]); shape && (v->count() != shape->count || v->dtype() != shape->dtype))
        throw invalid_usage("key " + std::to_string(ids[i]) + " holds " + std::to_string(shape->count) +
                                " elements (" + std::string(to_string(shape->dtype)) + "); " + what +
                                " has " + std::to_string(v->count()) + " (" +
                                std::string(to_string(v->dtype())) + ")",
                            ctx);
      pinned.push_back(std::move(v));
      return pinned.back()->data();
    };
    for (size_t i = 0; i < ins.size(); ++i) src.push_back(pin(ins[i], false, i));
    for (size_t i = 0; i < outs.size(); ++i) dst.push_back(pin(outs[i], true, i));
    WorkPtr work;
    {
      py::gil_scoped_release nogil;
      if (!many) {
        const BufferView& v = *pinned.front();
        if (!ins.empty() && !outs.empty())
          work = kv_->push_pull(ids[0], src[0], dst[0], v.count(), v.dtype());
        else if (!ins.empty())
          work = kv_->push(ids[0], src[0], v.count(), v.dtype());
        else
          work = kv_->pull(ids[0], dst[0], v.count(), v.dtype());
      } else if (!ins.empty() && !outs.empty()) {
        work = kv_->push_pull(ids, src, dst);
      } else if (!ins.empty()) {
        work = kv_->push(ids, src);
      } else {
        work = kv_->pull(ids, dst);
      }
    }
    return PyWork(std::move(work), std::move(pinned), in_flight_);
  }

  std::shared_ptr<ps::KVStore> kv_;
  std::shared_ptr<InFlight> in_flight_;
};

}  // namespace

void register_ps(py::module_& m) {
  py::class_<PyKVStore>(m, "KVStore",
                        "The parameter server (plait/ps.h): the last `servers` ranks serve "
                        "key shards, the others push and pull. Creating one is collective.")
      .def(py::init<int, const std::string&, int, bool, const std::string&,
                    const std::map<std::string, std::string>&, double, int, bool>(),
           py::arg("servers") = 0, py::arg("consistency") = "bsp", py::arg("staleness") = 0,
           py::arg("servers_first") = false, py::arg("name") = "ps",
           py::arg("settings") = std::map<std::string, std::string>{}, py::arg("timeout") = 60.0,
           py::arg("backup_workers") = 0, py::arg("fold_late") = false)
      .def_property_readonly("is_server", [](const PyKVStore& s) { return s.kv().is_server(); })
      .def_property_readonly("is_worker", [](const PyKVStore& s) { return s.kv().is_worker(); })
      .def_property_readonly("num_servers", [](const PyKVStore& s) { return s.kv().num_servers(); })
      .def_property_readonly("num_workers", [](const PyKVStore& s) { return s.kv().num_workers(); })
      .def_property_readonly("worker_index", [](const PyKVStore& s) { return s.kv().worker_index(); })
      .def_property_readonly("server_index", [](const PyKVStore& s) { return s.kv().server_index(); })
      .def_property_readonly("rank", [](const PyKVStore& s) { return s.kv().rank(); })
      .def("register_key", &PyKVStore::register_key, py::arg("key"), py::arg("count"),
           py::arg("dtype") = "f32", py::arg("rule") = "sum", py::arg("lr") = 0.01f,
           py::arg("momentum") = 0.9f, py::arg("beta1") = 0.9f, py::arg("beta2") = 0.999f,
           py::arg("eps") = 1e-8f, py::arg("weight_decay") = 0.0f, py::arg("init") = py::none(),
           "Collective over every rank. init: the first worker's initial values (else zeros).")
      .def("push", &PyKVStore::push, py::arg("key"), py::arg("data"),
           "A key and a buffer, or a list of keys and a list of buffers.")
      .def("pull", &PyKVStore::pull, py::arg("key"), py::arg("out"))
      .def("push_pull", &PyKVStore::push_pull, py::arg("key"), py::arg("data"), py::arg("out"))
      .def("finalize", &PyKVStore::finalize,
           "Collective: workers finish and say so; servers serve until every worker has.")
      .def("stats", &PyKVStore::stats);
}

}  // namespace plait::python
