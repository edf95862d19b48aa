"""plait.torch.checkpoint: a checkpoint restores model, optimizer and RNGs exactly; a cut
short or altered one is skipped for the one before; a model of another shape is refused; and
the DDP example, stopped and resumed, ends with the bytes of a run never interrupted."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

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
