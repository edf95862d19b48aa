#include <memory>
#include <string>

#include "core/config.h"
#include "moe/dispatcher_state.h"
#include "moe/moe_settings.h"
#include "plait/error.h"

namespace plait::moe {

std::string_view to_string(Path path) {
  switch (path) {
    case Path::kAuto: return "auto";
    case Path::kAlltoallv: return "alltoallv";
    case Path::kOneSided: return "one-sided";
  }
  return "?";
}

Path parse_path(std::string_view name) {
  for (Path p : {Path::kAuto, Path::kAlltoallv, Path::kOneSided})
    if (to_string(p) == name) return p;
  throw invalid_usage("moe: unknown path \"" + std::string(name) + "\" (auto, alltoallv, one-sided)");
}

void DispatcherState::begin(const char* op) {
  if (!broken.empty())
    throw invalid_usage(std::string(op) + ": an earlier call of this dispatcher failed (" + broken + ")",
                        context(op));
  if (busy)
    throw invalid_usage(std::string(op) + ": the previous call of this dispatcher was not waited for",
                        context(op));
  busy = true;
}

Path DispatcherState::resolve(Path asked, CallKind kind) const {
  if (asked != Path::kAuto) return asked;
  if (forced != Path::kAuto) return forced;
  return costs.pick(kind);
}

Dispatcher::Dispatcher(std::shared_ptr<Communicator> comm, const Bootstrap& bootstrap,
                       const DispatcherOptions& options)
    : impl_(std::make_shared<DispatcherState>()) {
  DispatcherState& d = *impl_;
  d.comm = std::move(comm);
  d.options = options;
  d.rank = d.comm->rank();
  const int n = d.comm->size();
  const ErrorContext ctx = d.context("moe dispatcher");
  if (bootstrap.size != n || bootstrap.rank != d.rank)
    throw invalid_usage("moe dispatcher: the bootstrap is rank " + std::to_string(bootstrap.rank) + " of " +
                            std::to_string(bootstrap.size) + ", the communicator rank " +
                            std::to_string(d.rank) + " of " + std::to_string(n),
                        ctx);
  if (options.num_experts <= 0 || options.num_experts % n != 0)
    throw invalid_usage("moe dispatcher: num_experts " + std::to_string(options.num_experts) +
                            " must be a positive multiple of the ranks (" + std::to_string(n) + ")",
                        ctx);
  if (options.topk < 1 || options.topk > 64 || options.topk > options.num_experts)
    throw invalid_usage("moe dispatcher: topk " + std::to_string(options.topk) + " must be 1..min(64, num_experts)", ctx);
  if (options.hidden == 0 || options.max_tokens == 0)
    throw invalid_usage("moe dispatcher: hidden and max_tokens must be positive", ctx);
  if (options.dtype != DataType::kF32 && options.dtype != DataType::kF16 && options.dtype != DataType::kBF16)
    throw invalid_usage("moe dispatcher: rows of " + std::string(plait::to_string(options.dtype)) +
                            " (f32, f16 or bf16)",
                        ctx);
  d.shape = {.size = n, .num_experts = options.num_experts, .topk = options.topk,
             .row_bytes = options.hidden * dtype_size(options.dtype)};
  d.forced = options.path != Path::kAuto ? options.path
                                         : parse_path(Config::from_env().get<MoeSettings>().path);
  // A peer's slot holds its largest dispatch block (rows and meta) or combine block (rows and
  // weights): max_tokens rows either way.
  d.windows = std::make_unique<WindowExchange>(
      bootstrap, "moe/" + options.name, options.max_tokens * (d.shape.row_bytes + d.shape.meta_bytes()));
  d.costs = measure_path_costs(*this, *d.comm);
}

Dispatcher::~Dispatcher() = default;

int Dispatcher::rank() const { return impl_->rank; }
int Dispatcher::size() const { return impl_->shape.size; }
const DispatcherOptions& Dispatcher::options() const { return impl_->options; }

Path Dispatcher::chosen_path(bool fresh_dispatch, bool combine) const {
  const CallKind kind = combine ? CallKind::kCombine
                                : fresh_dispatch ? CallKind::kFreshDispatch : CallKind::kRepeatDispatch;
  return impl_->resolve(Path::kAuto, kind);
}

std::string Dispatcher::cost_summary() const { return impl_->costs.summary(); }

Layout Dispatcher::layout(const int64_t* topk_idx, size_t num_tokens) const {
  return moe::layout(impl_->shape, impl_->rank, topk_idx, num_tokens);
}

namespace {
// Starts a call, releasing the dispatcher again if starting it throws.
template <typename Start>
std::shared_ptr<Call> started(DispatcherState& d, const char* op, Start&& start) {
  d.begin(op);
  try {
    return start();
  } catch (...) {
    d.busy = false;
    throw;
  }
}
}  // namespace

std::shared_ptr<Call> Dispatcher::dispatch(const void* x, const int64_t* topk_idx,
                                           const float* topk_weights, size_t num_tokens,
                                           RecvAllocator allocate, Path path) {
  return started(*impl_, "moe dispatch", [&] {
    return start_fresh_dispatch(impl_, impl_->resolve(path, CallKind::kFreshDispatch), x, topk_idx,
                                topk_weights, num_tokens, std::move(allocate));
  });
}

std::shared_ptr<Call> Dispatcher::dispatch(std::shared_ptr<const Handle> handle, const void* x,
                                           void* recv_x, Path path) {
  if (!handle) throw invalid_usage("moe dispatch: no handle", impl_->context("moe dispatch"));
  return started(*impl_, "moe dispatch", [&] {
    return start_repeat_dispatch(impl_, impl_->resolve(path, CallKind::kRepeatDispatch), std::move(handle),
                                 x, recv_x);
  });
}

std::shared_ptr<Call> Dispatcher::combine(std::shared_ptr<const Handle> handle, const void* y,
                                          const float* y_weights, void* out, float* out_weights,
                                          Path path) {
  if (!handle) throw invalid_usage("moe combine: no handle", impl_->context("moe combine"));
  return started(*impl_, "moe combine", [&] {
    return start_combine(impl_, impl_->resolve(path, CallKind::kCombine), std::move(handle), y, y_weights,
                         out, out_weights);
  });
}

}  // namespace plait::moe
