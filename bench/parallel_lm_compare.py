#!/usr/bin/env python3
"""examples/parallel_lm.py's layouts on plait and on gloo, side by side, alternating backends.

    .venv/bin/python bench/parallel_lm_compare.py [--ranks 4] [--runs 3] [--steps 40]
        [--layouts ddp,fsdp,fsdp-noreshard,tp,tp-dp] [--timeline DIR]
        [-- extra parallel_lm.py args]
    .venv/bin/python bench/parallel_lm_compare.py --summarize FILE [--title TEXT]

Each (layout, backend) runs --runs times, the backends in turn, every rank on this host (plait
run: shared memory for plait, loopback tcp for gloo). Prints a markdown table: step time and
tokens/s as median (min-max) over the runs (each run's figure is its median step, the slowest
rank's), validation loss, and plait's median step over gloo's. --summarize prints the same
table from a file of RESULT lines (bench/parallel_lm_testbed.sh's runs).
"""
import argparse
import collections
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT = re.compile(r"RESULT (.*)")


def parse(line):
    return dict(kv.split("=") for kv in line.split())


def run(plait, python, ranks, layout, backend, steps, extra, timeline=None):
    cmd = [plait, "run", "-n", str(ranks), "--", python,
           os.path.join(ROOT, "examples", "parallel_lm.py"), "--layout", layout,
           "--backend", backend, "--steps", str(steps)] + extra
    if timeline:
        os.makedirs(timeline, exist_ok=True)
        schedule = extra[extra.index("--schedule") + 1] if "--schedule" in extra else ""
        cmd += ["--timeline", os.path.join(timeline, "-".join(
            x for x in (layout, schedule, backend) if x))]
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    found = RESULT.search(r.stdout + r.stderr)
    if not found:
        sys.stderr.write(f"{layout} {backend}: no RESULT (exit {r.returncode})\n"
                         f"{(r.stdout + r.stderr)[-2000:]}\n")
        return None
    return parse(found.group(1))


def cell(values, fmt):
    if not values:
        return "-"
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}–{fmt(max(values))})"


def print_table(results):
    """One row per (layout, schedule, backend) in the order first seen."""
    runs = collections.defaultdict(list)
    order = []
    for r in results:
        key = (r["layout"], r.get("schedule", "-"))
        if key not in order:
            order.append(key)
        runs[key + (r["backend"],)].append(r)
    print("| layout | schedule | backend | step (ms) | tokens/s | val loss | exposed comm (ms) "
          "| bubble | plait/gloo |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for key in order:
        med = {}
        for backend in ("plait", "gloo"):
            rs = runs[key + (backend,)]
            steps = [float(r["step_s"]) * 1e3 for r in rs]
            toks = [float(r["tokens_per_s"]) for r in rs]
            med[backend] = statistics.median(steps) if steps else None
            ratio = (f"{med['plait'] / med['gloo']:.2f}x"
                     if backend == "gloo" and med["plait"] and med["gloo"] else "")
            losses = ", ".join(sorted({r["val_loss"] for r in rs}))
            exposed = numbers(rs, "exposed_comm_s", 1e3)
            bubble = numbers(rs, "bubble", 100)
            print(f"| {key[0]} | {key[1]} | {backend} | {cell(steps, lambda v: f'{v:.1f}')} | "
                  f"{cell(toks, lambda v: f'{v:.0f}')} | {losses} | "
                  f"{cell(exposed, lambda v: f'{v:.1f}')} | "
                  f"{cell(bubble, lambda v: f'{v:.1f} %')} | {ratio} |")


def numbers(results, key, scale):
    """The runs' values of `key` that are numbers ("-" where the timeline was off or blind)."""
    out = []
    for r in results:
        try:
            out.append(float(r.get(key, "-")) * scale)
        except ValueError:
            pass
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--layouts", default="ddp,fsdp,fsdp-noreshard,tp,tp-dp")
    p.add_argument("--plait", default=os.path.join(ROOT, "build", "tools", "plait", "plait"))
    p.add_argument("--summarize", metavar="FILE", help="tabulate RESULT lines instead of running")
    p.add_argument("--title")
    p.add_argument("--timeline", metavar="DIR",
                   help="record each run with plait.torch.timeline; traces and charts in DIR")
    p.add_argument("extra", nargs="*")
    args = p.parse_args()
    if args.title:
        print(args.title)
    if args.summarize:
        with open(args.summarize) as f:
            print_table([parse(m.group(1)) for line in f if (m := RESULT.search(line))])
        return
    python = os.path.join(ROOT, ".venv", "bin", "python")
    results = []
    for layout in args.layouts.split(","):
        for _ in range(args.runs):
            for backend in ("plait", "gloo"):
                r = run(args.plait, python, args.ranks, layout, backend, args.steps, args.extra,
                        args.timeline)
                if r:
                    results.append(r)
    print_table(results)


if __name__ == "__main__":
    main()
