"""plait.torch.moe's dispatch + combine against the all_to_all_single dispatcher on gloo, in one
run: the backends in turn, REPS times, the same routing on both.

    .venv/bin/python bench/moe_compare.py                     # 4 ranks here, 128 and 4096 tokens
    .venv/bin/python bench/moe_compare.py --ranks 4 --reps 3 --tokens 128,4096 --skew zipf:1.2
    bench/moe_testbed.sh                                      # 4 namespace hosts at 1 Gbit/s

On plait, every path is measured: the cost model's choice ("auto"), each path forced, and the
all_to_all_single dispatcher on the plait group. On gloo, only the all_to_all_single one runs.
A call's time is the slowest rank's (an all_reduce of MAX after each one). A rep's figure is
the median over its iterations. The table gives, over the reps, the median and (min-max).

--rank runs one rank (under `plait run`, or any launcher's environment) and prints RESULT lines.
--summarize FILE prints the table of RESULT lines gathered elsewhere (bench/moe_testbed.sh).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def routing(rank, tokens, experts, topk, skew, seed=0):
    import torch

    g = torch.Generator().manual_seed(1000 * seed + rank)
    if skew == "uniform":
        scores = torch.rand(tokens, experts, generator=g)
    else:  # zipf:S: expert e drawn with weight 1/(e+1)^S, top-k without replacement
        s = float(skew.split(":", 1)[1])
        p = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64) ** s
        idx = torch.stack([torch.multinomial(p, topk, replacement=False, generator=g) for _ in range(tokens)])
        w = torch.full((tokens, topk), 1.0 / topk)
        return idx.long(), w
    w, idx = torch.topk(scores.softmax(-1), topk)
    return idx, w


def rank_main(a):
    import torch
    import torch.distributed as dist

    import plait.torch

    torch.set_num_threads(1)
    dist.init_process_group(a.backend)
    me, n = dist.get_rank(), dist.get_world_size()
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    for tokens in [int(t) for t in a.tokens.split(",")]:
        idx, w = routing(me, tokens, a.experts, a.topk, a.skew)
        x = torch.randn(tokens, a.hidden).to(dtype)
        kinds = []
        if a.backend == "plait":
            for path in a.paths.split(","):
                kinds.append((f"plait {path}", plait.torch.moe.Dispatcher(
                    a.experts, a.topk, a.hidden, dtype, tokens, path=path, name=f"b{tokens}{path}")))
            kinds.append(("plait all_to_all_single", plait.torch.moe.AllToAllDispatcher(
                a.experts, a.topk, a.hidden, dtype, tokens)))
        else:
            kinds.append((f"{a.backend} all_to_all_single", plait.torch.moe.AllToAllDispatcher(
                a.experts, a.topk, a.hidden, dtype, tokens)))
        iters = a.iters or (50 if tokens <= 512 else 15)
        for name, d in kinds:
            times = torch.zeros(iters, 2, dtype=torch.float64)
            ran = ""
            with torch.no_grad():
                for i in range(-3, iters):
                    dist.barrier()
                    t0 = time.perf_counter()
                    got = d.dispatch(x, idx, w, async_op=True)
                    ran = got.path
                    recv_x, _, _, _, handle = got.wait()
                    t1 = time.perf_counter()
                    d.combine(recv_x, handle)
                    t2 = time.perf_counter()
                    if i >= 0:
                        times[i, 0], times[i, 1] = t1 - t0, t2 - t1
            dist.all_reduce(times, op=dist.ReduceOp.MAX)
            if me == 0:
                med = lambda col: statistics.median(col.tolist()) * 1e3  # noqa: E731
                print("RESULT " + json.dumps({
                    "dispatcher": name, "ran": ran, "tokens": tokens, "hidden": a.hidden,
                    "experts": a.experts, "topk": a.topk, "dtype": a.dtype, "skew": a.skew, "ranks": n,
                    "dispatch_ms": med(times[:, 0]), "combine_ms": med(times[:, 1]),
                    "total_ms": med(times.sum(1))}), flush=True)
            if hasattr(d, "close"):
                d.close()
    dist.barrier()
    dist.destroy_process_group()


def summarize(lines, title):
    rows = {}
    for line in lines:
        if not line.startswith("RESULT "):
            continue
        r = json.loads(line[len("RESULT "):])
        key = (r["tokens"], r["dispatcher"])
        rows.setdefault(key, []).append(r)
    if not rows:
        print("no results")
        return
    some = next(iter(rows.values()))[0]
    print(f"# MoE dispatch + combine, {title}: {some['ranks']} ranks, hidden {some['hidden']}, {some['dtype']}, "
          f"{some['experts']} experts, top-{some['topk']}, skew {some['skew']}")
    print("# ms, the slowest rank's; median (min-max) over reps of each rep's median call")
    print()
    print("| tokens | dispatcher | path ran | dispatch (ms) | combine (ms) | dispatch + combine (ms) | vs gloo |")
    print("|---:|---|---|---:|---:|---:|---:|")

    def fmt(values):
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"

    for tokens in sorted({k[0] for k in rows}):
        gloo = [r["total_ms"] for (t, name), rs in rows.items() if t == tokens and name.startswith("gloo")
                for r in rs]
        for (t, name), rs in sorted(rows.items(), key=lambda kv: (kv[0][0], not kv[0][1].startswith("gloo"), kv[0][1])):
            if t != tokens:
                continue
            total = [r["total_ms"] for r in rs]
            ratio = f"{statistics.median(total) / statistics.median(gloo):.2f}x" if gloo and not name.startswith("gloo") else ""
            ran = ",".join(sorted({r["ran"] for r in rs}))
            print(f"| {tokens} | {name} | {ran} | {fmt([r['dispatch_ms'] for r in rs])} | "
                  f"{fmt([r['combine_ms'] for r in rs])} | {fmt(total)} | {ratio} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", action="store_true", help="run as one rank, print RESULT lines")
    p.add_argument("--summarize", metavar="FILE", help="print the table of the RESULT lines in FILE")
    p.add_argument("--title", default="this host")
    p.add_argument("--backend", default="plait")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--tokens", default="128,4096")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--experts", type=int, default=16)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    p.add_argument("--skew", default="uniform")
    p.add_argument("--paths", default="auto,one-sided,alltoallv")
    p.add_argument("--iters", type=int, default=0, help="timed calls (default: 50 up to 512 tokens, else 15)")
    a = p.parse_args()
    if a.rank:
        return rank_main(a)
    if a.summarize:
        with open(a.summarize) as f:
            return summarize(f.read().splitlines(), a.title)
    plait_bin = os.environ.get("PLAIT_BIN", os.path.join(ROOT, "build", "tools", "plait", "plait"))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"), OMP_NUM_THREADS="1")
    lines = []
    forwarded = ["--tokens", a.tokens, "--hidden", str(a.hidden), "--experts", str(a.experts), "--topk",
                 str(a.topk), "--dtype", a.dtype, "--skew", a.skew, "--paths", a.paths, "--iters", str(a.iters)]
    for rep in range(a.reps):
        for backend in ("plait", "gloo"):
            cmd = [plait_bin, "run", "-n", str(a.ranks), "--", sys.executable, os.path.abspath(__file__), "--rank",
                   "--backend", backend] + forwarded
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
            if r.returncode != 0:
                sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
                raise SystemExit(f"moe_compare: {backend} rep {rep + 1} failed")
            for line in r.stdout.splitlines():
                line = line.split("] ", 1)[1] if line.startswith("[") else line
                if line.startswith("RESULT "):
                    lines.append(line)
    summarize(lines, a.title)


if __name__ == "__main__":
    main()
