#!/usr/bin/env python3
"""Several runs of examples/compression_tradeoff.py in one table: median (min-max) per config.

    bench/tradeoff_summary.py RUN_DIR... [--rate 1gbit]

Each RUN_DIR is an --out of compression_tradeoff.py (its tradeoff.json). Per configuration
(and PowerSGD rank: a config run with --powersgd-rank 8 is its own row), over the runs:
seconds per iteration, iterations and seconds to the target, the ratio of seconds to the
target against DDP's fp32 all-reduce on gloo in the same run (so a run's load hits both),
the final accuracy, MB each rank sent per iteration, the compression ratio, seconds spent
compressing per iteration and the bucket sizes.
"""
import argparse
import json
import os
import statistics
import sys


def spread(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    med = statistics.median(values)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def label(r, ranks):
    name = r["config"]
    if r["method"] in ("powersgd", "torch-powersgd", "auto") and r.get("powersgd_rank") not in (None, 4):
        name += f" rank {r['powersgd_rank']}"
    return name


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="--out directories; a name ending in -r<k> holds PowerSGD rank k")
    p.add_argument("--rate", default="1gbit")
    args = p.parse_args(argv)
    rows, order, base = {}, [], {}
    for d in args.runs:
        with open(os.path.join(d, "tradeoff.json")) as f:
            records = [r for r in json.load(f) if r["rate"] == args.rate]
        run = os.path.basename(os.path.normpath(d)).split("-r")[0]
        rank = int(d.rstrip("/").rsplit("-r", 1)[1]) if "-r" in os.path.basename(d.rstrip("/")) else 4
        for r in records:
            r["powersgd_rank"], r["run"] = rank, run
            if r["method"] == "default" and r["backend"] == "gloo":
                base[run] = r
            key = label(r, rank)
            if key not in rows:
                rows[key] = []
                order.append(key)
            rows[key].append(r)
    print(f"| config | runs | s/iter | iters to {records[0]['target']:.2f} | s to target | vs fp32 on gloo "
          "(same run) | final accuracy | MB sent/iter/rank | ratio | compress s/iter | buckets (MB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for key in order:
        rs = rows[key]
        vs = [r["seconds_to_target"] / base[r["run"]]["seconds_to_target"]
              for r in rs if r["seconds_to_target"] and r["run"] in base and base[r["run"]]["seconds_to_target"]]
        ratio = [2 * (r["ranks"] - 1) / r["ranks"] * r["fp32_bytes_per_iter"] / max(1, r["sent_bytes_per_iter"])
                 for r in rs]
        buckets = sorted({" + ".join(f"{int(b) / 1e6:.1f}" for b in str(r.get("bucket_bytes", "")).replace(",", " ")
                                     .split() if b.isdigit()) for r in rs})
        stopped = [r["steps"] for r in rs if r["steps"] < r.get("planned_steps", r["steps"])]
        final = spread([r["final_accuracy"] for r in rs], "{:.4f}")
        if stopped:
            final += f" (budget: steps {', '.join(map(str, stopped))})"
        print(f"| {key} | {len(rs)} | {spread([r['s_per_iter'] for r in rs], '{:.3f}')} | "
              f"{spread([r['steps_to_target'] for r in rs], '{}')} | "
              f"{spread([r['seconds_to_target'] for r in rs], '{:.1f}')} | {spread(vs, '{:.2f}x')} | {final} | "
              f"{spread([r['sent_bytes_per_iter'] / 1e6 for r in rs], '{:.2f}')} | {spread(ratio, '{:.1f}x')} | "
              f"{spread([r['compress_s_per_iter'] for r in rs], '{:.4f}')} | {', '.join(buckets) or '?'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
