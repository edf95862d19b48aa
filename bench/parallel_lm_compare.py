#!/usr/bin/env python3
"""examples/parallel_lm.py's layouts on plait and on gloo, side by side, alternating backends.

    .venv/bin/python bench/parallel_lm_compare.py [--ranks 4] [--runs 3] [--steps 40]
        [--layouts ddp,fsdp,fsdp-noreshard,tp,tp-dp] [-- extra parallel_lm.py args]

Each (layout, backend) runs --runs times, the backends in turn, every rank on this host (plait
run: shared memory for plait, loopback tcp for gloo). Prints a markdown table: step time and
tokens/s as median (min-max) over the runs (each run's figure is its median step, the slowest
rank's), validation loss, and plait's median step over gloo's.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT = re.compile(r"RESULT (.*)")


def run(plait, python, ranks, layout, backend, steps, extra):
    cmd = [plait, "run", "-n", str(ranks), "--", python,
           os.path.join(ROOT, "examples", "parallel_lm.py"), "--layout", layout,
           "--backend", backend, "--steps", str(steps)] + extra
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    found = RESULT.search(r.stdout + r.stderr)
    if not found:
        sys.stderr.write(f"{layout} {backend}: no RESULT (exit {r.returncode})\n"
                         f"{(r.stdout + r.stderr)[-2000:]}\n")
        return None
    return dict(kv.split("=") for kv in found.group(1).split())


def cell(values, fmt):
    if not values:
        return "-"
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}–{fmt(max(values))})"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--layouts", default="ddp,fsdp,fsdp-noreshard,tp,tp-dp")
    p.add_argument("--plait", default=os.path.join(ROOT, "build", "tools", "plait", "plait"))
    p.add_argument("extra", nargs="*")
    args = p.parse_args()
    python = os.path.join(ROOT, ".venv", "bin", "python")
    rows = []
    for layout in args.layouts.split(","):
        got = {"plait": [], "gloo": []}
        for _ in range(args.runs):
            for backend in ("plait", "gloo"):
                r = run(args.plait, python, args.ranks, layout, backend, args.steps, args.extra)
                if r:
                    got[backend].append(r)
        rows.append((layout, got))
    print(f"| layout | backend | step (ms) | tokens/s | val loss | plait/gloo |")
    print("|---|---|---:|---:|---:|---:|")
    for layout, got in rows:
        med = {}
        for backend in ("plait", "gloo"):
            steps = [float(r["step_s"]) * 1e3 for r in got[backend]]
            toks = [float(r["tokens_per_s"]) for r in got[backend]]
            losses = sorted({r["val_loss"] for r in got[backend]})
            med[backend] = statistics.median(steps) if steps else None
            ratio = (f"{med['plait'] / med['gloo']:.2f}x" if backend == "gloo" and
                     med.get("plait") and med.get("gloo") else "")
            print(f"| {layout} | {backend} | {cell(steps, lambda v: f'{v:.1f}')} | "
                  f"{cell(toks, lambda v: f'{v:.0f}')} | {', '.join(losses)} | {ratio} |")


if __name__ == "__main__":
    main()
