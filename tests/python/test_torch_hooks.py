"""plait.torch.hooks: DDP communication hooks with plait's compressors, on the "plait"
backend and on gloo: every rank ends with the same parameters, and the two backends end with
the same parameters (exactly where the hook's sums are its own, in rank order; to the
collective's rounding where the backend's all_reduce sums)."""
import os
import subprocess
import sys

import pytest

import torch  # torch 2.15 from .venv/ (make deps): never skipped

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIT = os.environ.get("PLAIT_BIN", "plait")
METHODS = ["none", "fp16", "bf16", "int8", "sign", "topk", "threshold", "randomk", "powersgd", "auto"]
# all_gather'ed wires are summed by the hook in rank order: the same bits on every backend.
EXACT = {"int8", "sign", "topk", "threshold"}


def run(backend, method, out_dir):
    cmd = [PLAIT, "run", "-n", "3", "--", sys.executable, os.path.join(HERE, "hooks_ranks.py"), backend, method]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OUT_DIR": str(out_dir)})
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert out.count(f"hooks {backend} {method} ok") == 3, out
    return torch.load(os.path.join(out_dir, f"{backend}-{method}-rank0.pt"))


@pytest.mark.parametrize("method", METHODS)
def test_hook_gives_the_same_parameters_on_plait_and_gloo(method, tmp_path):
    on_plait = run("plait", method, tmp_path)
    on_gloo = run("gloo", method, tmp_path)
    if method == "auto":  # the same choices on both (the gloo run takes plait's)
        chosen = {b: torch.load(tmp_path / f"{b}-auto-choice.pt") for b in ("plait", "gloo")}
        assert chosen["plait"] and chosen["plait"] == chosen["gloo"], chosen
    if method in EXACT:
        assert torch.equal(on_plait, on_gloo), (on_plait - on_gloo).abs().max()
    else:
        assert torch.allclose(on_plait, on_gloo, atol=1e-3), (on_plait - on_gloo).abs().max()


@pytest.mark.parametrize("method", ["torch-powersgd", "torch-fp16"])
def test_torchs_own_hooks_run_on_plait(method, tmp_path):
    """torch's PowerSGD hook starts an all_reduce inside a future callback and waits for it
    there: the backend must finish that call while the callback blocks its thread."""
    on_plait = run("plait", method, tmp_path)
    on_gloo = run("gloo", method, tmp_path)
    assert torch.allclose(on_plait, on_gloo, atol=1e-3), (on_plait - on_gloo).abs().max()


def run_overlap(backend, method, out_dir, *extra, timeout=300):
    cmd = [PLAIT, "run", "-n", "2", "--", sys.executable, os.path.join(HERE, "hooks_overlap_ranks.py"), backend,
           method, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "OUT_DIR": str(out_dir)})
    return r.returncode, r.stdout + r.stderr


@pytest.mark.parametrize("backend, method", [("plait", "none"), ("plait", "fp16"), ("plait", "int8"),
                                             ("plait", "topk"), ("plait", "powersgd"), ("gloo", "none"),
                                             ("gloo", "powersgd"), ("plait", "deadline")])
def test_hooks_return_before_their_bucket_is_reduced_and_backward_overlaps_it(backend, method, tmp_path):
    """Each hook hands its bucket over and returns a pending Future: a rank's backward runs to
    its end before the other rank starts its own, and the first bucket's range in the profile
    holds backward ranges of earlier layers. Gradients equal, bit for bit, those of the same
    hook made to wait for its bucket (and for "none" and "deadline" the ranks' mean)."""
    code, out = run_overlap(backend, method, tmp_path)
    assert code == 0, out
    assert out.count(f"hooks overlap {backend} {method} ok") == 2, out
    assert "did not all return" not in out, out
    assert os.path.exists(tmp_path / f"overlap-{backend}-{method}.json"), out


def test_a_bucket_that_fails_raises_from_backward_and_fails_the_rest_of_its_step(tmp_path):
    """Rank 1 skips a step: rank 0's first bucket times out on its bucket thread, the error
    reaches its Future and backward raises it; the step's other buckets fail at once instead
    of timing out one after another; both ranks exit."""
    code, out = run_overlap("plait", "none", tmp_path, "error")
    assert code == 0, out
    assert out.count("hooks overlap plait none error ok") == 2, out
    assert "backward raised after" in out, out


def test_bad_hook_arguments_are_refused():
    import plait.torch_hooks as hooks  # needs no process group to refuse these
    with pytest.raises(ValueError, match="unknown method"):
        hooks.HookState.__init__(object.__new__(hooks.HookState), "zip")


def test_auto_predicts_powersgd_wire_per_matrix_as_the_hook_sends_it():
    """A bucket of a 2048x784 weight, its bias and a 10x2048 weight: P and Q per matrix
    (rank 4), the bias whole, in three all_reduces; not one matrix of the bucket's length."""
    import plait.torch_hooks as hooks
    shapes = [(2048, 784), (2048,), (10, 2048)]
    messages, wire = hooks._power_sgd_wire(shapes, 4)
    assert messages == 3
    assert wire == 4 * (4 * (2048 + 784) + 2048 + 4 * (10 + 2048))
    assert hooks._power_sgd_wire([(100,)], 4) == (1, 400)
    n = 2048 * 784 + 2048 + 10 * 2048
    model = {"alpha": 1e-4, "beta": 1e8, "speed": {"powersgd": 1e9}, "rank": 4}
    expected = 3 * 1e-4 + 1.5 * wire / 1e8 + n / 1e9
    assert abs(hooks._predict(model, "powersgd", n, 4, shapes) - expected) < 1e-12
