"""Median table of plait bench (--json) and ../shared/peers/run.sh RESULT lines."""
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict


def main(out_dir, nps):
    # results[np][impl][bytes] -> list of (time_us, busbw)
    results = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for path in glob.glob(os.path.join(out_dir, "plait-np*.json")):
        np_ = int(re.search(r"np(\d+)", os.path.basename(path)).group(1))
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                results[np_]["plait"][r["bytes"]].append((r["time_us"], r["busbw_GBps"]))
    for path in glob.glob(os.path.join(out_dir, "peers-np*.txt")):
        np_ = int(re.search(r"np(\d+)", os.path.basename(path)).group(1))
        with open(path) as f:
            for line in f:
                if not line.startswith("RESULT"):
                    continue
                kv = dict(item.split("=", 1) for item in line.split()[1:])
                results[np_][kv["label"]][int(kv["bytes"])].append(
                    (float(kv["avg_us"]), float(kv["busbw_GBps"])))
    for np_ in [int(n) for n in nps.split()]:
        impls = ["plait"] + sorted(i for i in results[np_] if i != "plait")
        sizes = sorted({b for i in impls for b in results[np_][i]})
        print(f"\nallreduce f32 sum, np={np_}: median time (us) / busbw (GB/s)\n")
        print("| bytes | " + " | ".join(impls) + " |")
        print("|---:|" + "---:|" * len(impls))
        for b in sizes:
            cells = []
            for i in impls:
                runs = results[np_][i].get(b)
                if not runs:
                    cells.append("-")
                    continue
                t = statistics.median(r[0] for r in runs)
                bw = statistics.median(r[1] for r in runs)
                cells.append(f"{t:.1f} / {bw:.3f}")
            print(f"| {b} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
