"""Rank program for test_compress.py: plait.compress.allreduce on NumPy arrays and torch
tensors, checked against each rank's own recomputation of every rank's wire."""
import sys

import numpy as np

import plait
import plait.compress as pc


def grad(rank, n=4000):
    return np.random.default_rng(rank).standard_normal(n).astype(np.float32)


def main():
    comm = plait.init()
    me, w = comm.rank, comm.size
    for method in pc.METHODS:
        params = {"ratio": 0.05, "threshold": 1.0, "rank": 2, "chunk": 256}
        c = pc.Compressor(method, **params)
        state = pc.State()
        data = grad(me)
        stats = pc.allreduce(comm, data, c, state)
        assert stats["wire_bytes"] > 0 and stats["path"], stats
        gathered = np.empty(w * data.size, np.float32)
        comm.allgather(data, gathered).wait()
        for r in range(w):
            assert np.array_equal(gathered[r * data.size:(r + 1) * data.size], data), (method, r)
        if method in ("sign", "topk", "threshold"):
            want = np.zeros_like(data)
            for r in range(w):
                cr = pc.Compressor(method, **params)
                cr.decompress(cr.compress(grad(r), pc.State()), want, accumulate=True)
            want *= np.float32(1.0 / w)
            assert np.array_equal(want, data), method
        if method == "fp16":
            want = sum(grad(r).astype(np.float16).astype(np.float32) for r in range(w)) / w
            assert np.allclose(want, data, atol=2e-3), method
    if sys.argv[1:] == ["torch"]:
        import torch
        t = torch.from_numpy(grad(me))
        pc.allreduce(comm, t, pc.Compressor("bf16"))
        want = sum(torch.from_numpy(grad(r)).to(torch.bfloat16).float() for r in range(w)) / w
        assert torch.allclose(t, want, atol=2e-2), "torch bf16"
    print(f"rank {me}: compress ok", flush=True)


if __name__ == "__main__":
    main()
