// layout_step(): a Layout's step as every rank's program (layout.h says what it models).
#include <algorithm>
#include <unordered_map>

#include "plait/error.h"
#include "sim/train/layout.h"

namespace plait::sim::train {
namespace {

enum class Kind : uint64_t { kTp, kEp, kDp, kEdp, kAct, kGrad };
constexpr const char* kKindNames[] = {"tp", "ep", "dp", "edp", "activations", "gradients"};

// What a rank does for one microbatch on one of its stages, in schedule order.
struct Unit {
  bool forward;
  int vstage;  // chunk * pp + stage
  int mb;
};

// Megatron's orders: GPipe every forward then every backward; 1F1B p - s - 1 forwards of
// warm-up, then one forward one backward, then the rest of the backwards; interleaved the same
// over v chunks with a warm-up of (p - s - 1) * 2 + (v - 1) * p.
std::vector<Unit> schedule_of(const Layout& l, int stage) {
  const int p = l.pp, v = l.chunks, m = l.microbatches(), total = m * v;
  auto unit = [&](bool forward, int k) {
    const int chunk = (k / p) % v;
    const int mb = (k / (p * v)) * p + k % p;
    return Unit{forward, (forward ? chunk : v - 1 - chunk) * p + stage, v == 1 ? k : mb};
  };
  std::vector<Unit> out;
  if (l.schedule == "gpipe") {
    for (int k = 0; k < total; ++k) out.push_back(unit(true, k));
    for (int k = 0; k < total; ++k) out.push_back(unit(false, k));
    return out;
  }
  const int warmup =
      std::min(total, v == 1 ? p - stage - 1 : (p - stage - 1) * 2 + (v - 1) * p);
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back(unit(true, f));
  while (f < total) {
    out.push_back(unit(true, f++));
    out.push_back(unit(false, b++));
  }
  while (b < total) out.push_back(unit(false, b++));
  return out;
}

class StepWriter {
 public:
  StepWriter(const Layout& l, LayoutReplay how)
      : l_(l), tp_copies_(how != LayoutReplay::kFull && l.tp > 1),
        dp_copies_(how == LayoutReplay::kOnePipeline && l.dp > 1),
        copies_((tp_copies_ ? l.tp : 1) * (dp_copies_ ? l.dp : 1)) {
    if (dp_copies_ && l.ep > 1)
      throw invalid_usage("sim train: one pipeline cannot stand for the others with ep " +
                          std::to_string(l.ep) + " (their alltoalls; --replay full or copies)");
    g_.ranks = l.ranks() / copies_;
    g_.copies = copies_;
    g_.programs.resize(g_.ranks);
    // Blocks in contiguous runs over the virtual stages; the embedding and head with the
    // first and last.
    std::vector<int> blocks;
    for (size_t i = 0; i < l.layers.size(); ++i)
      if (l.layers[i].kind != "embedding" && l.layers[i].kind != "head")
        blocks.push_back(static_cast<int>(i));
    const int stages = l.pp * l.chunks;
    stage_layers_.resize(stages);
    for (int s = 0; s < stages; ++s) {
      const size_t from = blocks.size() * s / stages, to = blocks.size() * (s + 1) / stages;
      for (size_t k = from; k < to; ++k) stage_layers_[s].push_back(blocks[k]);
    }
    for (size_t i = 0; i < l.layers.size(); ++i) {
      if (l.layers[i].kind == "embedding")
        stage_layers_.front().insert(stage_layers_.front().begin(), static_cast<int>(i));
      if (l.layers[i].kind == "head") stage_layers_.back().push_back(static_cast<int>(i));
    }
  }

  StepGraph write() {
    for (int r = 0; r < g_.ranks; ++r) write_rank(r);
    return std::move(g_);
  }

 private:
  // With copies a TP group is its first rank, standing for the others (StepGraph::copies);
  // through one pipeline, a stage is one rank standing for every rank that holds it.
  int rank(int t, int d, int s) const {
    if (dp_copies_) return tp_copies_ || l_.tp == 1 ? s : t + l_.tp * s;
    return tp_copies_ ? d + l_.dp * s : t + l_.tp * (d + l_.dp * s);
  }

  // A call's group ranks in the graph: repeats (ranks standing for several) are one.
  static std::vector<int> distinct(std::vector<int> m) {
    m.erase(std::unique(m.begin(), m.end()), m.end());
    return m;
  }

  // The call a key names, made the first time a member asks for it.
  int call(Kind kind, int first, int layer, int mb, bool forward, int index,
           const std::vector<int>& members, coll::CollOp op, double bytes, bool p2p) {
    const uint64_t key = static_cast<uint64_t>(kind) << 60 | static_cast<uint64_t>(first) << 38 |
                         static_cast<uint64_t>(layer) << 24 | static_cast<uint64_t>(mb) << 8 |
                         static_cast<uint64_t>(forward) << 7 | static_cast<uint64_t>(index);
    auto [it, added] = calls_.try_emplace(key, -1);
    if (!added) return it->second;
    Call c;
    c.p2p = p2p;
    c.op = op;
    c.members = members;
    c.dtype = l_.dtype;
    // A call of one member is among its copies: its TP group's, or its DP group's (the
    // replicas, every tp-th copy).
    if (members.size() == 1) {
      c.copy_group = kind == Kind::kTp ? l_.tp : l_.dp;
      c.copy_stride = kind == Kind::kTp || !tp_copies_ ? 1 : l_.tp;
    }
    const size_t size = members.size() == 1 ? c.copy_group : members.size();
    const uint64_t unit = dtype_size(l_.dtype) * (bytes_are_blocks(op) && !p2p ? size : 1);
    c.bytes = std::max<uint64_t>(unit, static_cast<uint64_t>(bytes) / unit * unit);
    c.group = p2p ? -1 : static_cast<int>(static_cast<uint64_t>(kind) * g_.ranks + first);
    c.name = std::string(kKindNames[static_cast<int>(kind)]) + (p2p ? "" : " ") +
             (p2p ? "" : std::string(coll::to_string(op))) + " L" + std::to_string(layer) +
             (forward ? " F" : " B") + " mb " + std::to_string(mb);
    it->second = g_.add_call(std::move(c));
    return it->second;
  }

  std::vector<int> tp_group(int d, int s) const {
    std::vector<int> m;
    for (int t = 0; t < l_.tp; ++t) m.push_back(rank(t, d, s));
    return distinct(m);
  }

  void collective(int r, Kind kind, const std::vector<int>& members, int layer, int mb,
                  bool forward, int index, coll::CollOp op, double bytes, bool wait) {
    // One member is a call among its copies (TP, or DP through one pipeline), else nothing
    // to do.
    const bool among_copies = (kind == Kind::kTp && tp_copies_) || (kind == Kind::kDp && dp_copies_);
    if ((members.size() < 2 && !among_copies) || bytes <= 0) return;
    const int c = call(kind, members[0], layer, mb, forward, index, members, op, bytes, false);
    g_.issue(r, c);
    if (wait) g_.wait(r, c);
    else pending_.push_back(c);
  }

  // A block's compute with its TP allreduces and EP alltoalls between the pieces.
  void layer_pass(int r, int t, int d, int s, int layer, int mb, bool forward) {
    const Layer& L = l_.layers[layer];
    const double flop = L.forward_flop * (forward ? 1 : 2) / l_.tp;
    const std::string what = L.kind + " L" + std::to_string(layer) + (forward ? " F" : " B") +
                             " mb " + std::to_string(mb);
    const std::vector<int> tp = tp_group(d, s);
    if (L.ep_bytes > 0) {
      std::vector<int> ep;
      for (int k = 0; k < l_.ep; ++k) ep.push_back(rank(t, d / l_.ep * l_.ep + k, s));
      g_.compute(r, what + " attention", flop / 2 / l_.flops_per_s);
      collective(r, Kind::kTp, tp, layer, mb, forward, 0, coll::CollOp::kAllreduce, L.tp_bytes, true);
      collective(r, Kind::kEp, ep, layer, mb, forward, 0, coll::CollOp::kAlltoall, L.ep_bytes, true);
      g_.compute(r, what + " experts", flop / 2 / l_.flops_per_s);
      collective(r, Kind::kEp, ep, layer, mb, forward, 1, coll::CollOp::kAlltoall, L.ep_bytes, true);
      collective(r, Kind::kTp, tp, layer, mb, forward, 1, coll::CollOp::kAllreduce, L.tp_bytes, true);
      return;
    }
    // Without tensor parallelism a block is one piece of compute (nothing to wait for within).
    const int pieces = l_.tp > 1 ? std::max(1, L.tp_allreduces) : 1;
    for (int k = 0; k < pieces; ++k) {
      g_.compute(r, what, flop / pieces / l_.flops_per_s);
      if (l_.tp > 1 && k < L.tp_allreduces)
        collective(r, Kind::kTp, tp, layer, mb, forward, k, coll::CollOp::kAllreduce, L.tp_bytes,
                   true);
    }
  }

  // The step's last backward of a layer: its gradients are final, their allreduce starts.
  void sync_gradients(int r, int t, int d, int s, int layer) {
    const Layer& L = l_.layers[layer];
    std::vector<int> dp;
    for (int k = 0; k < l_.dp; ++k) dp.push_back(rank(t, k, s));
    dp = distinct(dp);
    const double e = dtype_size(l_.dtype);
    collective(r, Kind::kDp, dp, layer, 0, false, 0, coll::CollOp::kAllreduce,
               (L.params - L.expert_params) / l_.tp * e, false);
    if (L.expert_params > 0) {
      std::vector<int> edp;
      for (int k = d % l_.ep; k < l_.dp; k += l_.ep) edp.push_back(rank(t, k, s));
      collective(r, Kind::kEdp, edp, layer, 0, false, 0, coll::CollOp::kAllreduce,
                 L.expert_params / l_.ep / l_.tp * e, false);
    }
  }

  // A pipeline message between virtual stages `from` and `from + 1` (gradients: back).
  void pipeline_message(int r, int t, int d, int from_vs, int mb, bool forward, bool send) {
    const int p = l_.pp;
    const int sender = forward ? from_vs : from_vs + 1, receiver = forward ? from_vs + 1 : from_vs;
    const std::vector<int> members = {rank(t, d, sender % p), rank(t, d, receiver % p)};
    // Megatron's scatter-gather: each rank of a TP group sends its 1/tp of the activations,
    // which the receiving group gathers among itself (within its host).
    const int c = call(forward ? Kind::kAct : Kind::kGrad, members[0], from_vs, mb, forward, 0,
                       members, coll::CollOp::kAllreduce, l_.activation_bytes / l_.tp, true);
    g_.issue(r, c);
    if (send) {
      pending_.push_back(c);
      return;
    }
    g_.wait(r, c);
    const int stage = receiver % p;
    collective(r, Kind::kTp, tp_group(d, stage), from_vs, mb, forward, 2, coll::CollOp::kAllgather,
               l_.activation_bytes, true);
  }

  void write_rank(int r) {
    const int tp = tp_copies_ ? 1 : l_.tp, dp = dp_copies_ ? 1 : l_.dp;  // in the graph
    const int t = r % tp, d = (r / tp) % dp, s = r / (tp * dp);
    const int last_vs = l_.pp * l_.chunks - 1;
    const int m = l_.microbatches();
    pending_.clear();
    std::unordered_map<int, int> backwards_done;  // by virtual stage
    for (const Unit& u : schedule_of(l_, s)) {
      const std::vector<int>& layers = stage_layers_[u.vstage];
      if (u.forward) {
        if (u.vstage > 0) pipeline_message(r, t, d, u.vstage - 1, u.mb, true, false);
        for (int layer : layers) layer_pass(r, t, d, s, layer, u.mb, true);
        if (u.vstage < last_vs) pipeline_message(r, t, d, u.vstage, u.mb, true, true);
        continue;
      }
      if (u.vstage < last_vs) pipeline_message(r, t, d, u.vstage, u.mb, false, false);
      const bool last = ++backwards_done[u.vstage] == m;
      for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
        layer_pass(r, t, d, s, *it, u.mb, false);
        if (last) sync_gradients(r, t, d, s, *it);
      }
      if (u.vstage > 0) pipeline_message(r, t, d, u.vstage - 1, u.mb, false, true);
    }
    for (int c : pending_) g_.wait(r, c);
  }

  const Layout& l_;
  const bool tp_copies_, dp_copies_;
  const int copies_;
  StepGraph g_;
  std::vector<std::vector<int>> stage_layers_;  // by virtual stage: layer indices
  std::unordered_map<uint64_t, int> calls_;
  std::vector<int> pending_;  // this rank's calls not waited for yet
};

}  // namespace

StepGraph layout_step(const Layout& layout, LayoutReplay how) {
  return StepWriter(layout, how).write();
}

}  // namespace plait::sim::train
