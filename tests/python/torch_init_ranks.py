"""One rank of a job that starts the "plait" backend one of torch's ways (argv[1]): tcp://,
file://, a given store, or "cpu:plait" (env://), and all_reduces once. Run by
test_torch2_api.py under `plait run`."""
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import plait.torch  # noqa: F401  (registers the backend)

how = sys.argv[1]
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
port = int(os.environ["MASTER_PORT"])
if how == "tcp":
    dist.init_process_group("plait", init_method=f"tcp://127.0.0.1:{port + 1}", rank=rank,
                            world_size=size)
elif how == "file":
    # The job's store port is its own: one file per job.
    path = os.path.join(tempfile.gettempdir(), f"plait-init-{port}")
    dist.init_process_group("plait", init_method=f"file://{path}", rank=rank, world_size=size)
elif how == "store":
    store = dist.TCPStore("127.0.0.1", port + 2, size, rank == 0)
    dist.init_process_group("plait", store=store, rank=rank, world_size=size)
else:
    dist.init_process_group("cpu:plait")
t = torch.ones(3)
dist.all_reduce(t)
assert torch.equal(t, torch.full((3,), float(size))), t
assert "plait" in dist.get_backend(), dist.get_backend()
dist.destroy_process_group()
if how == "file" and rank == 0 and os.path.exists(path):
    os.unlink(path)
print(f"rank {rank}: init {how} ok", flush=True)
