"""Packing Parquet basins on an engine, side by side in one run:

  - the read limit: pyarrow reading every file (one process, and two
    processes each reading half the files at once);
  - `stoker pack --from parquet --group-by basin --order-by date`, one
    process; and two `--part I/2` processes at once, then `stoker merge`
    (the plain way to use two cores);
  - stoker.dask.write on a LocalCluster of 1 and of 2 worker processes,
    partitions of whole basins (the same work as --part: the engine's
    overhead), and with Dask's shuffle on the key (the general case, groups
    spread over partitions);
  - on a local Ray of 1 and of 2 CPUs: Ray Data reading the files alone
    (its own read limit), stoker.ray.Datasink fed blocks of whole basins,
    and stoker.ray.write (Ray Data's groupby on the key first).

Each basin is one Parquet file (the seeds' case: one file per basin), so
that every way packs the same records.  Rates count the Parquet files'
bytes.  Medians of several repetitions, the contenders in turn in each;
clusters are started before the clock and are not timed.  Writes its
section of BENCHMARKS.md.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from common import OUT, STOKER, machine, median, write_section


def make_basins(d, n, days):
    import pandas as pd
    d.mkdir(parents=True, exist_ok=True)
    if len(glob.glob(str(d / "*.parquet"))) == n:
        return
    rng = np.random.default_rng(0)
    for b in range(n):
        cols = {f"f{k}": rng.standard_normal(days).astype(np.float32) for k in range(8)}
        pd.DataFrame({"basin": np.full(days, b, np.int64),
                      "date": rng.permutation(days).astype(np.int32), **cols,
                      "q": rng.standard_normal(days).astype(np.float32)}).to_parquet(
            d / f"basin{b:05d}.parquet", index=False)


PYARROW_READ = r"""
import sys, pyarrow.parquet as pq
for f in sys.argv[1:]:
    pq.read_table(f)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--basins", type=int, default=1000)
    ap.add_argument("--days", type=int, default=3650)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    src = OUT / "pack-engines" / "basins"
    make_basins(src, a.basins, a.days)
    files = sorted(glob.glob(str(src / "*.parquet")))
    nbytes = sum(os.path.getsize(f) for f in files)
    out = OUT / "pack-engines" / "out"
    env = dict(os.environ, STOKER_PYTHON=sys.executable)
    fields = {"x": [f"f{k}" for k in range(8)], "y": ["q"]}
    field_args = ["--field", "x=" + ",".join(fields["x"]), "--field", "y=q"]
    halves = [files[: len(files) // 2], files[len(files) // 2:]]

    def clean():
        shutil.rmtree(out, ignore_errors=True)
        for p in glob.glob(str(out.parent / ".out.stoker-parts*")):
            shutil.rmtree(p, ignore_errors=True)

    def t_read1():
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", PYARROW_READ, *files], check=True)
        return time.perf_counter() - t

    def t_read2():
        t = time.perf_counter()
        ps = [subprocess.Popen([sys.executable, "-c", PYARROW_READ, *h]) for h in halves]
        for p in ps:
            assert p.wait() == 0
        return time.perf_counter() - t

    def t_pack1():
        clean()
        t = time.perf_counter()
        subprocess.run([str(STOKER), "pack", "--from", "parquet", str(src), "-o", str(out),
                        "--group-by", "basin", "--order-by", "date", *field_args, "-q"],
                       check=True, env=env)
        return time.perf_counter() - t

    def t_pack2():
        clean()
        t = time.perf_counter()
        ps = [subprocess.Popen([str(STOKER), "pack", "--from", "parquet", str(src), "-o",
                                str(out), "--group-by", "basin", "--order-by", "date",
                                *field_args, "--part", f"{i}/2", "-q"], env=env)
              for i in range(2)]
        for p in ps:
            assert p.wait() == 0
        subprocess.run([str(STOKER), "merge", str(out)], check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t

    import dask.dataframe as dd
    import pandas as pd
    import stoker.dask
    from distributed import Client, LocalCluster

    def read_files(fs):
        return pd.concat([pd.read_parquet(f) for f in fs])

    def dask_timer(workers, shuffle):
        def run():
            clean()
            chunks = [files[i:i + 50] for i in range(0, len(files), 50)]
            if shuffle:
                ddf = dd.read_parquet(files).repartition(npartitions=len(chunks))
            else:
                ddf = dd.from_map(read_files, chunks)
            t = time.perf_counter()
            n = stoker.dask.write(ddf, out, group_by="basin", order_by="date", fields=fields,
                                  shuffle=shuffle, npartitions=len(chunks))
            assert n == a.basins, n
            return time.perf_counter() - t
        return run

    import ray
    import stoker.ray

    def ray_timer(kind):
        clean()
        ds = ray.data.read_parquet(files)
        t = time.perf_counter()
        if kind == "read":
            # Ray Data reading the files, nothing written: its read limit.
            rows = sum(b.num_rows for b in ds.iter_batches(batch_format="pyarrow",
                                                          batch_size=None))
            assert rows == a.basins * a.days, rows
        elif kind == "direct":
            # Blocks of whole basins (a file each) straight to the sink.
            sink = stoker.ray.Datasink(out, group_by="basin", order_by="date", fields=fields)
            ds.write_datasink(sink)
            assert sink.records == a.basins, sink.records
        else:
            n = stoker.ray.write(ds, out, group_by="basin", order_by="date", fields=fields)
            assert n == a.basins, n
        return time.perf_counter() - t

    r = {}

    def add(k, s):
        r.setdefault(k, []).append(nbytes / s)

    for rep in range(a.reps):
        add("read1", t_read1())
        add("read2", t_read2())
        add("pack1", t_pack1())
        add("pack2", t_pack2())
        for w in (1, 2):
            with LocalCluster(n_workers=w, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cl, Client(cl):
                add(f"dask{w}", dask_timer(w, False)())
                add(f"dask{w}_shuffle", dask_timer(w, True)())
        for c in (1, 2):
            ray.init(num_cpus=c, include_dashboard=False, log_to_driver=False)
            ray.data.DataContext.get_current().enable_progress_bars = False
            try:
                add(f"ray{c}_read", ray_timer("read"))
                add(f"ray{c}_direct", ray_timer("direct"))
                add(f"ray{c}", ray_timer("groupby"))
            finally:
                ray.shutdown()
        print(f"rep {rep}: " + ", ".join(f"{k} {v[-1] / 1e6:.0f}" for k, v in r.items()),
              flush=True)
    clean()
    m = {k: median(v) / 1e6 for k, v in r.items()}
    lines = [
        "## Packing Parquet basins on an engine (issue: packing at scale)",
        "",
        f"Machine: {machine()}. Medians of {a.reps} repetitions, the contenders in turn in each. "
        "Produced by `make bench` (bench/pack_engines.py).",
        "",
        f"{a.basins:,} basins, one Parquet file each ({a.days:,} days in shuffled order, 8 "
        f"float32 features and a target; {nbytes / 2**20:.0f} MiB of Parquet), packed with "
        "`group_by=basin, order_by=date` into x [*, 8] and y [*, 1]. MB/s counts the Parquet "
        "bytes; the engines' clusters are started before the clock. Dask runs partitions of "
        "50 whole basins (the same work as `--part`), and with its shuffle on the key (every "
        "row moved between workers first, as groups spread over files need).",
        "",
        "| way | 1 process / worker | 2 processes / workers |",
        "|---|---:|---:|",
        f"| pyarrow reading the files (the read limit) | {m['read1']:.0f} | {m['read2']:.0f} |",
        f"| `stoker pack --from parquet` (2: `--part I/2` each, then `stoker merge`) | "
        f"{m['pack1']:.0f} | {m['pack2']:.0f} |",
        f"| stoker.dask.write, partitions of whole basins | {m['dask1']:.0f} | "
        f"{m['dask2']:.0f} |",
        f"| stoker.dask.write, Dask's shuffle on the key | {m['dask1_shuffle']:.0f} | "
        f"{m['dask2_shuffle']:.0f} |",
        f"| Ray Data reading the files, nothing written (its read limit) | "
        f"{m['ray1_read']:.0f} | {m['ray2_read']:.0f} |",
        f"| stoker.ray.Datasink, blocks of whole basins | {m['ray1_direct']:.0f} | "
        f"{m['ray2_direct']:.0f} |",
        f"| stoker.ray.write (Ray Data's groupby on the key) | {m['ray1']:.0f} | "
        f"{m['ray2']:.0f} |",
        "",
        f"Against the read limit: one process packs at {m['pack1'] / m['read1']:.2f} of "
        f"pyarrow's read rate, two at {m['pack2'] / m['read2']:.2f}. The engine's overhead "
        f"against the plain `--part` run of the same work (2 workers): Dask "
        f"{m['dask2'] / m['pack2']:.2f} of its rate; with the shuffle "
        f"{m['dask2_shuffle'] / m['pack2']:.2f}; Ray {m['ray2_direct'] / m['pack2']:.2f}, "
        f"{m['ray2'] / m['pack2']:.2f} with its groupby. Ray Data's own read of these "
        f"thousand small files is most of its time here: the sink runs at "
        f"{m['ray2_direct'] / m['ray2_read']:.2f} of Ray's read rate.",
        "",
        "All repetitions (MB/s): " + "; ".join(
            f"{k}: " + ", ".join(f"{x / 1e6:.0f}" for x in v) for k, v in r.items()),
    ]
    text = "\n".join(lines)
    print(text)
    write_section("pack_engines", text)


if __name__ == "__main__":
    main()
