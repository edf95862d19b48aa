"""plait.torch.checkpoint: a checkpoint restores model, optimizer and RNGs exactly; a cut
short or altered one is skipped for the one before; a model of another shape is refused; and
the DDP example, stopped and resumed, ends with the bytes of a run never interrupted."""
import io
import os
import subprocess
import sys

import pytest

import torch  # torch 2.15 from .venv/ (make deps): never skipped

import plait  # noqa: E402
import plait.torch  # noqa: E402,F401
from plait.torch import checkpoint  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "ddp_fashion_mnist.py")
PLAIT = os.environ.get("PLAIT_BIN", "plait")


def trained(seed=0, steps=3, width=16):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Linear(width, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    return model, opt


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_restore_gives_back_model_optimizer_and_rngs(tmp_path):
    model, opt = trained()
    ckpt = checkpoint.Checkpointer(str(tmp_path), every=5)
    assert ckpt.maybe_save(4, model, opt) is None
    assert ckpt.maybe_save(5, model, opt, extra={"epoch": 2}) is not None
    after_save = torch.rand(3)
    fresh, fresh_opt = trained(seed=1, steps=1)
    step, extra = ckpt.restore(fresh, fresh_opt)
    assert (step, extra) == (5, {"epoch": 2})
    assert torch.equal(flat(fresh), flat(model))
    assert torch.equal(torch.rand(3), after_save)  # the RNG goes on as it did after the save
    saved, loaded = opt.state_dict()["state"], fresh_opt.state_dict()["state"]
    assert all(torch.equal(saved[k]["exp_avg"], loaded[k]["exp_avg"]) for k in saved)


def test_an_altered_or_unfinished_checkpoint_is_skipped(tmp_path):
    d = str(tmp_path)
    model, opt = trained()
    checkpoint.save(d, 10, model, opt, keep=5)
    model2, opt2 = trained(steps=5)
    checkpoint.save(d, 20, model2, opt2, keep=5)
    checkpoint.save(d, 30, model2, opt2, keep=5)
    # Step 30 never got its COMPLETE (a crash before every rank had written); step 20's file
    # has a flipped byte.
    os.unlink(os.path.join(d, "step-0000000030", "COMPLETE"))
    path = os.path.join(d, "step-0000000020", "rank-0.plait")
    data = bytearray(open(path, "rb").read())
    data[-7] ^= 0x40
    open(path, "wb").write(bytes(data))
    ok, why = plait._plait.checkpoint_verify(path)
    assert not ok and "SHA-256" in why
    with pytest.raises(plait.SystemError, match="rank-0.plait fails its SHA-256 check"):
        plait._plait.checkpoint_read(path)
    fresh, fresh_opt = trained(seed=3)
    assert checkpoint.restore(d, fresh, fresh_opt)[0] == 10
    assert torch.equal(flat(fresh), flat(model))
    assert checkpoint.complete_steps(d) == [20, 10]


def test_keep_removes_older_checkpoints(tmp_path):
    model, opt = trained()
    ckpt = checkpoint.Checkpointer(str(tmp_path), every=1, keep=2)
    for step in range(1, 5):
        ckpt.maybe_save(step, model, opt)
    assert checkpoint.complete_steps(str(tmp_path)) == [4, 3]
    assert sorted(os.listdir(tmp_path)) == ["step-0000000003", "step-0000000004"]


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    model, opt = trained(width=16)
    checkpoint.save(str(tmp_path), 7, model, opt)
    other, other_opt = trained(width=12)
    with pytest.raises(plait.InvalidUsageError, match="step-0000000007 does not fit this model"):
        checkpoint.restore(str(tmp_path), other, other_opt)
    with pytest.raises(plait.InvalidUsageError, match="keep=0"):
        checkpoint.Checkpointer(str(tmp_path), keep=0)


class _RunsCode:
    """Unpickled, it writes `path`: what an attacker who can write the checkpoint could run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (exec, (f"open({self.path!r}, 'w').write('ran')",))


def _has_weights_only():
    import inspect
    return "weights_only" in inspect.signature(torch.load).parameters


@pytest.mark.skipif(not _has_weights_only(), reason="torch.load has no weights_only")
def test_a_rehashed_checkpoint_whose_pickle_would_run_code_is_refused(tmp_path):
    """The SHA-256 is in the file, unkeyed: whoever can write the file can write a new one
    with a matching digest. A payload that names anything but tensors and plain data is then
    refused by the load, not run."""
    d, ran = str(tmp_path / "ckpt"), tmp_path / "ran"
    model, opt = trained()
    where = checkpoint.save(d, 5, model, opt)
    path = os.path.join(where, "rank-0.plait")
    buf = io.BytesIO()
    torch.save({"step": 5, "world": 1, "rank": 0, "model": _RunsCode(str(ran)), "optimizer": None,
                "extra": None, "rng": None, "hook": None}, buf)
    plait._plait.checkpoint_write(path, buf.getbuffer())
    assert plait._plait.checkpoint_verify(path)[0]  # the digest matches: only the load can tell
    fresh, fresh_opt = trained(seed=1)
    with pytest.raises(Exception) as refused:
        checkpoint.restore(d, fresh, fresh_opt)
    assert not ran.exists(), "the checkpoint's pickle ran code"
    assert isinstance(refused.value, plait.Error), repr(refused.value)
    assert "rank-0.plait" in str(refused.value), refused.value


def test_state_beyond_tensors_comes_back_with_its_types_and_anything_else_is_refused(tmp_path):
    """The payload holds only what a weights-only load reads (torch 1.13's cannot read a
    float): the rest is encoded, and comes back equal and of the same type."""
    import collections
    import numpy as np
    meta = collections.OrderedDict(a=1)
    ordered = collections.OrderedDict([("w", torch.arange(3.0)), ("h", torch.ones(2, dtype=torch.bfloat16))])
    ordered._metadata = collections.OrderedDict([("", {"version": 2})])
    extra = {"floats": [0.1, -0.0, float("inf"), 1e-310], "nan": float("nan"), 7: (1, "x", None, True),
             (2, "k"): {"set": {1, 2}, "frozen": frozenset({"a"}), "bytes": b"\x00\xff", "ba": bytearray(b"z")},
             "np": np.arange(6, dtype=np.uint32).reshape(2, 3), "np_empty": np.zeros((0, 4), np.float16),
             "np_scalar": np.float32(2.5), "np_int": np.int64(-3), "complex": 1 + 2j, "dtype": torch.float16,
             "size": torch.Size([2, 3]), "device": torch.device("cpu"), "ordered": ordered, "meta": meta,
             "param": torch.nn.Parameter(torch.ones(2))}
    model, opt = trained()
    checkpoint.save(str(tmp_path), 1, model, opt, extra=extra)
    fresh, fresh_opt = trained(seed=1)
    _, got = checkpoint.restore(str(tmp_path), fresh, fresh_opt)
    assert got["floats"] == extra["floats"] and str(got["floats"][1]) == "-0.0"
    assert got["nan"] != got["nan"] and got[7] == (1, "x", None, True)
    inner = got[(2, "k")]
    assert inner == {"set": {1, 2}, "frozen": frozenset({"a"}), "bytes": b"\x00\xff", "ba": bytearray(b"z")}
    assert type(inner["ba"]) is bytearray and type(inner["frozen"]) is frozenset
    assert got["np"].dtype == np.uint32 and np.array_equal(got["np"], extra["np"]) and got["np"].flags.writeable
    assert got["np_empty"].shape == (0, 4) and got["np_empty"].dtype == np.float16
    assert type(got["np_scalar"]) is np.float32 and got["np_scalar"] == 2.5
    assert type(got["np_int"]) is np.int64 and got["np_int"] == -3
    assert got["complex"] == 1 + 2j and got["dtype"] is torch.float16
    assert type(got["size"]) is torch.Size and got["size"] == (2, 3) and got["device"] == torch.device("cpu")
    assert type(got["ordered"]) is collections.OrderedDict and list(got["ordered"]) == ["w", "h"]
    assert got["ordered"]._metadata == {"": {"version": 2}} and got["ordered"]["h"].dtype == torch.bfloat16
    assert torch.equal(got["param"], extra["param"]) and type(got["meta"]) is collections.OrderedDict
    assert fresh_opt.state_dict()["param_groups"][0]["lr"] == 0.01  # a float, through the load

    class Sampler:
        pass
    with pytest.raises(plait.InvalidUsageError, match=r"\['extra'\]\['sampler'\] is a .*Sampler"):
        checkpoint.save(str(tmp_path), 2, model, opt, extra={"sampler": Sampler()})
    assert sorted(os.listdir(tmp_path)) == ["step-0000000001"]


def run_example(ranks, *args, launcher=()):
    cmd = [PLAIT, "run", "-n", str(ranks), *launcher, "--", sys.executable, EXAMPLE, "--epochs", "1",
           "--batch-size", "256", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    return out


# PowerSGD keeps error feedback and a warm-start Q per rank between steps: a resume without
# them (the checkpoint once held none) goes on from zero and ends with other bytes.
@pytest.mark.parametrize("ranks, mode", [(3, "sharded"), (2, "gathered"), (3, "sharded-powersgd"),
                                         (2, "gathered-powersgd")])
def test_ddp_example_resumed_ends_with_the_bytes_of_an_uninterrupted_run(tmp_path, ranks, mode):
    layout = ["--checkpoint-gathered"] if mode.startswith("gathered") else []
    hook = ["--hook", "powersgd", "--start-iter", "5"] if mode.endswith("powersgd") else []
    whole, resumed = tmp_path / "whole.pt", tmp_path / "resumed.pt"
    ckpt = str(tmp_path / "ckpt")
    run_example(ranks, "--save-params", str(whole), *hook)
    # Stopped at step 40, between the checkpoints of steps 30 and 45: the resumed run goes on
    # from step 30 and does steps 31-40 again.
    out = run_example(ranks, "--checkpoint-dir", ckpt, "--checkpoint-every", "15", "--max-steps", "40",
                      *layout, *hook)
    assert "stopped at step 40" in out, out
    assert checkpoint.complete_steps(ckpt) == [30, 15]
    out = run_example(ranks, "--checkpoint-dir", ckpt, "--checkpoint-every", "15", "--save-params", str(resumed),
                      *layout, *hook)
    assert "resumed from" in out and "at step 30" in out, out
    assert torch.equal(torch.load(whole), torch.load(resumed))


def test_a_rank_killed_mid_training_is_restarted_and_resumes_bit_identically(tmp_path):
    """plait run --max-restarts: rank 1 dies by SIGKILL after step 40; every rank starts
    again, resumes from the step-30 checkpoint and ends with the uninterrupted run's bytes."""
    whole, resumed = tmp_path / "whole.pt", tmp_path / "resumed.pt"
    ckpt = str(tmp_path / "ckpt")
    run_example(3, "--save-params", str(whole))
    out = run_example(3, "--checkpoint-dir", ckpt, "--checkpoint-every", "15", "--kill-at-step", "40",
                      "--save-params", str(resumed), launcher=("--max-restarts", "1"))
    assert "killing itself at step 40" in out, out
    assert "was killed by signal 9 (SIGKILL)" in out, out
    assert "restarting every rank (restart 1 of 1)" in out, out
    assert "at step 30" in out, out
    assert torch.equal(torch.load(whole), torch.load(resumed))
