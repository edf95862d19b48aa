"""In-job recovery with Communicator.shrink(): the elastic example loses ranks to SIGKILL in
the middle of training, the survivors shrink and resynchronize, and the job ends with the
accuracy of a run that lost no one."""
import os
import re
import subprocess
import sys

import pytest

import torch  # noqa: F401  (torch 2.15 from .venv/: never skipped)

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "elastic_fashion_mnist.py")
PLAIT = os.environ.get("PLAIT_BIN", "plait")


def run(n, *args, recovery=True):
    cmd = [PLAIT, "run", "-n", str(n)] + (["--enable-recovery"] if recovery else []) + [
        "--", sys.executable, EXAMPLE, "--timeout", "60", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    m = re.search(r"RESULT ranks_start=(\d+) ranks_end=(\d+) recoveries=(\d+) "
                  r"test_accuracy=([0-9.]+)", out)
    return r.returncode, out, m


def test_killed_rank_survivors_shrink_and_reach_the_accuracy_of_an_intact_run():
    code, out, clean = run(4, recovery=False)
    assert code == 0 and clean, out
    code, out, killed = run(4, "--kill", "2:60")
    assert code == 0 and killed, out
    assert killed.group(1, 2, 3) == ("4", "3", "1"), out
    # Every survivor recovered at the same step with the same list.
    recovered = re.findall(r"RECOVERED step=(\d+) survivors=(\[[0-9, ]+\])", out)
    assert sorted(recovered) == [("60", "[0, 1, 3]")] * 3, out
    assert "rank 2 (pid" in out and "killed by signal 9" in out, out
    # The global batch is the same whoever computes it: only summation order differs.
    acc_clean, acc_killed = float(clean.group(4)), float(killed.group(4))
    assert acc_clean > 0.80, out
    assert abs(acc_killed - acc_clean) <= 0.01, (acc_clean, acc_killed)


def test_two_deaths_rank_zero_first_leave_three_survivors():
    code, out, m = run(5, "--kill", "0:20", "--kill", "3:50")
    assert code == 0 and m, out
    assert m.group(1, 2, 3) == ("5", "3", "2"), out
    assert sorted(set(re.findall(r"survivors=(\[[0-9, ]+\])", out))) == ["[1, 2, 3, 4]", "[1, 2, 4]"], out
    assert float(m.group(4)) > 0.80, out


def test_without_recovery_the_launcher_stops_the_job():
    code, out, m = run(3, "--kill", "1:10", recovery=False)
    assert code == 128 + 9 and m is None, out
    assert "stopping the other 2 ranks" in out, out
