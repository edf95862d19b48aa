"""One rank of a torch.distributed job on the "plait" backend: its profiler ranges.

Run by test_torch_backend.py under `plait run -n N` (like torch_ranks.py). PyTorch's own
distributed suite checks the ranges a backend opens the way gloo opens them, so these cases
run the same calls on plait and on a gloo group over the same ranks, under both profilers,
and require the same titles (after the backend's prefix), async flags and input shapes.
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

import plait.torch  # noqa: F401  (registers the backend)
import rank_stacks  # noqa: F401  (stacks on SIGTERM)

SHAPE = [2, 3, 4]  # what every point-to-point message of these cases carries


def profiler():
    with torch.profiler.profile() as prof:
        dist.all_reduce(torch.ones(8))
        dist.broadcast(torch.ones(8), 0)
    names = {e.name for e in prof.events()}
    assert "plait:all_reduce" in names and "plait:broadcast" in names, sorted(names)
    print(f"rank {dist.get_rank()}: profiler ok", flush=True)


def calls(group):
    """Coalesced collectives, then send/recv, isend/irecv and receives from any source."""
    me, n = dist.get_rank(), dist.get_world_size()
    dist.all_reduce_coalesced([torch.ones(3), torch.ones(2, 2)], group=group)
    dist.all_gather_coalesced([[torch.zeros(3)] for _ in range(n)], [torch.ones(3)], group=group)
    message = torch.full(SHAPE, float(me))
    for src in range(n):
        if src == me:
            for dst in range(n):
                if dst != me:
                    dist.send(message, dst, group=group)
                    dist.isend(message, dst, group=group).wait()
        else:
            got = torch.zeros(SHAPE)
            dist.recv(got, src, group=group)
            dist.irecv(got, src, group=group).wait()
            assert (got == src).all(), got
    for dst in range(n):
        if dst == me:
            for _ in range(n - 1):
                got = torch.zeros(SHAPE)
                sender = dist.recv(got, group=group)  # no src: any source
                assert (got == sender).all(), (got, sender)
                work = dist.irecv(got, group=group)
                work.wait()
                assert (got == work._source_rank()).all(), (got, work._source_rank())
        else:
            dist.send(message, dst, group=group)
            dist.send(message, dst, group=group)


def ranges(profile, events_of, backend, group):
    """(title without the backend's prefix, is_async, input shapes) of each range the calls
    open, sorted."""
    with profile(record_shapes=True) as prof:
        calls(group)
    prefix = backend + ":"
    return sorted((e.name[len(prefix):], e.is_async, e.input_shapes)
                  for e in events_of(prof) if e.name.startswith(prefix))


def profiler_conventions():
    me, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    message = [SHAPE]
    want = sorted([("all_gather", True, [[3]]), ("all_reduce", True, [[3], [2, 2]])]
                  + [("recv", True, message)] * 2 * (n - 1)
                  + [("recvAnySource", True, message)] * 2 * (n - 1)
                  + [("send", True, message)] * 4 * (n - 1))
    profilers = {
        "torch.profiler": (torch.profiler.profile, lambda p: p.events()),
        "torch.autograd.profiler": (torch.autograd.profiler.profile, lambda p: p.function_events),
    }
    for name, (profile, events_of) in profilers.items():
        got = ranges(profile, events_of, "plait", None)
        assert got == want, f"rank {me}, {name}: plait's ranges\n{got}\nexpected\n{want}"
        ref = ranges(profile, events_of, "gloo", gloo)
        assert ref == want, f"rank {me}, {name}: gloo's ranges (the expectation is wrong)\n{ref}"
    dist.barrier()
    print(f"rank {me}: profiler_conventions ok", flush=True)


if __name__ == "__main__":
    case = sys.argv[1]
    timeout = float(os.environ.get("CASE_TIMEOUT_S", "120"))
    dist.init_process_group("plait", timeout=datetime.timedelta(seconds=timeout))
    globals()[case]()
    dist.destroy_process_group()
