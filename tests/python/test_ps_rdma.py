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


@pytest.mark.parametrize("transport", ["auto", "tcp", "ucx"])
def test_window_on_memory_the_fabric_allocated(transport):
    env = {"PLAIT_TRANSPORT": transport, "PLAIT_UCX_TLS": "sm"}
    code, out = run_ranks(3, "allocated_window", env)
    assert code == 0, out
    assert out.count("allocated window ok") == 3, out
    assert "outlive" not in out, out  # the memory went before the fabric


@pytest.mark.parametrize("consistency", ["bsp", "asp", "ssp"])
def test_ps_on_numpy_arrays(consistency):
    code, out = run_ranks(3, "ps_numpy_" + consistency)
    assert code == 0, out
    assert out.count(f"ps {consistency} ok") == 2, out


def test_ps_on_torch_tensors():
    import torch  # noqa: F401
    code, out = run_ranks(3, "ps_torch")
    assert code == 0, out
    assert out.count("ps torch ok") == 2, out


EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "ps_fashion_mnist.py")


@pytest.mark.parametrize("mode", [["--mode", "bsp"], ["--mode", "ssp", "--staleness", "2"]])
def test_ps_example_trains_fashion_mnist(mode):
    import torch  # noqa: F401
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        pytest.skip("dataset-fashion-mnist is not installed")
    cmd = [PLAIT, "run", "-n", "3", "--", sys.executable, EXAMPLE, "--servers", "1",
           "--epochs", "1"] + mode
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    result = [line for line in out.splitlines() if "RESULT" in line]
    assert len(result) == 1, out
    accuracy = float(result[0].split("test_accuracy=")[1].split()[0])
    # One epoch of 2 workers (3 epochs of 4 reach ~0.87 in BSP). SSP's result depends on how
    # stale the updates it applied were, which the machine's load decides: 0.80 as a rule,
    # 0.7748 once under CI's load.
    assert accuracy > (0.78 if "bsp" in mode else 0.72), out


def test_ps_refuses_buffers_that_do_not_fit_their_key():
    cmd = [PLAIT, "run", "-n", "3", "--", sys.executable,
           os.path.join(HERE, "ps_buffer_checks_ranks.py")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert out.count("ps buffer checks ok") == 2, out
