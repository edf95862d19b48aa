"""What torch 2.x added to c10d, on the "plait" backend (see torch2_ranks.py): coalesced
collectives, split groups, DistBackendError, set_timeout, abort and shutdown."""
import os
import subprocess
import sys

import pytest

import torch  # torch 2.15 from .venv/ (make deps): never skipped

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIT = os.environ.get("PLAIT_BIN", "plait")


def run_ranks(n, case, timeout=240, env=None, script="torch2_ranks.py"):
    cmd = [PLAIT, "run", "-n", str(n), "--timeout", str(timeout - 30), "--", sys.executable,
           os.path.join(HERE, script), case]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    return r.returncode, r.stdout + r.stderr


@pytest.mark.parametrize("n", [2, 3])
def test_coalesced_collectives_match_gloo(n):
    code, out = run_ranks(n, "coalesced")
    assert code == 0, out
    assert out.count("coalesced ok") == n, out


def test_split_group_and_new_subgroups():
    code, out = run_ranks(4, "split")
    assert code == 0, out
    assert out.count("split ok") == 4, out


def test_timeout_is_a_dist_backend_error_and_set_timeout_applies():
    code, out = run_ranks(2, "errors")
    assert code == 0, out
    assert out.count("errors ok") == 2, out


def test_abort_fails_the_calls_of_every_rank():
    code, out = run_ranks(2, "abort")
    assert code == 0, out
    assert out.count("abort ok") == 2, out


def test_calls_after_shutdown_are_refused():
    code, out = run_ranks(2, "shutdown")
    assert code == 0, out
    assert out.count("shutdown ok") == 2, out


def test_ranks_that_destroy_the_group_leave_cleanly():
    code, out = run_ranks(2, "exit_after_destroy")
    assert code == 0, out
    assert out.count("exit_after_destroy ok") == 2, out
    assert "died without shutting down" not in out, out


def test_debug_detail_wraps_the_backend_and_names_mismatches():
    code, out = run_ranks(2, "debug_detail", env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    assert code == 0, out
    assert out.count("debug_detail ok") == 2, out


@pytest.mark.parametrize("how", ["tcp", "file", "store", "cpu"])
def test_every_init_method(how):
    code, out = run_ranks(2, how, script="torch_init_ranks.py")
    assert code == 0, out
    assert out.count(f"init {how} ok") == 2, out
