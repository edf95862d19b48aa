#include "sim/train/layout.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "plait/error.h"

namespace plait::sim::train {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) { throw invalid_usage("sim train: layout: " + what); }

double number(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) bad(where + " needs \"" + key + "\"");
  if (!j[key].is_number()) bad(where + ": \"" + key + "\" is not a number");
  const double v = j[key].get<double>();
  if (!(v > 0)) bad(where + ": \"" + key + "\" must be above 0");
  return v;
}

int integer(const json& j, const char* key, int fallback) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_number_integer() || j[key].get<int>() < 1)
    bad(std::string("\"") + key + "\" must be a whole number of at least 1");
  return j[key].get<int>();
}

const std::set<std::string> kKinds = {"embedding", "transformer", "moe", "dense", "head"};
const std::set<std::string> kSchedules = {"gpipe", "1f1b", "interleaved-1f1b"};

void check_layout(const Layout& l, int ranks) {
  if (ranks > 0 && l.ranks() != ranks)
    bad("dp " + std::to_string(l.dp) + " x tp " + std::to_string(l.tp) + " x pp " +
        std::to_string(l.pp) + " = " + std::to_string(l.ranks()) + " ranks, not the " +
        std::to_string(ranks) + " asked for");
  if (l.dp % l.ep != 0)
    bad("ep " + std::to_string(l.ep) + " does not divide dp " + std::to_string(l.dp));
  if (!kSchedules.count(l.schedule))
    bad("no schedule \"" + l.schedule + "\" (gpipe, 1f1b, interleaved-1f1b)");
  if (l.schedule != "interleaved-1f1b" && l.chunks != 1) bad("only interleaved-1f1b takes chunks");
  if (l.schedule == "interleaved-1f1b" && (l.pp < 2 || l.chunks < 2))
    bad("interleaved-1f1b needs pp of at least 2 and \"chunks\" of at least 2");
  if (l.global_batch % (l.dp * l.microbatch) != 0)
    bad("a global batch of " + std::to_string(l.global_batch) + " sequences does not split into " +
        std::to_string(l.dp) + " replicas of microbatches of " + std::to_string(l.microbatch));
  int blocks = 0;
  for (const Layer& layer : l.layers) blocks += layer.kind != "embedding" && layer.kind != "head";
  if (blocks < l.pp * l.chunks)
    bad(std::to_string(blocks) + " blocks cannot fill " + std::to_string(l.pp * l.chunks) +
        " pipeline stages");
  if (l.schedule == "interleaved-1f1b" && l.microbatches() % l.pp != 0)
    bad("interleaved-1f1b needs microbatches (" + std::to_string(l.microbatches()) +
        ") a multiple of pp (" + std::to_string(l.pp) + ")");
  bool moe = false;
  for (const Layer& layer : l.layers) moe = moe || layer.ep_bytes > 0;
  if (l.ep > 1 && !moe) bad("ep " + std::to_string(l.ep) + " without a moe layer");
  if (l.memory_per_rank > 0 && l.peak_memory() > l.memory_per_rank)
    bad("a rank would hold " + std::to_string(l.peak_memory() / 1e9) + " GB, more than the " +
        std::to_string(l.memory_per_rank / 1e9) + " GB of memory_per_rank");
}

}  // namespace

double Layout::peak_memory() const {
  // The first stage holds the most in flight; its layers as layout_step() deals them.
  int blocks = 0;
  for (const Layer& layer : layers) blocks += layer.kind != "embedding" && layer.kind != "head";
  const int stages = pp * chunks;
  double params = 0, per_microbatch = 0;
  int block = 0;
  for (const Layer& layer : layers) {
    const bool is_block = layer.kind != "embedding" && layer.kind != "head";
    // Rank 0 holds virtual stages 0, pp, 2 pp, ... (the embedding with stage 0).
    bool mine = layer.kind == "embedding" || (layer.kind == "head" && stages == 1);
    if (is_block) {
      for (int c = 0; c < chunks; ++c) {
        const int v = c * pp;
        mine = mine || (block >= blocks * v / stages && block < blocks * (v + 1) / stages);
      }
      ++block;
    }
    if (!mine) continue;
    params += (layer.params - layer.expert_params) / tp + layer.expert_params / ep / tp;
    if (is_block) per_microbatch += 17 * activation_bytes / tp;
  }
  const int in_flight = schedule == "gpipe" ? microbatches() : std::min(pp, microbatches());
  return 16 * params + per_microbatch * in_flight;
}

Layout parse_layout(const std::string& text, int ranks) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(std::string("not JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("model") || !j["model"].contains("layers") ||
      !j["model"]["layers"].is_array())
    bad("needs \"model\": {\"layers\": [...]}");
  Layout l;
  const json& model = j["model"];
  const double seq = number(model, "seq", "model");
  const std::string dtype = model.value("dtype", "bf16");
  if (dtype == "bf16") l.dtype = DataType::kBF16;
  else if (dtype == "f16") l.dtype = DataType::kF16;
  else if (dtype == "f32") l.dtype = DataType::kF32;
  else bad("dtype \"" + dtype + "\" (bf16, f16, f32)");
  l.flops_per_s = number(j, "flops_per_s", "the layout");
  l.global_batch = integer(j, "global_batch", 0);
  if (l.global_batch == 0) bad("needs \"global_batch\" (sequences a step)");
  l.microbatch = integer(j, "microbatch", 1);
  l.dp = integer(j, "dp", 1), l.tp = integer(j, "tp", 1), l.pp = integer(j, "pp", 1);
  l.ep = integer(j, "ep", 1);
  l.chunks = integer(j, "chunks", 1);
  l.schedule = j.value("schedule", "1f1b");
  if (j.contains("memory_per_rank")) l.memory_per_rank = number(j, "memory_per_rank", "the layout");
  const double e = dtype_size(l.dtype);
  const double tokens = seq * l.microbatch;
  int index = 0;
  for (const json& spec : model["layers"]) {
    const std::string where = "layer " + std::to_string(index++);
    const std::string kind = spec.value("kind", "");
    if (!kKinds.count(kind))
      bad(where + ": unknown kind \"" + kind +
          "\" (embedding, transformer, moe, dense, head)");
    const double h = number(spec, "hidden", where);
    l.activation_bytes = std::max(l.activation_bytes, tokens * h * e);
    Layer layer;
    layer.kind = kind;
    const int count = integer(spec, "count", 1);
    if (kind == "embedding" || kind == "head") {
      layer.params = number(spec, "vocab", where) * h;
      layer.forward_flop = kind == "head" ? 2 * layer.params * tokens : 0;
    } else if (kind == "dense") {
      layer.params = number(spec, "params", where);
      layer.forward_flop = 2 * layer.params * tokens;
      layer.tp_bytes = tokens * h * e;
      layer.tp_allreduces = 1;
    } else {
      const double f = number(spec, "ffn", where);
      const double attention = 4 * h * h;
      double mlp = 2 * h * f, active = mlp;
      if (kind == "moe") {
        const double experts = number(spec, "experts", where);
        const double topk = number(spec, "topk", where);
        if (topk > experts) bad(where + ": topk above experts");
        layer.expert_params = experts * mlp;
        active = topk * mlp;
        mlp *= experts;
        layer.ep_bytes = topk * tokens * h * e;
      }
      layer.params = attention + mlp;
      layer.forward_flop = 2 * (attention + active) * tokens + 4 * tokens * seq * h;
      layer.tp_bytes = tokens * h * e;
      layer.tp_allreduces = 2;
    }
    for (int c = 0; c < count; ++c) l.layers.push_back(layer);
  }
  check_layout(l, ranks);
  return l;
}

Layout with_degrees(Layout l, int dp, int tp, int pp, int ep, const std::string& schedule,
                    int chunks) {
  l.dp = dp, l.tp = tp, l.pp = pp, l.ep = ep, l.schedule = schedule, l.chunks = chunks;
  check_layout(l, 0);
  return l;
}

}  // namespace plait::sim::train
