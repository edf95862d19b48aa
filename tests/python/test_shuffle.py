"""plait.shuffle from Python: NumPy structured arrays and bytes shuffled by key on real ranks
started by `plait run`, pull and push, over shared memory and TCP."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIT = os.environ.get("PLAIT_BIN", "plait")


def run_ranks(n, case, env=None, timeout=120):
    cmd = [PLAIT, "run", "-n", str(n), "--", sys.executable, os.path.join(HERE, "shuffle_ranks.py"),
           case]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    return r.returncode, r.stdout + r.stderr


@pytest.mark.parametrize("mode", ["pull", "push"])
@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_structured_rows_by_key(mode, transport):
    code, out = run_ranks(3, mode, {"PLAIT_TRANSPORT": transport})
    assert code == 0, out
    assert out.count(f"shuffle {mode} ok") == 3, out


def test_bytes_records_and_a_torn_record():
    code, out = run_ranks(3, "bytes")
    assert code == 0, out
    assert out.count("shuffle bytes ok") == 3, out


@pytest.mark.parametrize("mode", ["pull", "push"])
@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_runs_spilled_past_a_budget_come_back_merged_in_key_order(mode, transport):
    code, out = run_ranks(3, "spilled" if mode == "pull" else "spilled_push", {"PLAIT_TRANSPORT": transport})
    assert code == 0, out
    assert out.count(f"shuffle spilled {mode} ok") == 3, out
