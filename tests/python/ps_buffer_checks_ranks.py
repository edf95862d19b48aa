"""Ranks of test_ps_rdma.py's buffer checks: every form of push, pull and push_pull (one key,
a list of keys) refuses a buffer that does not hold its key's registered size and type, or an
output it cannot write, with plait.InvalidUsageError before anything is sent. Each pull buffer
is written for the key's whole size: a short one let the server write past its end."""
import sys

import numpy as np

import plait
import plait.ps

BIG = 1 << 20  # a short pull buffer for this key overflowed the heap by 4 MiB


def refused(what, call, words):
    try:
        call()
    except plait.InvalidUsageError as e:
        assert words in str(e), (what, str(e))
        return
    raise AssertionError(f"{what}: accepted")


def main():
    kv = plait.ps.KVStore(servers=1)
    kv.register(7, np.zeros(BIG, np.float32))
    kv.register(8, np.zeros(5, np.float64))
    if kv.is_server:
        kv.finalize()
        return
    me = kv.worker_index
    big, small = np.ones(BIG, np.float32), np.ones(5, np.float64)
    out_big, out_small = np.zeros(BIG, np.float32), np.zeros(5, np.float64)
    one = np.zeros(1, np.float32)
    readonly = np.zeros(5, np.float64)
    readonly.flags.writeable = False
    cases = [
        ("list pull, short out", lambda: kv.pull([7], [one]), "key 7 holds 1048576 elements (f32); "
         "the out buffer of key 7 has 1 (f32)"),
        ("list push, short data", lambda: kv.push([7, 8], [one, small]), "the data of key 7 has 1"),
        ("list push_pull, short out", lambda: kv.push_pull([7, 8], [big, small], [one, out_small]),
         "the out buffer of key 7 has 1"),
        ("one-key push_pull, short out", lambda: kv.push_pull(7, big, one), "the out buffer of key 7 has 1"),
        ("one-key pull, wrong dtype", lambda: kv.pull(8, np.zeros(5, np.float32)),
         "key 8 holds 5 elements (f64); the out buffer of key 8 has 5 (f32)"),
        ("list pull, wrong dtype", lambda: kv.pull([8], [np.zeros(10, np.float32)]), "has 10 (f32)"),
        ("list pull, read-only out", lambda: kv.pull([8], [readonly]), "writable"),
        ("list push_pull, read-only out", lambda: kv.push_pull([8], [small], [readonly]), "writable"),
        ("one-key pull, read-only out", lambda: kv.pull(8, readonly), "writable"),
        ("fewer buffers than keys", lambda: kv.pull([7, 8], [out_big]), "2 keys and 1 out buffers"),
        ("more buffers than keys", lambda: kv.push([8], [small, small]), "1 keys and 2 data buffers"),
        ("one buffer for a list of keys", lambda: kv._kv.pull([8], out_small),
         "a list of keys takes a list of out buffers"),
    ]
    for what, call, words in cases:
        refused(what, call, words)
    # Nothing was sent: the first real round is round 1, with every worker's ones in it.
    work = kv.push_pull([7, 8], [big, small], [out_big, out_small])
    work.wait()
    assert work.version == 1, work.version
    assert np.all(out_big == kv.num_workers) and np.all(out_small == kv.num_workers), \
        (out_big[:3], out_small)
    kv.finalize()
    print(f"worker {me}: ps buffer checks ok", flush=True)


if __name__ == "__main__":
    sys.exit(main())
