"""Rank programs for test_shuffle.py: each checks what it received against what every rank
must have sent it (all ranks make their rows from the same seeds) and prints one ok line."""
import sys

import numpy as np

import plait.shuffle

ROWS = 5000
DTYPE = np.dtype([("key", "u8"), ("word", "S7"), ("value", "f4", 3)])


def rows_of(rank):
    rng = np.random.default_rng(rank)
    a = np.zeros(ROWS, DTYPE)
    a["key"] = rng.integers(0, 1 << 40, ROWS)
    a["word"] = [b"w%d" % (k % 1000) for k in a["key"]]
    a["value"] = rng.standard_normal((ROWS, 3)).astype(np.float32)
    return a


def structured(mode):
    sh = plait.shuffle.Shuffle(mode=mode)
    me, n = sh.rank, sh.size
    got = sh.by_key(rows_of(me), "key")
    assert got.dtype == DTYPE, got.dtype
    want = np.concatenate([r[plait.shuffle.hash_partitions(r["key"], n) == me]
                           for r in (rows_of(m) for m in range(n))])
    assert np.array_equal(got, want), (len(got), len(want))
    # By a bytes field, and a second round on the same shuffle.
    got = sh.by_key(rows_of(me), "word")
    parts = [plait.shuffle.hash_partitions(rows_of(m)["word"], n) for m in range(n)]
    want = np.concatenate([rows_of(m)[parts[m] == me] for m in range(n)])
    assert np.array_equal(got, want)
    # Every row with one word lands on one rank: the same word always goes the same way.
    words = set(got["word"].tolist())
    others = sh.exchange(np.array(sorted(words), dtype="S7"), np.zeros(len(words), np.int32))
    if me == 0:
        all_words = others.tolist()
        assert len(all_words) == len(set(all_words)), "a word was sent to two ranks"
    print(f"rank {me}: shuffle {mode} ok ({len(got)} rows)", flush=True)


def raw_bytes():
    sh = plait.shuffle.Shuffle()
    me, n = sh.rank, sh.size
    data = bytes(range(me * 10, me * 10 + 10)) * 4  # four 10-byte records
    got = sh.exchange(data, [(me + 1) % n] * 4, record_bytes=10)
    src = (me - 1) % n
    assert got.tobytes() == bytes(range(src * 10, src * 10 + 10)) * 4, got
    try:
        sh.exchange(b"x" * 15, [0], record_bytes=10)
    except plait.InvalidUsageError as e:
        assert "15 bytes of records is not a whole number of 10-byte records" in str(e), e
    else:
        raise AssertionError("a torn record was shuffled")
    print(f"rank {me}: shuffle bytes ok", flush=True)


def spilled_sorted_runs(mode):
    """Eight runs a rank through a 64 KiB budget, keyed: spilled, merged, in key order (push:
    the mappers write each window the reducer gives a credit for)."""
    sorted_dtype = np.dtype([("key", ">u8"), ("value", "f4", 3)])  # big-endian: memcmp order

    def runs_of(rank):
        rng = np.random.default_rng(100 + rank)
        out = []
        for _ in range(8):
            r = np.zeros(2000, sorted_dtype)
            r["key"] = rng.integers(0, 1 << 40, len(r))
            r["value"][:, 0] = rank
            out.append(r)
        return out

    sh = plait.shuffle.Shuffle(mode=mode, memory_bytes=64 << 10)
    me, n = sh.rank, sh.size

    def dest(r):  # ranges of the key space: rank i gets the i-th
        return (r["key"].astype(np.uint64) * np.uint64(n) >> np.uint64(40)).astype(np.int32)

    runs = runs_of(me)
    got = sh.exchange(runs, [dest(r) for r in runs], key_bytes=8)
    assert got.dtype == sorted_dtype, got.dtype
    every = np.concatenate([r for m in range(n) for r in runs_of(m)])
    want = every[dest(every) == me]
    want = want[np.argsort(want["key"], kind="stable")]
    assert np.array_equal(got["key"], want["key"]), "not the keys, or not in order"
    assert np.array_equal(np.sort(got, order=["key", "value"]), np.sort(want, order=["key", "value"]))
    stats = sh.stats(sorted_dtype.itemsize, key_bytes=8)
    assert stats["bytes_spilled"] > 0 and stats["runs_spilled"] > 0, stats
    try:
        sh.exchange([runs[0]], [], key_bytes=8)
    except ValueError as e:
        assert "1 runs of records but 0 arrays of destinations" in str(e), e
    else:
        raise AssertionError("runs without destinations were shuffled")
    print(f"rank {me}: shuffle spilled {mode} ok ({len(got)} rows, {stats['bytes_spilled']} bytes spilled)",
          flush=True)


if __name__ == "__main__":
    case = sys.argv[1]
    if case in ("pull", "push"):
        structured(case)
    elif case == "bytes":
        raw_bytes()
    elif case in ("spilled", "spilled_push"):
        spilled_sorted_runs("push" if case == "spilled_push" else "pull")
    else:
        sys.exit(f"unknown case {case}")
