#include "plait/sim/plot.h"

#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "plait/error.h"

namespace plait::cli {
namespace {

// argv: kind, json, png, title. Exit 3 without matplotlib, with a line saying so.
constexpr const char* kScript = R"PY(
import json, sys
kind, src, png, title = sys.argv[1:5]
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError as e:
    print(f"matplotlib is missing ({e}): make deps installs it into .venv/", file=sys.stderr)
    sys.exit(3)
recs = [json.loads(l) for l in open(src) if l.strip()]
if not recs:
    print("no records to plot", file=sys.stderr)
    sys.exit(2)
def size(b):
    for unit, s in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= s and b % s == 0:
            return f"{b // s} {unit}"
    return f"{b} B"
if kind == "sweep":
    # Records of single runs (plait sim OP --json) do not say which was fastest: work it out.
    best = {}
    for r in recs:
        k = (r["topology"], r["ranks"], r["bytes"])
        best[k] = min(best.get(k, r["time_us"]), r["time_us"])
    for r in recs:
        r.setdefault("fastest", r["time_us"] == best[(r["topology"], r["ranks"], r["bytes"])])
    panels = sorted({(r["topology"], r["ranks"]) for r in recs}, key=lambda p: (p[1], p[0]))
    # One color per algorithm in every panel (a panel lacks what was not simulated there).
    colors = {a: f"C{i}" for i, a in enumerate(sorted({r["algo"] for r in recs}))}
    cols = min(len(panels), 3)
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows), squeeze=False)
    for ax, (topo, ranks) in zip(axes.flat, panels):
        mine = [r for r in recs if r["topology"] == topo and r["ranks"] == ranks]
        for algo in sorted({r["algo"] for r in mine}):
            pts = sorted((r["bytes"], r["busbw_GBps"]) for r in mine if r["algo"] == algo)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=algo,
                    color=colors[algo])
        for r in mine:
            if r.get("cost_model_choice") and not r.get("fastest"):
                ax.plot(r["bytes"], r["busbw_GBps"], "x", color="red", markersize=11)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["bytes"] for r in mine}))
        ax.set_xticklabels([size(b) for b in sorted({r["bytes"] for r in mine})], fontsize=7)
        ax.set_xlabel("bytes")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{topo.split(',rate')[0]}, {ranks} ranks", fontsize=9)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles = [plt.Line2D([], [], color=c, marker="o", label=a) for a, c in colors.items()]
    axes.flat[0].legend(handles=handles, fontsize=7)
    fig.suptitle(title + "  (red x: the cost model's pick where it is not the fastest)", fontsize=10)
else:
    recs.sort(key=lambda r: r["time_us"])
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(recs) + 1.6))
    colors = ["tab:green" if i == 0 else "tab:blue" for i in range(len(recs))]
    ax.barh([r["algo"] for r in recs], [r["time_us"] / 1e3 for r in recs], color=colors)
    for i, r in enumerate(recs):
        note = f"{r['busbw_GBps']:.3g} GB/s" + ("  (cost model)" if r.get("cost_model_choice") else "")
        ax.text(r["time_us"] / 1e3, i, " " + note, va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
fig.tight_layout()
fig.savefig(png, dpi=110)
)PY";

}  // namespace

void plot_sim_records(SimPlotKind kind, const std::string& json_path, bool temporary,
                      const std::string& png_path, const std::string& title) {
  struct Cleanup {
    const std::string& path;
    bool remove;
    ~Cleanup() {
      if (remove) std::remove(path.c_str());
    }
  } cleanup{json_path, temporary};
  // The script on stdin; arguments are passed as argv, never through a shell's parsing.
  auto quote = [](const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  };
  // The project's Python (.venv/bin/python, which has matplotlib), or PLAIT_PYTHON's.
  const char* env = std::getenv("PLAIT_PYTHON");
  const std::string python = env && *env ? env : PLAIT_DEFAULT_PYTHON;
  const std::string command = quote(python) + " - " +
                              quote(kind == SimPlotKind::kSweep ? "sweep" : "algorithms") + " " +
                              quote(json_path) + " " + quote(png_path) + " " + quote(title);
  FILE* py = ::popen(command.c_str(), "w");
  if (!py)
    throw Error(ErrorCategory::kSystem, "plot: cannot start " + python + ": " + +
                                            std::strerror(errno));
  std::fputs(kScript, py);
  const int status = ::pclose(py);
  if (status != 0)
    throw Error(ErrorCategory::kSystem,
                "plot: " + python + " could not draw " + png_path + " (exit " +
                    std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                    "; its message is above)");
}

}  // namespace plait::cli
