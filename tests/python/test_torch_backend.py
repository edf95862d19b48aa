"""The "plait" torch.distributed backend (plait.torch), on real ranks started by `plait run`,
checked against gloo's results in the same job (see torch_ranks.py)."""
import os
import subprocess
import sys

import pytest

import torch  # torch 2.15 from .venv/ (make deps): never skipped

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIT = os.environ.get("PLAIT_BIN", "plait")


def run_ranks(n, case, timeout=300, case_timeout_s=120, env=None, script="torch_ranks.py"):
    # plait run stops the job first, naming the ranks still running, and they print their
    # stacks (rank_stacks.py): a hang says where it is.
    cmd = [PLAIT, "run", "-n", str(n), "--timeout", str(timeout - 30), "--", sys.executable,
           os.path.join(HERE, script), case]
    env = dict(os.environ, CASE_TIMEOUT_S=str(case_timeout_s), **(env or {}))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return r.returncode, r.stdout + r.stderr


def test_import_registers_the_backend():
    import torch.distributed as dist

    import plait.torch

    assert dist.Backend("plait") == "plait"
    assert issubclass(plait.torch.ProcessGroupPlait, torch._C._distributed_c10d.Backend)
    assert callable(plait.torch.create_process_group)


def test_create_process_group_directly_on_one_rank():
    from datetime import timedelta

    import torch.distributed as dist

    import plait.torch

    store = dist.HashStore()
    pg = plait.torch.create_process_group(store, 0, 1, timedelta(seconds=30))
    t = torch.arange(4.0)
    pg.allreduce([t]).wait()
    assert torch.equal(t, torch.arange(4.0))
    assert pg.size() == 1 and pg.rank() == 0


def test_a_wait_that_timed_out_leaves_the_connection_to_torchs_store_in_step():
    """The backend's setup waits on torch's store in 20 ms slices. torch's own wait leaves a
    timed-out WAIT registered at the server, whose answer the next request then read as its
    own: a later get of a key that was there failed with "Socket Timeout" (setups under load
    failed so). plait's wait asks with CHECK instead."""
    import time
    from datetime import timedelta

    import torch.distributed as dist

    import plait
    from plait import _plait_torch

    server = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=timedelta(seconds=10), wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", server.port, 2, False, timeout=timedelta(seconds=10))
    server.set("other", "value")
    with pytest.raises(plait.TimeoutError):
        _plait_torch._store_wait(client, ["k"], timedelta(milliseconds=20))
    server.set("k", "v")
    time.sleep(0.1)  # the server answers whatever wait it still holds for "k" now
    assert _plait_torch._store_get(client, "other", timedelta(seconds=5)) == b"value"
    _plait_torch._store_wait(client, ["k"], timedelta(seconds=5))
    assert _plait_torch._store_get(client, "k", timedelta(seconds=5)) == b"v"


def test_setup_over_torchs_store_with_a_late_rank():
    code, out = run_ranks(3, "", script="torch_store_ranks.py")
    assert code == 0, out
    assert out.count("late setup ok") == 3, out


def test_init_process_group_waits_for_rank0_store_to_listen(monkeypatch):
    """plait.torch.init_process_group's rendezvous: a rank other than 0 dials until rank 0's
    store accepts (torch 1.13 would sleep a second after the first refusal), and gives up at
    the timeout, leaving the error to torch's own dial."""
    import socket
    import threading
    from datetime import timedelta

    import plait.torch

    reserved = socket.socket()
    reserved.bind(("127.0.0.1", 0))  # bound, not listening: a dial is refused (as plait run holds it)
    port = reserved.getsockname()[1]
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    accepted = []

    def listen_later():
        reserved.listen(4)  # "rank 0's store" starts listening on the same socket
        conn, _ = reserved.accept()
        accepted.append(conn)

    timer = threading.Timer(0.2, listen_later)
    timer.start()
    plait.torch._wait_for_rank0_store(timedelta(seconds=30))
    timer.join()
    assert len(accepted) == 1
    accepted[0].close()
    reserved.close()
    # Nobody listens: it returns at the timeout.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    monkeypatch.setenv("MASTER_PORT", str(closed.getsockname()[1]))
    plait.torch._wait_for_rank0_store(timedelta(seconds=0.1))
    closed.close()


@pytest.mark.parametrize("n", [2, 3, 4])
def test_every_collective_matches_gloo(n):
    code, out = run_ranks(n, "collectives")
    assert code == 0, out
    assert out.count("collectives ok") == n, out


@pytest.mark.parametrize("n", [2, 3])
def test_send_recv_order_any_source_and_batches(n):
    code, out = run_ranks(n, "point_to_point")
    assert code == 0, out
    assert out.count("point_to_point ok") == n, out


def test_new_group_subgroups():
    code, out = run_ranks(4, "subgroups")
    assert code == 0, out
    assert out.count("subgroups ok") == 4, out


def test_group_timeout_says_timed_out():
    code, out = run_ranks(2, "timeouts")
    assert code == 0, out
    assert "timed out as expected" in out and "Timed out" in out, out


def test_monitored_barrier_names_the_missing_rank():
    code, out = run_ranks(3, "monitored")
    assert code == 0, out
    assert "Rank 1 failed to pass monitoredBarrier" in out, out
    assert out.count("monitored ok") == 3, out


def test_mismatched_collective_fails_on_every_rank():
    code, out = run_ranks(3, "mismatch", case_timeout_s=30)
    assert code == 0, out
    assert out.count("mismatch ok") == 3, out
    assert "collective mismatch" in out, out


def test_ddp_steps_give_the_same_parameters_as_gloo():
    code, out = run_ranks(2, "ddp")
    assert code == 0, out
    assert out.count("ddp ok") == 2, out


def test_profiler_ranges_are_titled_plait_op():
    code, out = run_ranks(2, "profiler", script="torch_profiler_ranks.py")
    assert code == 0, out


# PyTorch's distributed suite expects these of a backend's ranges, the way gloo opens them:
# a coalesced call is titled by its base operation, and every point-to-point range is async
# and records the shape of the tensor it sends or fills.
@pytest.mark.parametrize("n", [2, 3])
def test_profiler_ranges_follow_gloo(n):
    code, out = run_ranks(n, "profiler_conventions", script="torch_profiler_ranks.py")
    assert code == 0, out
    assert out.count("profiler_conventions ok") == n, out


# glibc fills freed memory with this byte once the per-thread cache is off, so a thread that
# locks a mutex after it was freed gets EINVAL (std::system_error, then std::terminate)
# instead of silently working on stale memory.
POISON_FREED_MEMORY = {"MALLOC_PERTURB_": "165", "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}


@pytest.mark.parametrize("n", [2, 3])
def test_group_dropped_in_its_own_completion_thread(n):
    code, out = run_ranks(n, "group_dropped_in_its_completion_thread", env=POISON_FREED_MEMORY,
                          script="torch_work_ranks.py")
    assert code == 0, out
    assert out.count("group_dropped_in_its_completion_thread ok") == n, out


def test_orphaned_completion_thread_finishes_before_python_exits():
    code, out = run_ranks(2, "orphan_outlives_main", script="torch_work_ranks.py")
    assert code == 0, out
    assert out.count("orphan_outlives_main ok") == 2, out
    assert "the orphan finished its call after exit began" in out, out


def test_callback_running_at_exit_finishes_before_python_finalizes():
    code, out = run_ranks(2, "callback_outlives_main", script="torch_work_ranks.py")
    assert code == 0, out
    assert out.count("callback_outlives_main ok") == 2, out
    assert "the callback finished after exit began" in out, out


def test_wait_with_timeout_gives_up_while_another_thread_finishes():
    code, out = run_ranks(2, "wait_bounded", script="torch_work_ranks.py")
    assert code == 0, out
    assert out.count("wait_bounded ok") == 2, out


# A Future made on demand: asked for after the call (completed at once), before it (completed
# with the call, after its copy-back step), and failed by a failed call either way.
@pytest.mark.parametrize("n", [2, 3])
def test_futures_whenever_asked_for(n):
    code, out = run_ranks(n, "futures", script="torch_work_ranks.py")
    assert code == 0, out
    assert out.count("futures ok") == n, out


def test_dropped_call_keeps_its_buffer_until_done():
    code, out = run_ranks(2, "dropped_call_keeps_its_buffer", script="torch_work_ranks.py")
    assert code == 0, out
    assert out.count("dropped_call_keeps_its_buffer ok") == 2, out
