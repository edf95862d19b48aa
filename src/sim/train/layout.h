// A training job described by its model and its layout, made into the StepGraph of one step:
// what `plait sim train --layout FILE` replays, and `--sweep` varies. The description (JSON):
//
//   {"model": {"seq": 2048, "dtype": "bf16",
//              "layers": [{"kind": "embedding", "vocab": 50304, "hidden": 4096},
//                         {"kind": "transformer", "count": 32, "hidden": 4096, "ffn": 16384},
//                         {"kind": "moe", "count": 8, "hidden": 4096, "ffn": 14336,
//                          "experts": 64, "topk": 2},
//                         {"kind": "dense", "count": 2, "params": 1e8, "hidden": 1024},
//                         {"kind": "head", "vocab": 50304, "hidden": 4096}]},
//    "flops_per_s": 4e14,                 // what one rank sustains
//    "global_batch": 64,                  // sequences a step
//    "microbatch": 1,                     // sequences a microbatch
//    "dp": 8, "tp": 4, "pp": 2, "ep": 1,  // dp * tp * pp ranks; ep divides dp
//    "schedule": "1f1b"}                  // gpipe | 1f1b | interleaved-1f1b (with "chunks": v)
//
// Per layer (h hidden, f ffn, T tokens of a microbatch, s seq, e dtype bytes): a transformer
// block has 4h^2 + 2hf parameters and a forward of 2 * params * T + 4 * T * s * h FLOP; a MoE
// block the same with `experts` MLPs of which `topk` run per token; backward is twice forward.
// Tensor parallelism (Megatron's) divides a block's compute by tp and adds an allreduce of
// T*h*e bytes after attention and after the MLP, forward and backward; expert parallelism an
// alltoall of topk*T*h*e bytes before and after the experts. Stages hold the blocks in
// contiguous runs as even as they divide (the embedding with the first, the head with the
// last); activations (T*h*e) go forward and their gradients back as pipeline messages, 1/tp
// of them from each rank of a TP group, gathered by the receiving group (Megatron's
// scatter-gather). Data
// parallelism allreduces each layer's gradients (its params / tp, or the experts' / ep among
// the ranks that hold the same experts) as soon as the step's last backward of that layer is
// done. Ranks: rank = t + tp * (d + dp * stage), so a TP group is consecutive ranks.
#pragma once

#include <cstdint>
#include <string>

#include "sim/train/step_graph.h"

namespace plait::sim::train {

struct Layer {
  std::string kind;  // embedding, transformer, moe, dense, head
  double params = 0;           // on one rank of its TP group, before ep
  double expert_params = 0;    // of those, the experts' (split by ep)
  double forward_flop = 0;     // a microbatch, before tp
  double tp_bytes = 0;         // each TP allreduce (0: none)
  int tp_allreduces = 0;       // forward; backward has as many
  double ep_bytes = 0;         // each EP alltoall (0: none), two forward and two backward
};

struct Layout {
  std::vector<Layer> layers;   // one per block, in model order
  double activation_bytes = 0; // a microbatch's activations between stages
  // What a rank may hold ("memory_per_rank", bytes; 0: no limit). A rank holds 16 bytes a
  // parameter (bf16 weights and gradients, f32 master weights and Adam's two moments) of its
  // stage's layers / tp (experts also / ep), and 34 * T * h * e / 2 / tp bytes of activations a
  // block for each microbatch in flight (Korthikanti et al.'s 34 s b h, sequence parallel):
  // pp of them on the first stage under 1F1B and interleaving, every microbatch under GPipe.
  double memory_per_rank = 0;
  DataType dtype = DataType::kBF16;
  double flops_per_s = 0;
  int global_batch = 0;
  int microbatch = 1;
  int dp = 1, tp = 1, pp = 1, ep = 1;
  int chunks = 1;              // stages a rank holds (interleaved-1f1b)
  std::string schedule = "1f1b";
  int microbatches() const { return global_batch / (dp * microbatch); }
  // The most any rank holds, by the model above.
  double peak_memory() const;
  int ranks() const { return dp * tp * pp; }
};

// Throws kInvalidUsage naming what is wrong: malformed JSON, an unknown layer kind or field
// missing, degrees that do not multiply to `ranks` (0: any), ep not dividing dp, a batch that
// does not split into dp * microbatch, fewer blocks than stages, an unknown schedule, a
// layout whose peak_memory() exceeds memory_per_rank.
Layout parse_layout(const std::string& json_text, int ranks = 0);
// The same description with other degrees and schedule (the sweep's variations); checked as
// parse_layout() checks.
Layout with_degrees(Layout layout, int dp, int tp, int pp, int ep, const std::string& schedule,
                    int chunks = 1);
enum class LayoutReplay : uint8_t {
  kFull,          // every rank
  // Each TP group as its first rank standing for the others (StepGraph::copies): tp times
  // fewer ranks to replay.
  kTpCopies,
  // One pipeline (one rank a stage) standing for every rank: the DP allreduces through their
  // first copy (a ring's or a hypercube's symmetry maps it to the others). ep must be 1.
  kOnePipeline,
};
// Copies are exact where a message's copies take paths alike (a star); else each message
// waits for its slowest copy.
StepGraph layout_step(const Layout& layout, LayoutReplay how = LayoutReplay::kFull);

}  // namespace plait::sim::train
