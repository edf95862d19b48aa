#!/usr/bin/env python3
"""The straggler experiment's table: examples/straggler_fashion_mnist.py with each method,
REPS runs each, interleaved (run r of every method before run r+1), the same trace for all.

    .venv/bin/python bench/straggler_table.py                       # 4 ranks, --trace 0.2:3
    REPS=3 RANKS=4 ARGS="--trace 0.2:3 --batch 960 --lr 0.1" .venv/bin/python bench/straggler_table.py
    METHODS="allreduce deadline@20 deadline@1000@1" ...   # method[@deadline_ms[@backup]]
    sudo ARGS="--trace 0.2:3 --batch 960 --lr 0.1 --slow-link 1:100mbit" .venv/bin/python ...

With --slow-link in ARGS every run goes on the network-namespace testbed (one rank per host,
examples/netns_testbed.py) instead of under plait run.

Prints a Markdown table: per method the median (min-max) of the epoch time, the test accuracy,
the p50 and p99 step times, and the mean share of the ranks a step went without (dropped)
and of rank-steps skipped to catch up.
"""
import os
import re
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PLAIT = os.environ.get("PLAIT", os.path.join(ROOT, "build", "tools", "plait", "plait"))
REPS = int(os.environ.get("REPS", "3"))
RANKS = os.environ.get("RANKS", "4")
ARGS = shlex.split(os.environ.get("ARGS", "--trace 0.2:3 --batch 960 --lr 0.1"))
METHODS = [m.split("@") for m in os.environ.get(
    "METHODS", "gloo allreduce deadline@20 deadline-carry@20 deadline@1000@1").split()]

FIELDS = ("test_accuracy", "epoch_s", "step_p50_ms", "step_p99_ms", "dropped", "skipped")


def command(ranks, example, args):
    """Runs examples/`example` with `args` on `ranks` ranks."""
    script = os.path.join(ROOT, "examples", example)
    if "--slow-link" in ARGS:  # the example builds the testbed and starts its ranks itself
        return [".venv/bin/python", script, *args, "--ranks", str(ranks)]
    return [PLAIT, "run", "-n", str(ranks), "--", ".venv/bin/python", script, *args]


# ps-bsp, ps-asp, ps-ssp@S (staleness), ps-bsp@0@B (backup workers): the parameter server
# example with one more rank (its server), each worker taking batch / RANKS per step.
def ps_command(mode, staleness=None, backup=None):
    batch = int(ARGS[ARGS.index("--batch") + 1]) if "--batch" in ARGS else 960
    rest = [a for i, a in enumerate(ARGS)
            if a not in ("--batch", "--lr") and (i == 0 or ARGS[i - 1] not in ("--batch", "--lr"))]
    cmd = command(int(RANKS) + 1, "ps_fashion_mnist.py",
                  ["--servers", "1", "--epochs", "1", "--mode", mode,
                   "--batch-size", str(batch // int(RANKS)), "--lr", "0.002", *rest])
    if staleness and staleness != "0":
        cmd += ["--staleness", staleness]
    if backup:
        cmd += ["--backup", backup]
    return cmd


def run(method, deadline=None, backup=None):
    if method.startswith("ps-"):
        cmd = ps_command(method[3:], deadline, backup)
    else:
        cmd = command(int(RANKS), "straggler_fashion_mnist.py", ["--aggregate", method, *ARGS])
    if deadline and not method.startswith("ps-"):
        cmd += ["--deadline-ms", deadline]
    if backup and not method.startswith("ps-"):
        cmd += ["--backup", backup]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "build", "python")}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    m = re.search(r"RESULT .*", out.stdout)
    if out.returncode != 0 or not m:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    got = {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", m.group(0)) if k in FIELDS}
    return {k: got.get(k, 0.0) for k in FIELDS}


def cell(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


results = {tuple(m): [] for m in METHODS}
for rep in range(REPS):
    for m in METHODS:
        results[tuple(m)].append(run(*m))
        print(f"run {rep + 1}/{REPS} {'@'.join(m)}: {results[tuple(m)][-1]}", file=sys.stderr, flush=True)

print(f"{RANKS} ranks, {' '.join(ARGS)}; median (min–max) of {REPS} runs")
print()
print("| method | epoch s | test accuracy | step p50 ms | step p99 ms | p99/p50 | dropped | skipped |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for m, rs in results.items():
    if m[0].startswith("ps-"):
        name = m[0] + (f" staleness {m[1]}" if len(m) > 1 and m[1] != "0" else "") + \
            (f" backup {m[2]}" if len(m) > 2 else "")
    else:
        name = m[0] + (f" ({m[1]} ms" + (f", backup {m[2]})" if len(m) > 2 else ")") if len(m) > 1 else "")
    col = {k: [r[k] for r in rs] for k in FIELDS}
    ratio = [r["step_p99_ms"] / r["step_p50_ms"] for r in rs]
    print(f"| {name} | {cell(col['epoch_s'], '{:.2f}')} | {cell(col['test_accuracy'], '{:.4f}')} | "
          f"{cell(col['step_p50_ms'], '{:.1f}')} | {cell(col['step_p99_ms'], '{:.1f}')} | "
          f"{statistics.median(ratio):.2f} | {statistics.median(col['dropped']):.3f} | "
          f"{statistics.median(col['skipped']):.3f} |")
