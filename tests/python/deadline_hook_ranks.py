"""One rank of test_stragglers.py's DDP run with the deadline hook: rank 1 is late on some
steps; every rank must end with the same parameters (each applied the same averages)."""
import datetime
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import plait
import plait.torch  # noqa: F401


def main():
    late = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    comm = plait.init(float(os.environ.get("DH_TIMEOUT", "60")))
    rank, n = comm.rank, comm.size
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.005)
    state, hook = plait.torch.hooks.make_deadline(comm, deadline=0.01, late=late)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    for step in range(30):
        x, y = torch.randn(16, 20, generator=gen), torch.randint(0, 4, (16,), generator=gen)
        if state.catch_up():
            x, y = x[:1], y[:1]  # joins without its gradient: a cheap step to catch up
        elif rank == 1 and step % 3 == 0:
            time.sleep(0.05)  # late for this step's buckets
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
    every = np.zeros(n * flat.size, np.float32)
    comm.allgather(flat, every).wait()
    every = every.reshape(n, -1)
    assert all((every[r] == every[0]).all() for r in range(n)), "replicas differ"
    assert state.steps > 0 and state.missed >= 0
    print(f"rank {rank}: buckets {state.steps} missed {state.missed} skipped {state.skipped} "
          f"dropped {state.dropped / state.steps:.3f} slow {state.slow}", flush=True)
    state.dl.close()
    # Every rank done with gloo before any leaves: a destroy racing a peer's last collective
    # can hang at exit (pytorch/pytorch#75097), and a barrier before it was not enough (a
    # gloo run of hooks_ranks.py hung once after every rank was done). The group is gloo's, so
    # the ranks leave without tearing it down.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
