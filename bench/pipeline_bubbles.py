#!/usr/bin/env python3
"""The pipeline bubble plait.torch.timeline measures, beside each schedule's closed form, and
what the timeline costs a step.

    .venv/bin/python bench/pipeline_bubbles.py [--ranks 2] [--runs 3] [--microbatches 4,8,16]
        [--schedules gpipe,1f1b,interleaved-1f1b,zero-bubble] [--steps 20] [--out DIR]
    .venv/bin/python bench/pipeline_bubbles.py --overhead [--layouts pp:1f1b,fsdp,tp]

Bubbles: examples/parallel_lm.py --layout pp over --ranks ranks of this host (plait backend,
--layers 8) under each schedule and microbatch count, --runs times. A row: step time, the
bubble a rank a step (median, min-max over the runs; each run's figure is its median step),
the closed form computed from that run's measured forward and backward times, and measured
over closed. --out keeps each run's trace and Gantt chart.

--overhead: each layout with and without --timeline, alternating, --runs times each: the
median step both ways and their ratio.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT = re.compile(r"RESULT (.*)")


def run(args, layout, schedule, microbatches, timeline):
    cmd = [args.plait, "run", "-n", str(args.ranks), "--", args.python,
           os.path.join(ROOT, "examples", "parallel_lm.py"), "--layout", layout,
           "--steps", str(args.steps), "--layers", "8", "--microbatches", str(microbatches)]
    if schedule:
        cmd += ["--schedule", schedule]
    if timeline:
        cmd += ["--timeline", timeline]
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    found = RESULT.search(r.stdout + r.stderr)
    if not found:
        sys.exit(f"{layout} {schedule}: no RESULT (exit {r.returncode})\n"
                 f"{(r.stdout + r.stderr)[-3000:]}")
    return dict(kv.split("=") for kv in found.group(1).split())


def cell(values, fmt="{:.2f}"):
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}–{fmt.format(max(values))})")


def bubbles(args, out):
    print(f"| schedule | m | step (ms) | bubble measured (ms) | closed form (ms) | "
          f"measured/closed |")
    print("|---|---:|---:|---:|---:|---:|")
    for schedule in args.schedules.split(","):
        for m in (int(x) for x in args.microbatches.split(",")):
            rs = [run(args, "pp", schedule, m, os.path.join(out, f"{schedule}-m{m}-{i}"))
                  for i in range(args.runs)]
            step = [float(r["step_s"]) * 1e3 for r in rs]
            measured = [float(r["bubble_s"]) * 1e3 for r in rs]
            closed = [float(r["bubble_closed_s"]) * 1e3 for r in rs]
            ratio = [a / b for a, b in zip(measured, closed) if b > 0]
            print(f"| {schedule} | {m} | {cell(step, '{:.1f}')} | {cell(measured)} | "
                  f"{cell(closed)} | {cell(ratio) if ratio else '-'} |", flush=True)


def overhead(args, out):
    print("| layout | step without (ms) | step with timeline (ms) | with/without |")
    print("|---|---:|---:|---:|")
    for spec in args.layouts.split(","):
        layout, _, schedule = spec.partition(":")
        without, with_ = [], []
        for i in range(args.runs):
            without.append(float(run(args, layout, schedule, 8, None)["step_s"]) * 1e3)
            with_.append(float(run(args, layout, schedule, 8,
                                   os.path.join(out, f"{layout}-{i}"))["step_s"]) * 1e3)
        print(f"| {spec} | {cell(without, '{:.1f}')} | {cell(with_, '{:.1f}')} | "
              f"{statistics.median(with_) / statistics.median(without):.3f} |", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--microbatches", default="4,8,16")
    p.add_argument("--schedules", default="gpipe,1f1b,interleaved-1f1b,zero-bubble")
    p.add_argument("--overhead", action="store_true")
    p.add_argument("--layouts", default="pp:1f1b,fsdp,tp")
    p.add_argument("--out", help="keep the traces and charts here")
    p.add_argument("--plait", default=os.path.join(ROOT, "build", "tools", "plait", "plait"))
    p.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or scratch
        os.makedirs(out, exist_ok=True)
        (overhead if args.overhead else bubbles)(args, out)


if __name__ == "__main__":
    main()
