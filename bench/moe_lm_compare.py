"""examples/moe_lm.py with and without hot-expert replication, on plait and on gloo, REPS times
each in turn: step time, tokens/s, the busiest rank's rows over the mean, validation loss.

    .venv/bin/python bench/moe_lm_compare.py                        # 4 ranks, zipf:1.2, K=5
    .venv/bin/python bench/moe_lm_compare.py --cpu-share --reps 3   # each rank its own share
    .venv/bin/python bench/moe_lm_compare.py --ranks 2 --extra "--batch 64"

Ranks that share a host lend their idle CPU to a busy one. So on a host with fewer cores than
ranks, the straggler that a skewed routing makes is hidden: the others' waiting gives it their
cores. --cpu-share runs each rank in a CPU cgroup of its own (bench/cpu_share.sh), capped at
cores / ranks, as ranks on machines of their own are (needs root).

The table gives the median (min-max) over the reps of each run's median step (the slowest
rank's), and the speedup of replication over none on the same backend.
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(a, backend, every, plait_bin, env):
    cmd = [plait_bin, "run", "-n", str(a.ranks), "--"]
    if a.cpu_share:
        cmd.append(os.path.join(HERE, "cpu_share.sh"))
    cmd += [sys.executable, os.path.join(ROOT, "examples", "moe_lm.py"), "--backend", backend, "--skew", a.skew,
            "--replicate-every", str(every), "--steps", str(a.steps)] + a.extra.split()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    lines = [ln for ln in r.stdout.splitlines() if "RESULT " in ln]
    if not lines:
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
        raise SystemExit(f"moe_lm_compare: {backend} replicate_every={every} failed")
    if r.returncode != 0:  # gloo sometimes aborts in its teardown, after the run's RESULT
        sys.stderr.write(f"moe_lm_compare: {backend} replicate_every={every} exited {r.returncode} "
                         f"after its RESULT line\n")
    return dict(kv.split("=", 1) for kv in lines[-1].split("RESULT ", 1)[1].split())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--skew", default="zipf:1.2")
    p.add_argument("--every", type=int, default=5, help="--replicate-every of the replicated runs")
    p.add_argument("--backends", default="plait,gloo")
    p.add_argument("--cpu-share", action="store_true")
    p.add_argument("--extra", default="--batch 64", help="more arguments of examples/moe_lm.py")
    a = p.parse_args()
    plait_bin = os.environ.get("PLAIT_BIN", os.path.join(ROOT, "build", "tools", "plait", "plait"))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"), OMP_NUM_THREADS="1")
    results = {}
    for _ in range(a.reps):
        for backend in a.backends.split(","):
            for every in (0, a.every):
                results.setdefault((backend, every), []).append(run(a, backend, every, plait_bin, env))

    def fmt(values, digits=3):
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"

    share = ", each rank capped at cores/ranks (cpu_share.sh)" if a.cpu_share else ", ranks sharing the cores"
    print(f"# examples/moe_lm.py {a.extra}, {a.ranks} ranks{share}, skew {a.skew}, {a.steps} steps, "
          f"{a.reps} reps; median (min-max)")
    print()
    print("| backend | replicate every | step (s) | tokens/s | max/mean rows | val loss | experts moved | speedup |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for (backend, every), rs in results.items():
        step = [float(r["step_s"]) for r in rs]
        base = [float(r["step_s"]) for r in results[(backend, 0)]]
        speed = f"{statistics.median(base) / statistics.median(step):.2f}x" if every else ""
        print(f"| {backend} | {every or 'off'} | {fmt(step)} | {fmt([float(r['tokens_per_s']) for r in rs], 0)} | "
              f"{fmt([float(r['max_over_mean']) for r in rs], 2)} | {fmt([float(r['val_loss']) for r in rs], 4)} | "
              f"{fmt([float(r['moves']) for r in rs], 0)} | {speed} |")
    if "plait" in a.backends and "gloo" in a.backends:
        for every in (0, a.every):
            pl = statistics.median(float(r["step_s"]) for r in results[("plait", every)])
            gl = statistics.median(float(r["step_s"]) for r in results[("gloo", every)])
            print(f"\nplait/gloo step time, replicate every {every or 'off'}: {pl / gl:.2f}x")


if __name__ == "__main__":
    main()
