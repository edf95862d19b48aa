"""The chart of bench/train_projection.sh: step time of every layout plait sim train replayed,
a panel per topology family, a group of bars per rank count (fastest first), the best marked."""
import collections
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def family(topology):
    return topology.split(":", 1)[0]


def main(records, png):
    rows = [json.loads(line) for line in open(records) if line.strip()]
    panels = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        panels[family(r["topology"])][r["ranks"]].append(r)
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5), squeeze=False)
    for ax, (name, by_ranks) in zip(axes[0], sorted(panels.items())):
        x, ticks, labels = 0, [], []
        for ranks, group in sorted(by_ranks.items()):
            group.sort(key=lambda r: r["step_s"])
            for i, r in enumerate(group):
                label = f"pp{r['pp']} {'i' if r['schedule'] == 'interleaved-1f1b' else ''}1f1b"
                ax.bar(x, r["step_s"], color="#d62728" if i == 0 else "#4c78a8")
                ax.bar(x, r["compute_s"], color="#9d9d9d", width=0.4)
                ticks.append(x)
                labels.append(label)
                x += 1
            ax.text(x - len(group) / 2 - 0.5, max(r["step_s"] for r in group) * 1.02,
                    f"{ranks} ranks", ha="center")
            x += 1
        ax.set_xticks(ticks)
        ax.set_xticklabels(labels, rotation=60, fontsize=8)
        ax.set_ylabel("step (s): red the best, grey its compute (median rank)")
        ax.set_title(f"{name}: dp x tp 8 x pp, gpt-39b, 2,048 sequences a step")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
