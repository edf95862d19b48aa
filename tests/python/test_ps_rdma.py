"""plait.rdma (one-sided windows) and plait.ps (the parameter server) from Python, on real
ranks started by `plait run`."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIT = os.environ.get("PLAIT_BIN", "plait")


def run_ranks(n, case, env=None, timeout=120):
    cmd = [PLAIT, "run", "-n", str(n), "--", sys.executable, os.path.join(HERE, "ps_rdma_ranks.py"),
           case]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    return r.returncode, r.stdout + r.stderr


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_window_put_get_atomics_and_refusals(transport):
    code, out = run_ranks(3, "window", {"PLAIT_TRANSPORT": transport})
    assert code == 0, out
    assert out.count("window ok") == 3, out


@pytest.mark.parametrize("consistency", ["bsp", "asp", "ssp"])
def test_ps_on_numpy_arrays(consistency):
    code, out = run_ranks(3, "ps_numpy_" + consistency)
    assert code == 0, out
    assert out.count(f"ps {consistency} ok") == 2, out


def test_ps_on_torch_tensors():
    pytest.importorskip("torch")
    code, out = run_ranks(3, "ps_torch")
    assert code == 0, out
    assert out.count("ps torch ok") == 2, out
