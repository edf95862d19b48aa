// DeadlineAllreduce: what every rank's caller does each step (send its contribution to the
// aggregator, receive the result and the contributor set); the aggregator itself is in
// aggregator.cc.
#include "plait/deadline_allreduce.h"

#include <cstring>
#include <deque>
#include <map>

#include "coll/deadline/aggregator.h"
#include "core/reduce.h"

namespace plait::deadline {

struct DeadlineAllreduce::Impl {
  Options options;
  // Null on the root: its aggregator holds them alone (it cancels their receives as it goes).
  std::shared_ptr<Communicator> contributions, results;
  std::chrono::milliseconds timeout{0};  // the communicators'
  int rank = 0, size = 1;
  uint64_t next_step = 0;
  std::unique_ptr<Aggregator> aggregator;  // on the root
  // kCarry: by key, what this rank sent to a step that went without it.
  struct Residual {
    std::vector<char> values;
    size_t count = 0;
    DataType dtype = DataType::kF32;
  };
  std::map<uint64_t, Residual> residuals;
  // Sends still in flight, with their buffers.
  struct Sent {
    wire::ContributionHeader header;
    std::vector<char> values;
    WorkPtr header_work;
    std::vector<WorkPtr> chunk_works;
  };
  std::deque<std::unique_ptr<Sent>> sends;

  ~Impl() {
    aggregator.reset();
    // Our last contributions must reach the aggregator before their buffers go (it may be
    // reading them right now); bounded by each send's own deadline.
    for (auto& s : sends) {
      try {
        s->header_work->wait();
        for (auto& w : s->chunk_works) w->wait();
      } catch (const Error&) {
        // The aggregator is gone or failed: nothing left to deliver to.
      }
    }
    // Cancels what is still posted before the buffers above go.
    contributions.reset();
    results.reset();
  }

  std::chrono::milliseconds step_timeout() const {
    return timeout + std::chrono::duration_cast<std::chrono::milliseconds>(options.deadline) +
           std::chrono::seconds(1);
  }
  void reap_sends(size_t keep) {
    while (!sends.empty()) {
      auto& s = *sends.front();
      if (sends.size() > keep) {
        s.header_work->wait();
        for (auto& w : s.chunk_works) w->wait();
      } else {
        if (!s.header_work->test()) return;
        for (auto& w : s.chunk_works)
          if (!w->test()) return;
      }
      if (auto e = s.header_work->error()) throw *e;
      for (auto& w : s.chunk_works)
        if (auto e = w->error()) throw *e;
      sends.pop_front();
    }
  }
};

namespace {

void check_options(const Options& o, int size, int rank) {
  const ErrorContext ctx{.rank = rank, .op = "deadline allreduce"};
  if (o.deadline.count() <= 0)
    throw invalid_usage("the deadline must be more than 0 (it was " +
                            std::to_string(o.deadline.count()) + " us)", ctx);
  if (o.min_contributors < 1 || o.min_contributors > size)
    throw invalid_usage("min_contributors must be 1.." + std::to_string(size) + ", not " +
                            std::to_string(o.min_contributors), ctx);
  if (o.backup < 0 || o.backup >= size)
    throw invalid_usage("backup must be 0.." + std::to_string(size - 1) + ", not " +
                            std::to_string(o.backup), ctx);
  if (o.report_after < 1)
    throw invalid_usage("report_after must be at least 1, not " + std::to_string(o.report_after), ctx);
  if (!(o.max_dropped >= 0 && o.max_dropped <= 1))
    throw invalid_usage("max_dropped must be from 0 to 1, not " + std::to_string(o.max_dropped), ctx);
  if (o.root < 0 || o.root >= size)
    throw invalid_usage("root " + std::to_string(o.root) + " out of range for " +
                            std::to_string(size) + " ranks", ctx);
}

}  // namespace

DeadlineAllreduce::DeadlineAllreduce(Communicator& comm, const Options& options)
    : impl_(std::make_unique<Impl>()) {
  check_options(options, comm.size(), comm.rank());
  impl_->options = options;
  impl_->rank = comm.rank();
  impl_->size = comm.size();
  // Ranks keep their order; the root's aggregator thread owns its side of both.
  impl_->contributions = comm.split(0, comm.rank());
  impl_->results = comm.split(0, comm.rank());
  impl_->timeout = impl_->contributions->timeout();
  if (comm.rank() == options.root)
    impl_->aggregator = std::make_unique<Aggregator>(std::move(impl_->contributions),
                                                     std::move(impl_->results), options);
}

DeadlineAllreduce::~DeadlineAllreduce() = default;

int DeadlineAllreduce::rank() const { return impl_->rank; }
int DeadlineAllreduce::size() const { return impl_->size; }

StepResult DeadlineAllreduce::allreduce(void* data, size_t count, DataType dtype, ReduceOp op,
                                        uint64_t key, bool contribute) {
  Impl& m = *impl_;
  const uint64_t step = m.next_step;
  const ErrorContext ctx{.rank = m.rank, .op = "deadline allreduce", .seq = static_cast<int64_t>(step)};
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, dtype_size(dtype), &bytes))
    throw invalid_usage("count " + std::to_string(count) + " overflows", ctx);
  if (data == nullptr && count > 0) throw invalid_usage("data is null", ctx);
  ++m.next_step;
  const auto started = Clock::now();

  auto sent = std::make_unique<Impl::Sent>();
  sent->header.step = step;
  sent->header.count = count;
  sent->header.dtype = static_cast<uint8_t>(dtype);
  sent->header.op = static_cast<uint8_t>(op);
  const bool carry = m.options.late == LatePolicy::kCarry;
  auto carried = carry ? m.residuals.find(key) : m.residuals.end();
  if (carried != m.residuals.end() && (carried->second.count != count || carried->second.dtype != dtype))
    throw invalid_usage("key " + std::to_string(key) + " carries " + std::to_string(carried->second.count) +
                            " x " + std::string(to_string(carried->second.dtype)) +
                            " from a late step, but this call passes " + std::to_string(count) + " x " +
                            std::string(to_string(dtype)),
                        ctx);
  // A rank that only joins still sends what it carries.
  const bool with_values = contribute || carried != m.residuals.end();
  sent->header.flags = with_values ? 0 : wire::kNoValues;
  if (contribute) {
    sent->values.resize(bytes);
    std::memcpy(sent->values.data(), data, bytes);
    if (carried != m.residuals.end())
      reduce_inplace(dtype, op == ReduceOp::kAvg ? ReduceOp::kSum : op, sent->values.data(),
                     carried->second.values.data(), count);
  } else if (carried != m.residuals.end()) {
    sent->values = std::move(carried->second.values);
  }
  if (carried != m.residuals.end()) m.residuals.erase(carried);
  std::vector<char> kept;  // what this rank sent, should the step go without it
  if (carry) kept = sent->values;

  const size_t elem = dtype_size(dtype);
  const wire::Chunking k = wire::chunking(count, elem, m.options.chunk_bytes);
  if (k.chunks > wire::kMaxChunks)
    throw invalid_usage("chunk_bytes " + std::to_string(m.options.chunk_bytes) + " cuts " +
                            std::to_string(count) + " values into more than " +
                            std::to_string(wire::kMaxChunks) + " chunks",
                        ctx);
  std::vector<char> result_header(wire::ResultHeader::bytes(m.size, k.chunks));
  wire::ResultHeader header;
  const auto timeout = m.step_timeout();
  if (m.aggregator) {
    m.aggregator->contribute_local(sent->header, std::move(sent->values));
    LocalResult r = m.aggregator->take_result(step, timeout);
    header = std::move(r.header);
    std::memcpy(data, r.values->data(), bytes);
  } else {
    const int root = m.options.root;
    const CallOptions call{.timeout = timeout};
    size_t header_bytes = 0;
    try {
      m.reap_sends(1);
      sent->header_work = m.contributions->send(&sent->header, sizeof sent->header, DataType::kU8,
                                                root, wire::tag(step, 0), call);
      if (with_values)
        for (size_t c = 0; c < k.chunks; ++c)
          sent->chunk_works.push_back(m.contributions->send(
              sent->values.data() + k.begin(c) * elem, (k.end(c) - k.begin(c)) * elem,
              DataType::kU8, root, wire::tag(step, c + 1), call));
      m.sends.push_back(std::move(sent));
      auto hw = m.results->recv(result_header.data(), result_header.size(), DataType::kU8,
                                root, wire::tag(step, 0), call);
      auto vw = m.results->recv(data, bytes, DataType::kU8, root, wire::tag(step, 1), call);
      hw->wait();
      vw->wait();
      header_bytes = hw->bytes();
      if (vw->bytes() != bytes)
        throw invalid_usage("the result of step " + std::to_string(step) + " has " +
                                std::to_string(vw->bytes()) + " bytes, this rank passed " +
                                std::to_string(bytes) + " (the ranks passed different counts)",
                            ctx);
    } catch (const Error& e) {
      throw e.with_context(ctx);
    }
    if (!header.decode(result_header.data(), header_bytes, m.size, k.chunks) || header.step != step)
      throw remote_error("the aggregator (rank " + std::to_string(root) +
                             ") sent a malformed result header for step " + std::to_string(step), ctx);
  }

  StepResult out;
  out.step = step;
  out.contributors = wire::ranks_of(header.contributors, m.size);
  out.contributed = wire::bit(header.contributors, m.rank);
  out.late = !wire::bit(header.present, m.rank);
  out.slow = wire::ranks_of(header.slow, m.size);
  out.dropped_fraction = static_cast<double>(header.dropped_ppm) / 1e6;
  out.wait_seconds = seconds_since(started);
  const size_t words = wire::mask_words(m.size);
  out.chunk_contributors.resize(k.chunks);
  for (size_t c = 0; c < k.chunks; ++c) {
    if (k.chunks == 1) {
      out.chunk_contributors[c] = static_cast<int>(out.contributors.size());
      continue;
    }
    int n = 0;
    for (int r = 0; r < m.size; ++r) n += wire::bit(header.chunks, static_cast<int>(c * words * 64) + r);
    out.chunk_contributors[c] = n;
  }
  if (carry && with_values && !out.contributed) {
    // What of ours the step went without comes with our next call for this key.
    if (k.chunks > 1)
      for (size_t c = 0; c < k.chunks; ++c)
        if (wire::bit(header.chunks, static_cast<int>(c * words * 64) + m.rank))
          std::memset(kept.data() + k.begin(c) * elem, 0, (k.end(c) - k.begin(c)) * elem);
    m.residuals[key] = Impl::Residual{std::move(kept), count, dtype};
  }
  return out;
}

}  // namespace plait::deadline
