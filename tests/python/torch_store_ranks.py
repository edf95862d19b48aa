"""Rank program for test_torch_backend.py: the plait backend over torch's TCPStore while one
rank comes late to the group's setup, so that the others' short waits on the store time
out again and again before its keys appear (a timed-out wait once left the connection to
torch's store out of step, and the setup failed with "Socket Timeout")."""
import datetime
import os
import time

import torch
import torch.distributed as dist

import plait.torch
import rank_stacks  # noqa: F401  (stacks on SIGTERM)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, rank == 0,
                          timeout=datetime.timedelta(seconds=30))
    if rank == world - 1:
        time.sleep(0.5)  # the others wait for this rank's keys in 20 ms slices meanwhile
    pg = plait.torch.create_process_group(dist.PrefixStore("late", store), rank, world,
                                          datetime.timedelta(seconds=30))
    for _ in range(3):
        t = torch.full((5,), float(rank + 1))
        pg.allreduce([t]).wait()
        assert torch.equal(t, torch.full((5,), float(world * (world + 1) // 2))), t
    print(f"rank {rank}: late setup ok", flush=True)


if __name__ == "__main__":
    main()
