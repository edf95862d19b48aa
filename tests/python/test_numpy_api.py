"""The NumPy API of `import plait`, on real ranks started by `plait run`."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIT = os.environ.get("PLAIT_BIN", "plait")


def run_ranks(n, case, timeout=120):
    cmd = [PLAIT, "run", "-n", str(n), "--", sys.executable, os.path.join(HERE, "numpy_ranks.py"),
           case]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def test_import_exposes_the_api():
    import plait

    for name in ("init", "Communicator", "Work", "Error", "TimeoutError", "ANY_SOURCE",
                 "DeadlineAllreduce"):
        assert hasattr(plait, name), name
    for op in ("allreduce", "reduce", "broadcast", "allgather", "allgatherv", "reduce_scatter",
               "reduce_scatterv", "alltoall", "alltoallv", "gather", "scatter", "barrier", "send",
               "recv", "split", "shrink", "abort"):
        assert callable(getattr(plait.Communicator, op, None)), op
        assert getattr(plait.Communicator, op).__doc__, f"{op} has no docstring"
    assert issubclass(plait.TimeoutError, plait.Error)
    assert issubclass(plait.TimeoutError, TimeoutError)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_collectives_on_numpy_arrays(n):
    code, out = run_ranks(n, "collectives")
    assert code == 0, out
    assert out.count("collectives ok") == n, out


@pytest.mark.parametrize("n", [2, 3])
def test_point_to_point_order_and_any_source(n):
    code, out = run_ranks(n, "point_to_point")
    assert code == 0, out


def test_split():
    code, out = run_ranks(4, "split")
    assert code == 0, out


def test_shrink_of_a_healthy_communicator_keeps_every_rank():
    code, out = run_ranks(3, "shrink_healthy")
    assert code == 0, out
    assert out.count("shrink_healthy ok") == 3, out


def test_deadline_allreduce_agrees_on_the_contributors_and_refuses_a_zero_deadline():
    code, out = run_ranks(3, "deadline")
    assert code == 0, out
    assert out.count("deadline ok") == 3, out


def test_errors_are_python_exceptions_with_context():
    code, out = run_ranks(2, "errors")
    assert code == 0, out


def test_dropped_work_keeps_its_buffer_until_done():
    code, out = run_ranks(2, "dropped_work")
    assert code == 0, out
    assert out.count("dropped_work ok") == 2, out


@pytest.mark.parametrize("n", [2, 3])
def test_reduce_gather_scatter_from_every_root(n):
    code, out = run_ranks(n, "rooted")
    assert code == 0, out
    assert out.count("rooted ok") == n, out


@pytest.mark.parametrize("n", [2, 3])
def test_v_collectives_with_uneven_and_zero_counts(n):
    code, out = run_ranks(n, "v_collectives")
    assert code == 0, out
    assert out.count("v_collectives ok") == n, out


@pytest.mark.parametrize("n", [2, 3])
def test_bad_arguments_name_rank_and_op(n):
    code, out = run_ranks(n, "argument_errors")
    assert code == 0, out
    assert out.count("argument_errors ok") == n, out
