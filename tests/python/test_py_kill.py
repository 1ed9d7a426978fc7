"""Every writer killed at random moments (SIGKILL), 50 times each: stoker.write
from a dict, an iterable and an Arrow table, each creating a dataset and
replacing one, and `stoker pack --from parquet`.  What survives is the
previous dataset, the new one whole, or (when there was no previous one)
one that reports itself incomplete: never a dataset that opens as complete
and holds anything else."""
import concurrent.futures as cf
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker

from conftest import SEED, cases

# Kills per (writer, creating or replacing): 50 under make test-full, 12 in
# make test (each run's kill times drawn from STOKER_TEST_SEED's stream).
KILLS = int(os.environ.get("STOKER_KILLS") or cases(50, 12))
N_OLD, N_NEW = 300, 5000


def values(n, base):
    return (np.arange(n * 64, dtype=np.float32).reshape(n, 64) + base)


CHILD = r"""
import sys, numpy as np, stoker
kind, path, overwrite = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
n, base = int(sys.argv[4]), float(sys.argv[5])
x = np.arange(n * 64, dtype=np.float32).reshape(n, 64) + base
kw = dict(overwrite=overwrite, shard_bytes=1 << 16)
if kind == "dict":
    stoker.write(path, {"x": x}, **kw)
elif kind == "iter":
    stoker.write(path, ({"x": r} for r in x), **kw)
else:
    import pyarrow as pa
    t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 64)})
    stoker.write(path, pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=50)), **kw)
"""


def survivor(path):
    """'old', 'new', 'incomplete' or 'absent'; anything else fails."""
    if not os.path.exists(os.path.join(path, "manifest.json")):
        if not os.path.isdir(path):
            return "absent"
        with pytest.raises(stoker.StokerError) as ei:
            stoker.Loader(path, batch_size=1)
        assert "incomplete" in str(ei.value) or "not a stoker dataset" in str(ei.value), \
            str(ei.value)
        return "incomplete"
    with stoker.Loader(path, batch_size=4096, shuffle="sequential", verify=True) as ld:
        got = np.concatenate([np.array(b["x"]) for b in ld])
    for name, n, base in (("old", N_OLD, 1e6), ("new", N_NEW, 0.0)):
        if got.shape == (n, 64) and np.array_equal(got, values(n, base)):
            return name
    raise AssertionError(f"{path}: a complete dataset holding neither the old nor the new data")


def one_kill(kind, overwrite, root, i, rng):
    path = os.path.join(root, f"{kind}-{int(overwrite)}-{i}")
    if overwrite:
        stoker.write(path, {"x": values(N_OLD, 1e6)}, shard_bytes=1 << 16)
    if kind == "parquet":
        src = os.path.join(root, "src.parquet")
        cmd = [CLI, "pack", "--from", "parquet", src, "-o", path, "--shard-size", "64K", "-q"]
        if overwrite:
            cmd.append("--force")
        env = dict(os.environ, STOKER_PYTHON=sys.executable)
    else:
        cmd = [sys.executable, "-c", CHILD, kind, path, "1" if overwrite else "0", str(N_NEW),
               "0"]
        env = None
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    # From the moment the writer exists (its journal appears) to a little
    # after an uninterrupted write would have ended.
    wait_for_writer(p, path)
    time.sleep(rng.uniform(0.0, DURATION[kind]))
    p.send_signal(signal.SIGKILL)
    p.wait()
    s = survivor(path)
    if overwrite:
        assert s in ("old", "new"), f"{path}: replacing left {s}"
    return s


CLI = None
DURATION = {}


def wait_for_writer(p, path, limit=30.0):
    t0 = time.perf_counter()
    while not os.path.exists(os.path.join(path, ".packing")):
        if p.poll() is not None or time.perf_counter() - t0 > limit:
            return
        time.sleep(0.002)


@pytest.mark.parametrize("kind", ["dict", "iter", "arrow", "parquet"])
def test_killed_writers_leave_the_old_dataset_the_new_one_or_an_incomplete_one(
        tmp_path, kind):
    global CLI
    build = os.environ.get("STOKER_BUILD", "build")
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    CLI = os.path.join(build if os.path.isabs(build) else os.path.join(top, build), "stoker")
    if kind == "parquet":
        x = values(N_NEW, 0.0)
        pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 64)}),
                       tmp_path / "src.parquet", row_group_size=100)
    # How long an uninterrupted write takes here, to spread the kills over it.
    timing = str(tmp_path / "timing")
    if kind == "parquet":
        cmd = [CLI, "pack", "--from", "parquet", str(tmp_path / "src.parquet"), "-o", timing,
               "--shard-size", "64K", "-q"]
    else:
        cmd = [sys.executable, "-c", CHILD, kind, timing, "0", str(N_NEW), "0"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                         env=dict(os.environ, STOKER_PYTHON=sys.executable))
    wait_for_writer(p, timing)
    t0 = time.perf_counter()
    assert p.wait() == 0
    DURATION[kind] = max(time.perf_counter() - t0, 0.05) * 1.3
    assert survivor(str(tmp_path / "timing")) == "new"
    rng = random.Random(f"{SEED}-{kind}")
    jobs = [(kind, ow, str(tmp_path), i, random.Random(rng.random()))
            for ow in (False, True) for i in range(KILLS)]
    with cf.ThreadPoolExecutor(4) as ex:
        outcomes = list(ex.map(lambda j: (j[1], one_kill(*j)), jobs))
    for ow in (False, True):
        seen = [s for o, s in outcomes if o == ow]
        assert len(seen) == KILLS
        print(kind, "replacing" if ow else "creating",
              {k: seen.count(k) for k in sorted(set(seen))})
