#!/usr/bin/env bash
# Compares the torch.distributed backends plait and gloo on this host.
#
#   bench/torch_compare.sh [sweep] [-n "2 4"] [--out DIR] [-- torch_sweep.py options...]
#       runs bench/torch_sweep.py with --backend plait, then --backend gloo, at each N and prints
#       one table per N:  bytes | plait µs | plait busbw | gloo µs | gloo busbw
#       e.g.  bench/torch_compare.sh -n 4 -- --op all_gather --max 16M
#   bench/torch_compare.sh ddp [-n "4"] [--out DIR] [-- ddp_fashion_mnist.py options...]
#       runs examples/ddp_fashion_mnist.py with both backends at each N and prints the RESULT lines.
#
# Ranks are started with build/tools/plait/plait run -n N, or with torchrun when LAUNCHER=torchrun
# or when the plait binary is missing. The plait backend is skipped, with a message, when
# `import plait.torch` fails (build/python is put on PYTHONPATH). Every run's full output and the
# sweep JSON files are kept in --out DIR (default: a new directory under ${TMPDIR:-/tmp}).
#
# Environment: PYTHON (default .venv/bin/python, which must have torch), PLAIT (the plait binary),
# LAUNCHER (plait | torchrun), TIMEOUT (seconds per run, default 600).
# Exit status: 0 when every run that was attempted succeeded, 1 otherwise, 2 on a usage error.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-.venv/bin/python}"
PLAIT="${PLAIT:-$ROOT/build/tools/plait/plait}"
TIMEOUT="${TIMEOUT:-600}"
MODE=sweep
NS=""
OUT=""
EXTRA=()

usage() { sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        sweep|ddp) MODE="$1" ;;
        -n|--nproc) NS="${2:?-n needs a value, e.g. -n \"2 4\"}"; shift ;;
        --out) OUT="${2:?--out needs a directory}"; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "torch_compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [[ -z "$NS" ]]; then
    if [[ "$MODE" == ddp ]]; then NS="4"; else NS="2 4"; fi
fi
for n in $NS; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "torch_compare.sh: bad rank count '$n'" >&2; exit 2; }
done

if ! "$PYTHON" -c 'import torch.distributed' 2>/dev/null; then
    echo "torch_compare.sh: $PYTHON has no torch.distributed (set PYTHON=...)" >&2
    exit 1
fi
if [[ -z "${LAUNCHER:-}" ]]; then
    if [[ -x "$PLAIT" ]]; then LAUNCHER=plait; else LAUNCHER=torchrun; fi
fi
case "$LAUNCHER" in
    plait) [[ -x "$PLAIT" ]] || { echo "torch_compare.sh: $PLAIT not found (cmake --build --preset release --target plait)" >&2; exit 1; } ;;
    torchrun) ;;
    *) echo "torch_compare.sh: LAUNCHER must be plait or torchrun" >&2; exit 2 ;;
esac

export PYTHONPATH="$ROOT/build/python${PYTHONPATH:+:$PYTHONPATH}"
BACKENDS=()
if err="$("$PYTHON" -c 'import plait.torch' 2>&1)"; then
    BACKENDS+=(plait)
else
    echo "torch_compare.sh: skipping backend plait: import plait.torch failed: $(printf '%s\n' "$err" | tail -n 1)"
fi
BACKENDS+=(gloo)

if [[ -z "$OUT" ]]; then OUT="$(mktemp -d "${TMPDIR:-/tmp}/torch_compare.XXXXXX")"; fi
mkdir -p "$OUT"
echo "torch_compare.sh: mode=$MODE ranks=[$NS] backends=[${BACKENDS[*]}] launcher=$LAUNCHER logs=$OUT"

# launch N LOG command... : runs N ranks of the command, output to LOG; returns the job's status.
launch() {
    local n="$1" log="$2"; shift 2
    local status=0
    if [[ "$LAUNCHER" == plait ]]; then
        "$PLAIT" run -n "$n" --timeout "$TIMEOUT" -- "$PYTHON" "$@" >"$log" 2>&1 || status=$?
    else
        # --redirects 1 --tee 1: Debian's torch 1.13 torchrun cannot parse its default
        # "--redirects 0" on Python 3.11; this form works there and elsewhere.
        timeout "$TIMEOUT" "$PYTHON" -m torch.distributed.run --redirects 1 --tee 1 \
            --nproc_per_node "$n" "$@" >"$log" 2>&1 || status=$?
    fi
    return "$status"
}

failed=0
fail() {  # fail LOG WHAT
    echo "torch_compare.sh: $2 failed; last lines of $1:" >&2
    tail -n 15 "$1" >&2
    failed=1
}

if [[ "$MODE" == sweep ]]; then
    for n in $NS; do
        jsons=()
        for b in "${BACKENDS[@]}"; do
            json="$OUT/sweep_${b}_n${n}.json"
            log="$OUT/sweep_${b}_n${n}.log"
            rm -f "$json"
            echo "torch_compare.sh: sweep backend=$b n=$n ..."
            if launch "$n" "$log" "$ROOT/bench/torch_sweep.py" --backend "$b" --json "$json" \
                    ${EXTRA[@]+"${EXTRA[@]}"} && [[ -s "$json" ]]; then
                jsons+=("$b=$json")
            elif grep -q "supports neither" "$log"; then
                echo "torch_compare.sh: skipping backend $b: $(grep -m1 -o 'backend .* supports neither.*' "$log")"
            else
                fail "$log" "sweep backend=$b n=$n"
            fi
        done
        [[ ${#jsons[@]} -gt 0 ]] || continue
        "$PYTHON" - "$n" "${jsons[@]}" <<'EOF'
import json, sys

n = sys.argv[1]
runs = {}
for arg in sys.argv[2:]:
    backend, path = arg.split("=", 1)
    with open(path) as f:
        runs[backend] = json.load(f)
meta = next(iter(runs.values()))
print(f"\n## {meta['op']}  n={n}  float32  time = median of max over ranks, busbw in GB/s")
print("# implementation: " + "; ".join(
    f"{b}: " + ", ".join(sorted({r['impl'] for r in d['rows']})) for b, d in runs.items()))
print()
cols = ["bytes", "plait µs", "plait busbw", "gloo µs", "gloo busbw"]
print("| " + " | ".join(f"{c:>12}" for c in cols) + " |")
print("|" + "|".join("-" * 14 for _ in cols) + "|")
rows = {}
for backend, doc in runs.items():
    for r in doc["rows"]:
        rows.setdefault(r["bytes"], {})[backend] = r
for nbytes in sorted(rows):
    cells = [f"{nbytes:>12}"]
    for backend in ("plait", "gloo"):
        r = rows[nbytes].get(backend)
        if r is None:
            cells += [f"{'-':>12}", f"{'-':>12}"]
        else:
            flag = "" if r.get("check") in ("ok", "-") else "!"
            cells += [f"{r['time_us']:>11.1f}{flag:1}", f"{r['busbw_GBps']:>12.4f}"]
    print("| " + " | ".join(cells) + " |")
if any(r.get("check") == "FAIL" for doc in runs.values() for r in doc["rows"]):
    print("(! = failed the correctness check)")
EOF
    done
else
    results=()
    for n in $NS; do
        for b in "${BACKENDS[@]}"; do
            log="$OUT/ddp_${b}_n${n}.log"
            echo "torch_compare.sh: ddp backend=$b n=$n ..."
            start=$(date +%s.%N)
            if launch "$n" "$log" "$ROOT/examples/ddp_fashion_mnist.py" --backend "$b" \
                    ${EXTRA[@]+"${EXTRA[@]}"}; then
                wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
                line="$(grep -o 'RESULT .*' "$log" | tail -n 1 || true)"
                if [[ -n "$line" ]]; then
                    results+=("backend=$b n=$n wall_s=$wall $line")
                else
                    fail "$log" "ddp backend=$b n=$n (no RESULT line)"
                fi
            else
                fail "$log" "ddp backend=$b n=$n"
            fi
        done
    done
    echo
    for r in ${results[@]+"${results[@]}"}; do echo "$r"; done
fi
exit "$failed"
