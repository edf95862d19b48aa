#!/usr/bin/env python3
"""Median (min-max) over several bench/torch_compare.sh sweep runs, plait against gloo.

    for i in 1 2 3 4 5; do bench/torch_compare.sh -n "2 4" --out /tmp/tc/$i -- --factor 8; done
    .venv/bin/python bench/torch_compare_summary.py /tmp/tc/*

Prints one markdown table per rank count: bytes, plait µs and gloo µs as median (min-max) over
the runs (each run's number is the median over iterations of the slowest rank's time), and
plait's median over gloo's. A size whose correctness check failed in any run shows FAIL.
"""
import glob
import json
import os
import statistics
import sys


def cell(values):
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def main(dirs):
    runs = {}  # (n, backend) -> bytes -> [time_us]
    failed = set()
    for d in dirs:
        for path in glob.glob(os.path.join(d, "sweep_*_n*.json")):
            with open(path) as f:
                doc = json.load(f)
            key = (doc["world_size"], doc["backend"])
            for r in doc["rows"]:
                runs.setdefault(key, {}).setdefault(r["bytes"], []).append(r["time_us"])
                if r["check"] == "FAIL":
                    failed.add(key + (r["bytes"],))
    for n in sorted({k[0] for k in runs}):
        plait, gloo = runs.get((n, "plait"), {}), runs.get((n, "gloo"), {})
        reps = max((len(v) for v in list(plait.values()) + list(gloo.values())), default=0)
        print(f"\n### {n} ranks: dist.all_reduce, float32, µs, median (min–max) of {reps} runs\n")
        print("| bytes | plait | gloo | plait / gloo |\n|---:|---:|---:|---:|")
        for b in sorted(set(plait) | set(gloo)):
            p, g = plait.get(b, []), gloo.get(b, [])
            ratio = f"{statistics.median(p) / statistics.median(g):.2f}" if p and g else "-"
            pc = "FAIL" if (n, "plait", b) in failed else cell(p)
            gc = "FAIL" if (n, "gloo", b) in failed else cell(g)
            print(f"| {b} | {pc} | {gc} | {ratio} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
