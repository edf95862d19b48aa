"""Rank program for test_torch_hooks.py: a few DDP steps of a small model with one of
plait.torch.hooks' hooks on the given backend; prints the final parameters' digest and
writes them to OUT_DIR/<backend>-<method>-rank<r>.pt."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

import plait.torch  # noqa: F401  (the "plait" backend, and plait.torch.hooks)


def main():
    backend, method = sys.argv[1], sys.argv[2]
    # A hook that deadlocks the backend fails in 30 s, not the default 30 minutes.
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 10))
    if method.startswith("torch-"):
        # One bucket: torch's PowerSGD hook starts its second all_reduce from a future's
        # callback, so with several buckets the ranks may start their collectives in
        # different orders (gloo then aborts or hangs).
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 30
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1024)
    else:
        # Small buckets: two per step from the second on, each with its own state, moved one
        # after the other on the hook's thread. (DDP's first bucket takes up to
        # _DEFAULT_FIRST_BUCKET_BYTES, 1 MiB: with it the whole model was one bucket.)
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1000
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.005)
    params = {"ratio": 0.1, "threshold": 0.01, "rank": 2, "chunk": 64}
    params = {k: v for k, v in params.items()
              if method in ("auto", "torch-powersgd", "torch-fp16") or k in {"fp16": (), "bf16": (), "none": (), "int8": ("chunk",),
                                              "sign": ("chunk",), "topk": ("ratio",), "randomk": ("ratio",),
                                              "threshold": ("threshold",), "powersgd": ("rank",)}[method]}
    if method == "auto":
        params = {"rank": 2}
    if method == "torch-powersgd":
        # torch's own hook waits, inside a future's callback, for an all_reduce it starts there.
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                            start_powerSGD_iter=2)
        hook = powerSGD_hook.powerSGD_hook
    elif method == "torch-fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        state, hook = None, default_hooks.fp16_compress_hook
    else:
        state, hook = plait.torch.hooks.make(method, **params)
    out_dir = os.environ["OUT_DIR"]
    plait_choice = os.path.join(out_dir, "plait-auto-choice.pt")
    if method == "auto" and backend == "gloo" and os.path.exists(plait_choice):
        # auto chooses by timings, which differ from run to run (none on one, fp16 on the
        # next): the reference takes the plait run's choices, as a resumed run would.
        state.load_state_dict({"method": "auto", "iteration": 0, "pieces": {}, "calls": {},
                               "choice": torch.load(plait_choice)})
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(4):
        x = torch.randn(32, 64, generator=gen)
        y = torch.randint(0, 10, (32,), generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    # Every rank holds the same parameters.
    others = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(others, flat)
    assert all(torch.equal(o, flat) for o in others), "ranks differ"
    torch.save(flat, os.path.join(out_dir, f"{backend}-{method}-rank{rank}.pt"))
    if method == "auto" and rank == 0:
        torch.save(state.state_dict()["choice"], os.path.join(out_dir, f"{backend}-auto-choice.pt"))
    print(f"rank {rank}: hooks {backend} {method} ok", flush=True)
    # Every rank done before any tears its pairs down: a destroy racing a peer's last
    # collective can hang at exit on gloo (pytorch/pytorch#75097). The barrier was not enough:
    # a gloo run still hung once after every rank printed "ok" (CI, 2026-11-27). gloo is only
    # the reference here: its ranks leave without tearing it down; plait's are torn down.
    dist.barrier()
    if backend == "gloo":
        sys.stdout.flush()
        os._exit(0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
