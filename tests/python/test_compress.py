"""plait.compress from Python: the compressors on NumPy arrays and torch tensors, their
errors, and the compressed allreduce on real ranks started by `plait run`."""
import os
import subprocess
import sys

import numpy as np
import pytest

import plait
import plait.compress as pc

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIT = os.environ.get("PLAIT_BIN", "plait")


def test_fp16_is_numpys_half_and_feedback_keeps_the_rounding():
    x = np.random.default_rng(1).standard_normal(1001).astype(np.float32)
    c = pc.Compressor("fp16")
    state = pc.State()
    wire = c.compress(x, state)
    assert wire.dtype == np.uint8 and wire.size == 2 * x.size
    out = c.decompress(wire, np.empty_like(x))
    assert np.array_equal(out, x.astype(np.float16).astype(np.float32))
    assert np.array_equal(np.array(state.residual, np.float32), x - out)
    assert state.calls == 1


def test_topk_sends_the_largest_magnitudes():
    x = np.random.default_rng(2).standard_normal(10000).astype(np.float32)
    c = pc.Compressor("topk", k=100)
    out = c.decompress(c.compress(x), np.zeros_like(x))
    sent = np.flatnonzero(out)
    assert sent.size == 100
    assert set(sent) == set(np.argsort(-np.abs(x))[:100])


def test_torch_tensors_are_used_in_place():
    import torch
    x = torch.randn(3000)
    c = pc.Compressor("int8", levels=15)
    out = torch.zeros(3000)
    c.decompress(c.compress(x), out)
    assert torch.max(torch.abs(out - x)) <= torch.max(torch.abs(x)) / 15 * 1.001


def test_powersgd_steps_fold_feedback_and_residual_into_their_passes():
    """mq(add=x) is m += x then mq; reconstruct(residual=r) is out = P Q^T then r -= out,
    bit for bit, and P Q^T is the rank-2 approximation (exact for a rank-2 matrix)."""
    from plait._plait import PowerSgdSteps
    rng = np.random.default_rng(3)
    rows, cols = 37, 23
    m = (rng.standard_normal((rows, 2)) @ rng.standard_normal((2, cols))).astype(np.float32).ravel()
    x = rng.standard_normal(rows * cols).astype(np.float32)
    steps = PowerSgdSteps(rows * cols, 2, rows)
    assert (steps.rows, steps.cols, steps.rank) == (rows, cols, 2)
    q = np.empty(2 * cols, np.float32)
    steps.initial_q(q, 7)
    p_fused, p_plain = np.empty(2 * rows, np.float32), np.empty(2 * rows, np.float32)
    fused = m.copy()
    steps.mq(fused, q, p_fused, add=x)
    plain = m + x
    steps.mq(plain, q, p_plain)
    assert np.array_equal(fused, plain) and np.array_equal(p_fused, p_plain)

    steps.mq(m, q, p_plain)  # the rank-2 matrix alone
    steps.orthonormalize(p_plain)
    steps.mtp(m, p_plain, q)
    out, residual = np.empty_like(m), m.copy()
    steps.reconstruct(p_plain, q, out, residual=residual)
    expect = np.empty_like(m)
    steps.reconstruct(p_plain, q, expect)
    assert np.array_equal(out, expect) and np.array_equal(residual, m - expect)
    assert np.max(np.abs(residual)) < 1e-4 * np.max(np.abs(m))
    with pytest.raises(plait.InvalidUsageError, match="subtract or residual"):
        steps.reconstruct(p_plain, q, out, subtract=True, residual=residual)
    with pytest.raises(plait.InvalidUsageError, match="add holds 3 values"):
        steps.mq(fused, q, p_fused, add=np.ones(3, np.float32))


@pytest.mark.parametrize("call, words", [
    (lambda: pc.Compressor("topk").compress(np.ones(10, np.float64)), "compression takes float32"),
    (lambda: pc.Compressor("powersgd", rank=0), "rank 0"),
    (lambda: pc.Compressor("topk", k=11).compress(np.ones(10, np.float32)), "larger than the tensor"),
    (lambda: pc.Compressor("zip"), "unknown compression method"),
])
def test_bad_input_is_invalid_usage(call, words):
    with pytest.raises(plait.InvalidUsageError, match=words):
        call()


@pytest.mark.parametrize("case", ["numpy", "torch"])
def test_compressed_allreduce_on_three_ranks(case):
    if case == "torch":
        import torch  # noqa: F401
    cmd = [PLAIT, "run", "-n", "3", "--", sys.executable, os.path.join(HERE, "compress_ranks.py")]
    if case == "torch":
        cmd.append("torch")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert out.count("compress ok") == 3, out
