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


def test_expert_balancer_moves_weights_and_state_and_sums_replica_gradients():
    for case in ("balance", "balance-gloo"):
        code, out = run_ranks(4, case)
        assert code == 0, out
        assert out.count("moe balance ok") == 4, out


def test_plan_replicates_the_heaviest_and_packs_evenly():
    import plait.torch_moe_balance as b

    loads = [40, 10, 10, 10, 5, 5, 5, 5]
    slots = b.plan(loads, ranks=4, slots_per_rank=3)
    assert len(slots) == 12 and set(slots) == set(range(8))
    assert slots.count(0) >= 3  # the heaviest expert takes most spare slots
    packed = b.ExpertPlacement(8, 4, 3, slots).max_over_mean(loads)
    start = b.ExpertPlacement(8, 4, 3).max_over_mean(loads)
    assert packed < start and packed <= 1.2, (packed, start, slots)
    assert b.plan(loads, 4, 3) == slots  # the same numbers, the same plan


def result_of(out):
    line = [ln for ln in out.splitlines() if "RESULT " in ln][-1]
    return dict(kv.split("=", 1) for kv in line.split("RESULT ", 1)[1].split())


def test_the_moe_example_on_plait_and_gloo_reaches_the_same_loss():
    example = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "moe_lm.py")
    results = {}
    for backend in ("plait", "gloo"):
        cmd = [PLAIT, "run", "-n", "4", "--", sys.executable, example, "--backend", backend, "--steps", "6",
               "--skew", "zipf:1.2", "--replicate-every", "2", "--warmup", "1", "--log-every", "2"]
        for attempt in range(2):  # gloo sometimes aborts in its own teardown: one retry
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
            if r.returncode == 0:
                break
        assert r.returncode == 0, r.stdout + r.stderr
        results[backend] = result_of(r.stdout)
    assert abs(float(results["plait"]["val_loss"]) - float(results["gloo"]["val_loss"])) < 2e-3, results
    assert int(results["plait"]["moves"]) > 0 and results["plait"]["moves"] == results["gloo"]["moves"], results
