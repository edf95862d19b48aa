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
    # AutoCompression: the same choice on every rank, and its allreduce is that path's.
    auto = pc.AutoCompression(comm, candidates=("fp16", "powersgd"), rank=2)
    assert auto.alpha_seconds > 0 and auto.bytes_per_second > 0
    for n in (16, 4000, 1 << 18):
        choice = auto.choose(n)
        codes = np.empty(w, np.int32)
        comm.allgather(np.array([(("none",) + pc.METHODS).index(choice)], np.int32), codes).wait()
        assert (codes == codes[0]).all(), (n, codes)
        none_s = auto.predict("none", n)
        if choice == "none":
            assert all(auto.predict(m, n) > 0.8 * none_s for m in ("fp16", "powersgd")), n
        else:
            assert auto.predict(choice, n) <= min(0.8 * none_s, *(auto.predict(m, n) for m in ("fp16", "powersgd")))
        data = grad(me, n)
        want = data.copy()
        stats = auto.allreduce(comm, data, pc.State())
        assert stats["path"].startswith(f"auto: {choice}"), stats
        if choice == "none":
            comm.allreduce(want).wait()
            want *= np.float32(1.0 / w)  # as the C++ side scales
        else:
            pc.allreduce(comm, want, pc.Compressor(choice, rank=2), pc.State())
        assert np.array_equal(data, want), (n, choice)
    try:
        auto.predict("int8", 100)
        raise AssertionError("predict of a non-candidate accepted")
    except plait.InvalidUsageError as e:
        assert "not a candidate" in str(e), e
    forced = pc.AutoCompression(comm, candidates=("fp16", "powersgd"), force="fp16")
    assert forced.choose(1 << 20) == "fp16" and forced.choose(1) == "fp16"
    try:
        pc.AutoCompression(comm, candidates=("fp16",), force="topk")
        raise AssertionError("force=topk accepted")
    except plait.InvalidUsageError as e:
        assert "not a candidate" in str(e), e
    if sys.argv[1:] == ["torch"]:
        import torch
        t = torch.from_numpy(grad(me))
        pc.allreduce(comm, t, pc.Compressor("bf16"))
        want = sum(torch.from_numpy(grad(r)).to(torch.bfloat16).float() for r in range(w)) / w
        assert torch.allclose(t, want, atol=2e-2), "torch bf16"
    print(f"rank {me}: compress ok", flush=True)


if __name__ == "__main__":
    main()
