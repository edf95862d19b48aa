#!/usr/bin/env python3
"""Run PyTorch's own DistributedTest suite against any c10d backend.

Our equivalent of upstream's test/distributed/test_distributed_spawn.py (which the
torch wheel does not ship; distributed_test.py is in it). Run it with the project's
Python, .venv/bin/python (torch 2.15). Environment:

  BACKEND      gloo | nccl | mpi | ucc | <plugin name, e.g. plait>   (default gloo)
  WORLD_SIZE   number of ranks spawned per test                       (default 2)
  TEMP_DIR     scratch dir (the suite replaces it per test in setUp)  (default: mkdtemp)
  INIT_METHOD  as upstream's run_test.py: "env://" or file://<dir>/ (default
               file://$TEMP_DIR/). The ranks always init_process_group from a
               per-test file:// (TestDistBackend.init_method) and setUp re-points
               INIT_METHOD at a per-test file; the value here only decides in the
               parent whether test_barrier_timeout_global (file:// only) is skipped.
  MASTER_ADDR  default 127.0.0.1 (TestDistBackend.setUpClass sets it as well)
  MASTER_PORT  default: a free port picked at start-up
  CONFORMANCE_START  fork (default: ranks start at once) or spawn (as upstream: each rank
               re-imports this file and torch)
  CONFORMANCE_PROFILING=1  also run the suite's profiler checks on BACKEND (they run
               only for the backends on the suite's allowlists otherwise)

Arguments are unittest's, e.g. `-k test_all_reduce` or
`TestDistBackendWithSpawn.test_barrier`; `-v` is added unless -q is given.

For a backend that is not built into torch, this module imports `<BACKEND>.torch`
(only `plait.torch` today), which registers the backend with
torch.distributed.Backend.register_backend, and declares the backend in
DistTestCases.backend_feature["plugin"], ["ddp"] and ["subgroup"] BEFORE
distributed_test is imported, because the suite's skip decorators read those sets
at class-definition time. With the spawn start method every rank re-imports this
file as __mp_main__, so all of this happens at module top level.
"""

import os
import re
import socket
import sys
import tempfile
import time
import unittest

BUILTIN_BACKENDS = ("gloo", "nccl", "mpi", "ucc")

# CONFORMANCE_AS=gloo runs the suite's gloo-only tests (guarded by `BACKEND == "gloo"` or
# require_backend({"gloo"})) on the real backend: the suite reads the name "gloo" while every
# process group it asks "gloo" for is made by the real backend. The real name is kept in the
# environment because spawned ranks inherit the parent's (already rewritten) BACKEND.
BACKEND = os.environ.setdefault(
    "CONFORMANCE_REAL_BACKEND", os.environ.setdefault("BACKEND", "gloo"))
CONFORMANCE_AS = os.environ.get("CONFORMANCE_AS", "")
if CONFORMANCE_AS:
    os.environ["BACKEND"] = CONFORMANCE_AS
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
if "MASTER_PORT" not in os.environ:
    with socket.socket() as _s:
        _s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(_s.getsockname()[1])
if "TEMP_DIR" not in os.environ:
    _tmp = tempfile.mkdtemp(prefix="torch_conformance_")
    os.makedirs(os.path.join(_tmp, "barrier"), exist_ok=True)
    os.makedirs(os.path.join(_tmp, "test_dir"), exist_ok=True)
    os.environ["TEMP_DIR"] = _tmp
os.environ.setdefault("INIT_METHOD", "file://" + os.environ["TEMP_DIR"] + "/")
# common_utils switches to xmlrunner (not installed) when CI is set.
os.environ.pop("CI", None)


import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if BACKEND not in BUILTIN_BACKENDS:
    try:
        if BACKEND == "plait":
            import plait.torch  # noqa: F401,E402  registers the "plait" backend
        else:
            import importlib

            importlib.import_module(f"{BACKEND}.torch")
    except ImportError as _e:
        sys.exit(
            f"run_distributed_test: cannot import {BACKEND}.torch to register the "
            f"{BACKEND!r} c10d backend: {_e}\nPYTHONPATH={os.environ.get('PYTHONPATH', '')}"
        )

    from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

    # What the harness declares for a plugin backend. CONFORMANCE_FEATURES may name
    # more keys of backend_feature (e.g. "gpu": sequence numbers / object
    # collectives; "cuda": DDP comm hooks on CUDA); CONFORMANCE_SKIP_COLLECTIVES may
    # name keys of skip_collective the backend lacks ("sendrecv anysource",
    # "allgather_coalesced", "reduce", "cpu barrier"); both comma-separated.
    _features = os.environ.get("CONFORMANCE_FEATURES", "plugin,ddp,subgroup")
    for _feature in filter(None, (f.strip() for f in _features.split(","))):
        DistTestCases.backend_feature.setdefault(_feature, set()).add(BACKEND)
    for _coll in filter(None, (c.strip() for c in os.environ.get("CONFORMANCE_SKIP_COLLECTIVES", "").split(","))):
        DistTestCases.skip_collective.setdefault(_coll, set()).add(BACKEND)

if CONFORMANCE_AS and CONFORMANCE_AS != BACKEND:
    _init_process_group, _new_group = dist.init_process_group, dist.new_group

    def _real(backend):
        return BACKEND if backend is not None and str(backend).lower() == CONFORMANCE_AS else backend

    def _init_as(backend=None, *args, **kwargs):
        return _init_process_group(_real(backend), *args, **kwargs)

    def _new_group_as(*args, backend=None, **kwargs):
        return _new_group(*args, backend=_real(backend), **kwargs)

    dist.init_process_group, dist.new_group = _init_as, _new_group_as

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

torch.backends.cuda.matmul.allow_tf32 = False

if os.environ.get("CONFORMANCE_PROFILING") == "1":
    # The suite checks profiler ranges (titles, async flag, input shapes) only for the
    # backends on its allowlists, read when a test runs: put this one on them as well.
    import torch.testing._internal.distributed.distributed_test as _suite

    for _allowed in (_suite.PROFILING_SUPPORTED_BACKENDS,
                     _suite.SEND_RECV_PROFILING_SUPPORTED_BACKENDS):
        _allowed.append(BACKEND)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        # Forked ranks start at once; spawned ones import torch 2.15 again (seconds of CPU
        # each, per rank and per test: a full run took hours on 2 cores). Upstream runs the
        # suite spawned (CUDA cannot be forked); on CPU both are the same test.
        if os.environ.get("CONFORMANCE_START", "fork") == "spawn":
            self._spawn_processes()
        else:
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


class _RecordingResult(unittest.TextTestResult):
    """Verbose text result that also appends one line per test to $CONFORMANCE_RESULTS:
    name<TAB>outcome<TAB>seconds<TAB>one-line detail (skip reason / last error line)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        path = os.environ.get("CONFORMANCE_RESULTS")
        self._out = open(path, "a", buffering=1) if path else None
        self._t0 = {}

    def _record(self, test, outcome, detail=""):
        name = test.id().split(".")[-1]
        secs = time.monotonic() - self._t0.pop(test.id(), time.monotonic())
        detail = " ".join(str(detail).split())[:400]
        if self._out is not None:
            self._out.write(f"{name}\t{outcome}\t{secs:.1f}\t{detail}\n")

    _EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure)\b.*")

    @classmethod
    def _last_line(cls, err):
        # A rank's failure reaches the parent as RuntimeError("Process N exited with
        # error code 10 and exception:\n<the rank's traceback>"): report the last
        # "XxxError: ..." line of that traceback, else the message's last line.
        exc = err[1]
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        for ln in reversed(lines):
            if cls._EXC_LINE.match(ln):
                return ln if ln.startswith(type(exc).__name__) else f"{type(exc).__name__}: {ln}"
        return f"{type(exc).__name__}: {lines[-1] if lines else ''}"

    def startTest(self, test):
        self._t0[test.id()] = time.monotonic()
        super().startTest(test)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failed", self._last_line(err))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "errored", self._last_line(err))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failed", "unexpected success")


if __name__ == "__main__":
    from torch.testing._internal import common_utils

    # common_utils parses sys.argv (--seed, --accept, ...) and leaves the rest, unittest's
    # own arguments (-k PATTERN, test names, -f, ...), in UNITTEST_ARGS.
    common_utils.parse_cmd_line_args()
    argv = list(common_utils.UNITTEST_ARGS)
    verbosity = 1 if ({"-q", "--quiet"} & set(argv)) else 2
    argv = [a for a in argv if a not in ("-q", "--quiet", "-v", "--verbose")]
    runner = unittest.TextTestRunner(verbosity=verbosity, resultclass=_RecordingResult)
    unittest.main(module="__main__", argv=argv, testRunner=runner)
