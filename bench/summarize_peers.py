"""Median table of plait bench (--json --check) and ../shared/peers/run.sh RESULT lines.

Every cell uses one statistic for every implementation: the slowest rank's mean time per
call (plait's time_us, the peers' max_us; not the peers' avg_us, a mean over ranks that a
collective does not finish by) and the busbw computed from it. A run whose result check
failed turns its cell into FAIL.
"""
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict


def us(t):
    """A time in µs: two decimals below 1 µs (where a tenth is a third of the value), else one."""
    return f"{t:.2f}" if t < 1 else f"{t:.1f}"


def main(out_dir, nps):
    # results[np][impl][bytes] -> list of (slowest rank's time_us, busbw, checked ok)
    results = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for path in glob.glob(os.path.join(out_dir, "plait*-np*.json")):
        # plait-np2-rep1-8.json is "plait"; plait-tcp-np2-... is "plait-tcp"
        m = re.match(r"(plait(?:-[a-z]+)?)-np(\d+)-", os.path.basename(path))
        impl, np_ = m.group(1), int(m.group(2))
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("wrong") is None:
                    sys.exit(f"{path}: no check result (was plait bench run with --check?)")
                results[np_][impl][r["bytes"]].append(
                    (r["time_us"], r["busbw_GBps"], r["wrong"] == 0))
    for path in glob.glob(os.path.join(out_dir, "peers-np*.txt")):
        np_ = int(re.search(r"np(\d+)", os.path.basename(path)).group(1))
        with open(path) as f:
            for line in f:
                if not line.startswith("RESULT"):
                    continue
                kv = dict(item.split("=", 1) for item in line.split()[1:])
                results[np_][kv["label"]][int(kv["bytes"])].append(
                    (float(kv["max_us"]), float(kv["busbw_GBps"]), kv.get("check") == "ok"))
    for np_ in [int(n) for n in nps.split()]:
        plaits = sorted(i for i in results[np_] if i.startswith("plait"))
        impls = plaits + sorted(i for i in results[np_] if not i.startswith("plait"))
        sizes = sorted({b for i in impls for b in results[np_][i]})
        runs_per_cell = sorted({len(results[np_][i][b]) for i in impls for b in results[np_][i]})
        print(f"\nallreduce f32 sum, np={np_}: slowest rank's mean time per call (us) / busbw "
              f"(GB/s, from that time, factor 2(n-1)/n); median (min-max) of "
              f"{'/'.join(map(str, runs_per_cell))} runs; results checked\n")
        print("| bytes | " + " | ".join(impls) + " |")
        print("|---:|" + "---:|" * len(impls))
        for b in sizes:
            cells = []
            for i in impls:
                runs = results[np_][i].get(b)
                if not runs:
                    cells.append("-")
                elif not all(r[2] for r in runs):
                    cells.append("FAIL")
                else:
                    times = sorted(r[0] for r in runs)
                    t = statistics.median(times)
                    bw = statistics.median(r[1] for r in runs)
                    spread = f" ({us(times[0])}-{us(times[-1])})" if len(times) > 1 else ""
                    cells.append(f"{us(t)}{spread} / {bw:.3f}")
            print(f"| {b} | " + " | ".join(cells) + " |")
        if "gloo" in impls:
            print("\n(gloo's all_reduce works in place; plait and MPI read one buffer and write "
                  "another.)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
