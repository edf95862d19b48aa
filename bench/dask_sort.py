"""Dask distributed's sort of the records `plait sort gen` wrote: the peer of `plait sort run`.

    /usr/bin/python3 bench/dask_sort.py --in DIR --out DIR2 [--workers 4] [--chunk-mb 0]
        [--partitions-per-worker 1] [--memory-limit 0]

A LocalCluster of WORKERS processes, one thread each (as plait's ranks). Each input file (or,
with --chunk-mb, each piece of that many megabytes of it) is one partition of a dask DataFrame whose columns hold the whole record (the key as k_hi u64 +
k_lo u16, big-endian so integer order is byte order, the other 90 bytes as eleven u64 and a
u16), sort_values on the key (Dask samples quantiles and shuffles the rows to their range,
as plait does), and each output partition written back as 100-byte records to
DIR2/part-NNNNN, so `plait sort validate DIR2 --expect DIR` checks it like plait's output.
Prints one line: records, seconds, GB/s.
"""
import argparse
import glob
import os
import time

import numpy as np

REC = 100
# The record as columns: key first (big-endian: integer order is byte order), then the rest.
FIELDS = [("k_hi", ">u8"), ("k_lo", ">u2")] + [(f"p{i}", "<u8") for i in range(11)] + [("p11", "<u2")]
DTYPE = np.dtype(FIELDS)
assert DTYPE.itemsize == REC


def read_part(path, first=0, count=-1):
    import pandas as pd

    a = np.fromfile(path, dtype=DTYPE, count=count, offset=first * REC)
    return pd.DataFrame({name: a[name].astype(a[name].dtype.newbyteorder("=")) for name, _ in FIELDS})


def write_part(df, out_dir, partition_info=None):
    """Orders one output partition by the whole key and writes it as records."""
    import pandas as pd

    df = df.sort_values(["k_hi", "k_lo"])
    a = np.empty(len(df), dtype=DTYPE)
    for name, _ in FIELDS:
        a[name] = df[name].to_numpy()
    idx = partition_info["number"] if partition_info else 0
    with open(os.path.join(out_dir, f"part-{idx:05d}"), "wb") as f:
        a.tofile(f)
        f.flush()
        os.fdatasync(f.fileno())  # on disk, as plait's part files are
    return pd.DataFrame({"rows": [len(df)]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=4)
    # Past memory (16 GB here): input read in pieces, more and smaller output partitions, and a
    # worker memory limit past which Dask spills to disk.
    ap.add_argument("--chunk-mb", type=int, default=0)
    ap.add_argument("--partitions-per-worker", type=int, default=1)
    ap.add_argument("--memory-limit", default="0")
    args = ap.parse_args()

    import dask
    import dask.dataframe as dd
    from dask.distributed import Client, LocalCluster

    files = sorted(glob.glob(os.path.join(args.inp, "input-*")))
    os.makedirs(args.out, exist_ok=True)
    for old in glob.glob(os.path.join(args.out, "part-*")):
        os.remove(old)
    records = sum(os.path.getsize(f) for f in files) // REC
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      memory_limit=args.memory_limit, dashboard_address=None) as cluster, Client(cluster):
        start = time.perf_counter()
        parts = []
        for f in files:
            n = os.path.getsize(f) // REC
            step = args.chunk_mb * 1000000 // REC if args.chunk_mb > 0 else max(n, 1)
            parts += [dask.delayed(read_part)(f, at, min(step, n - at)) for at in range(0, n, step)]
        meta = read_part(files[0], 0, 1).iloc[:0]
        df = dd.from_delayed(parts, meta=meta)
        # Dask 2022.12 sorts by one column: the key's first 8 bytes place a row; each output
        # partition is then ordered by the whole key before it is written.
        out = df.sort_values("k_hi", npartitions=args.workers * args.partitions_per_worker)
        written = out.map_partitions(write_part, args.out, meta={"rows": "i8"}).compute()
        seconds = time.perf_counter() - start
    got = int(written["rows"].sum())
    assert got == records, (got, records)
    print(f"dask sort: {records} records, {seconds:.3f} s, {records * REC / 1e9 / seconds:.3f} GB/s")


if __name__ == "__main__":
    main()
