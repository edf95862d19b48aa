#!/usr/bin/env python3
"""The conformance verdict for one world size: every test of torch's DistributedTest suite that
passes on gloo must pass on plait, under plait's own name or (for the suite's tests gated to
the name "gloo") under gloo's; the exceptions are named in exceptions.tsv with their reasons.

    verdict.py GLOO_DIR PLAIT_DIR PLAIT_AS_GLOO_DIR [--exceptions exceptions.tsv]

Prints a markdown table and exits 1 when a test that passes on gloo fails on plait without an
exception."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import load  # noqa: E402


def exceptions(path):
    named = {}
    with open(path) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                name, reason = line.rstrip("\n").split("\t", 1)
                named[name] = reason
    return named


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("gloo")
    ap.add_argument("plait")
    ap.add_argument("plait_as_gloo", help="the rerun of the gap under the name gloo (may be empty)")
    ap.add_argument("--exceptions", default=os.path.join(os.path.dirname(__file__), "exceptions.tsv"))
    args = ap.parse_args()
    gloo, plait = load(args.gloo), load(args.plait)
    as_gloo = load(args.plait_as_gloo) if os.path.exists(
        os.path.join(args.plait_as_gloo, "results.tsv")) else {}
    named = exceptions(args.exceptions)

    passed_gloo = {n for n, v in gloo.items() if v[0] == "passed"}
    own = {n for n in passed_gloo if plait.get(n, ("",))[0] == "passed"}
    renamed = {n for n in passed_gloo - own if as_gloo.get(n, ("",))[0] == "passed"}
    gap = sorted(passed_gloo - own - renamed)
    excused = [n for n in gap if n in named]
    unexcused = [n for n in gap if n not in named]
    # plait's own failures among tests gloo does not pass (skipped there) count too.
    broken = sorted(n for n, v in plait.items() if v[0] in ("failed", "errored", "missing")
                    and n not in passed_gloo and n not in named)

    ws = os.path.basename(os.path.normpath(args.gloo)).rsplit("-", 1)[-1]
    print(f"| ranks | tests | pass on gloo | pass on plait | of them under gloo's name "
          f"| named exceptions | pass on gloo, fail on plait |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {ws} | {len(gloo)} | {len(passed_gloo)} | {len(own) + len(renamed)} | "
          f"{len(renamed)} | {len(excused)} | {len(unexcused) + len(broken)} |")
    for n in excused:
        print(f"\n- exception `{n}`: {named[n]}")
    for n in unexcused + broken:
        o, _, d = as_gloo.get(n) or plait.get(n, ("not run", "", ""))
        print(f"\n- FAIL `{n}`: {o}: {d}")
    return 1 if unexcused or broken else 0


if __name__ == "__main__":
    sys.exit(main())
