#!/usr/bin/python3
"""Compare two run_suite.sh result dirs, e.g.

    tests/torch_conformance/compare.py /tmp/conformance/gloo-2 /tmp/conformance/plait-2

Prints (markdown): the pass/skip/fail counts side by side, the tests that pass for
the first (reference) run but not for the second (with the second's outcome and
detail), every test that failed or errored in the second run, and the tests that
pass in the second run only.
"""

import argparse
import os
import sys

OUTCOMES = ("passed", "skipped", "failed", "errored", "missing")


def load(d):
    """name -> (outcome, seconds, detail) from results.tsv, plus missing.txt."""
    res = {}
    path = os.path.join(d, "results.tsv")
    if not os.path.exists(path):
        sys.exit(f"{path}: no such file (not a run_suite.sh output dir?)")
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 2:
                continue
            name, outcome = parts[0], parts[1]
            secs = parts[2] if len(parts) > 2 else ""
            detail = parts[3] if len(parts) > 3 else ""
            res[name] = (outcome, secs, detail)
    missing = os.path.join(d, "missing.txt")
    if os.path.exists(missing):
        with open(missing) as f:
            for name in f.read().split():
                res.setdefault(name, ("missing", "", "never reported (run killed?)"))
    return res


def cell(s, width=160):
    s = s.replace("|", "\\|")
    return s if len(s) <= width else s[: width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reference", help="result dir of the reference run (e.g. gloo-2)")
    ap.add_argument("other", help="result dir of the run under test (e.g. plait-2)")
    ap.add_argument("--width", type=int, default=160, help="truncate details to this many chars")
    args = ap.parse_args()

    a, b = load(args.reference), load(args.other)
    na = os.path.basename(os.path.normpath(args.reference))
    nb = os.path.basename(os.path.normpath(args.other))

    print(f"## Counts\n\n| outcome | {na} | {nb} |\n|---|---:|---:|")
    for o in OUTCOMES:
        print(f"| {o} | {sum(v[0] == o for v in a.values())} | {sum(v[0] == o for v in b.values())} |")
    print(f"| total | {len(a)} | {len(b)} |")

    regress = sorted(n for n, v in a.items() if v[0] == "passed" and b.get(n, ("not run",))[0] != "passed")
    print(f"\n## Passing for {na}, not passing for {nb} ({len(regress)})\n")
    if regress:
        print(f"| test | {nb} | detail |\n|---|---|---|")
        for n in regress:
            o, _, d = b.get(n, ("not run", "", ""))
            print(f"| {n} | {o} | {cell(d, args.width)} |")

    bad = sorted(n for n, v in b.items() if v[0] in ("failed", "errored", "missing"))
    print(f"\n## Failed / errored / missing for {nb} ({len(bad)})\n")
    if bad:
        print(f"| test | {nb} | {na} | s | detail |\n|---|---|---|---:|---|")
        for n in bad:
            o, s, d = b[n]
            print(f"| {n} | {o} | {a.get(n, ('not run',))[0]} | {s} | {cell(d, args.width)} |")

    better = sorted(n for n, v in b.items() if v[0] == "passed" and a.get(n, ("not run",))[0] != "passed")
    print(f"\n## Passing for {nb} only ({len(better)})\n")
    for n in better:
        print(f"- {n} ({na}: {a.get(n, ('not run',))[0]})")


if __name__ == "__main__":
    main()
