"""plait.torch.moe on real ranks (see moe_ranks.py): dispatch and combine on both paths and
every row dtype, forward and backward, against results each rank derives alone and against
the all_to_all_single dispatcher on plait and gloo; uneven routing, a rank with no tokens, a
rank that receives none; refused and mismatched calls."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIT = os.environ.get("PLAIT_BIN", "plait")


def run_ranks(n, case, timeout=300, env=None):
    cmd = [PLAIT, "run", "-n", str(n), "--timeout", str(timeout - 30), "--", sys.executable,
           os.path.join(HERE, "moe_ranks.py"), case]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    return r.returncode, r.stdout + r.stderr


def test_dispatch_and_combine_forward_and_backward_on_every_path():
    code, out = run_ranks(4, "correctness")
    assert code == 0, out
    assert out.count("moe correctness ok") == 4, out


def test_the_all_to_all_dispatcher_on_gloo():
    code, out = run_ranks(4, "gloo")
    assert code == 0, out
    assert out.count("moe gloo ok") == 4, out


def test_refused_and_mismatched_calls_fail_on_every_rank():
    code, out = run_ranks(2, "errors", timeout=120, env={"PLAIT_TIMEOUT": "20000"})
    assert out.count("moe errors ok") == 2, out
