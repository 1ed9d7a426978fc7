"""Packing on an existing engine: a real Dask cluster (a scheduler and two
worker processes) and a real local Ray instance each pack a few thousand
basin Parquet files, every basin's rows split between two files, with
group_by and order_by; the result holds exactly the records of a
single-process pack of the same files (per basin, byte for byte).  A
worker killed in the middle of a task (the engine runs it again) still
gives every record once; a group split between partitions is refused;
parts written with their count unknown are merged with it; a part
rewritten over one killed mid-write leaves one copy."""
import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from test_py_remote import KEY, SECRET, aws, served  # noqa: F401  (fixtures)

FIELDS = {"x": ["f1", "f2", "f3"], "y": ["q"]}
BASINS = 1000  # two files each


@pytest.fixture(scope="module")
def basins(tmp_path_factory):
    """BASINS basins of 60 days x 3 features and a target, each basin's
    days split between two Parquet files (its first and its second half),
    plus a static attribute; and the single-process pack of all of them."""
    d = tmp_path_factory.mktemp("basins")
    rng = np.random.default_rng(3)
    for b in range(BASINS):
        days = rng.permutation(60)  # rows out of date order
        for half in range(2):
            sel = days[half::2]
            df = pd.DataFrame({"basin": np.full(len(sel), b, np.int64),
                               "date": sel.astype(np.int32),
                               "f1": rng.standard_normal(len(sel)).astype(np.float32),
                               "f2": rng.standard_normal(len(sel)).astype(np.float32),
                               "f3": rng.standard_normal(len(sel)).astype(np.float32),
                               "q": rng.standard_normal(len(sel)).astype(np.float32),
                               "area": np.full(len(sel), b * 1.5, np.float32)})
            df.to_parquet(d / f"basin{b:04d}-{half}.parquet", index=False)
    files = sorted(glob.glob(str(d / "*.parquet")))
    ref = d.parent / "ref.stk"
    stoker.write(ref, pa.concat_tables([pq.read_table(f) for f in files]), group_by="basin",
                 order_by="date", fields=dict(FIELDS, area=["area"]), static=["area"])
    return {"dir": d, "files": files, "ref": ref}


def records(path):
    out = {}
    with stoker.Loader(path, 1, shuffle="sequential") as ld:
        for b in ld:
            out[int(np.asarray(b["basin"])[0])] = {k: np.asarray(v).tobytes() for k, v in b.items()}
    return out


def same_records(path, ref):
    got, want = records(path), records(ref)
    assert sorted(got) == sorted(want) == list(range(BASINS))
    for k in want:
        assert got[k] == want[k], k


KILL_ONCE = """
import os
def kill_once(df, marker):
    # The first attempt of the task that reads the marked partition takes
    # its worker process down a moment later, at some point of the task.
    if len(df) and marker and not os.path.exists(marker):
        open(marker, "w").close()
        import threading
        threading.Timer(0.05, lambda: os._exit(1)).start()
        import time
        time.sleep(0.2)
    return df
"""


@pytest.fixture(scope="module")
def kill_module(tmp_path_factory):
    d = tmp_path_factory.mktemp("killmod")
    (d / "stk_kill_once.py").write_text(KILL_ONCE)
    sys.path.insert(0, str(d))
    old = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{d}{os.pathsep}{old}" if old else str(d)
    yield
    sys.path.remove(str(d))
    os.environ["PYTHONPATH"] = old


@pytest.fixture(scope="module")
def s3_env(served):
    """What the engines' worker processes need to reach the local S3
    server (as a cluster's workers get their credentials from their
    environment): given to them when they start."""
    return {"AWS_ENDPOINT_URL": served["s3"], "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1",
            "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}


@pytest.fixture(scope="module")
def dask_client(kill_module, s3_env):
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("dask.dataframe")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, env=s3_env) as cluster:
        with distributed.Client(cluster) as client:
            yield client


def test_dask_packs_like_one_process(basins, dask_client, tmp_path):
    import dask.dataframe as dd
    import stoker.dask
    ddf = dd.read_parquet(basins["files"])
    assert ddf.npartitions > 1
    out = tmp_path / "dask.stk"
    # Thousands of small files: shuffled into a few partitions, a part each.
    n = stoker.dask.write(ddf, out, group_by="basin", order_by="date",
                          fields=dict(FIELDS, area=["area"]), static=["area"], npartitions=6)
    assert n == BASINS
    same_records(out, basins["ref"])
    assert not os.path.exists(tmp_path / ".dask.stk.stoker-parts")
    # A second write to the same path is refused; with overwrite it
    # replaces the dataset once the new one is complete.
    with pytest.raises(stoker.StokerError, match="already there"):
        stoker.dask.write(ddf, out, group_by="basin", order_by="date")
    n = stoker.dask.write(ddf.partitions[:40], out, group_by="basin", order_by="date",
                          fields=FIELDS, overwrite=True, npartitions=2)
    assert 0 < n < BASINS
    with stoker.Loader(out, 1) as ld:
        assert len(ld) == n


def test_dask_refuses_a_split_group(basins, dask_client, tmp_path):
    import dask.dataframe as dd
    import stoker.dask
    # Every basin's first half, then every second half: any two partitions
    # share basins.
    files = basins["files"][:400]
    ddf = dd.from_map(lambda fs: pd.concat([pd.read_parquet(f) for f in fs]),
                      [files[0::2], files[1::2]])
    with pytest.raises(stoker.InvalidArgument, match=r"group basin=\d+ has rows in part \d+ "
                                                     r"and in part \d+"):
        stoker.dask.write(ddf, tmp_path / "split.stk", group_by="basin", shuffle=False)
    # Nothing at the path, nothing left beside it.
    assert not os.path.exists(tmp_path / "split.stk")
    assert not os.path.exists(tmp_path / ".split.stk.stoker-parts")
    with pytest.raises(stoker.InvalidArgument, match="not a column"):
        stoker.dask.write(ddf, tmp_path / "x.stk", group_by="nope")


def test_dask_worker_killed_mid_task(basins, dask_client, tmp_path):
    import dask.dataframe as dd
    import stoker.dask
    from stk_kill_once import kill_once
    # Partitions of whole basins: 50 basins' two files each.
    files = basins["files"][:400]
    ddf = dd.from_map(lambda fs: pd.concat([pd.read_parquet(f) for f in fs]),
                      [files[i:i + 100] for i in range(0, 400, 100)])
    marker = str(tmp_path / "killed")
    # The partition function runs in the write task's graph: the worker of
    # the first task to get rows dies once, and Dask runs it again.
    ddf = ddf.map_partitions(kill_once, marker, meta=ddf._meta)
    out = tmp_path / "killed.stk"
    n = stoker.dask.write(ddf, out, group_by="basin", order_by="date", fields=FIELDS,
                          shuffle=False)
    assert os.path.exists(marker)
    ref = tmp_path / "ref.stk"
    stoker.write(ref, pa.concat_tables([pq.read_table(f) for f in basins["files"][:400]]),
                 group_by="basin", order_by="date", fields=FIELDS, static=[])
    got, want = records(out), records(ref)
    assert n == len(want) == 200 and got == want


@pytest.fixture(scope="module")
def ray_local(kill_module, s3_env):
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    env = dict(s3_env, PYTHONPATH=os.environ["PYTHONPATH"])
    # Under scripts/py-asan.sh the sanitizers' runtime is preloaded: Ray's
    # workers (Python, importing the instrumented extension) need it, but
    # its own servers started with it too slowly for Ray's fixed 30 s
    # startup wait on a loaded 2-CPU machine; so they start without it.
    preload = os.environ.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": env})
    finally:
        if preload:
            os.environ["LD_PRELOAD"] = preload
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def test_ray_packs_like_one_process(basins, ray_local, tmp_path):
    import stoker.ray
    ds = ray_local.data.read_parquet(basins["files"])
    out = tmp_path / "ray.stk"
    n = stoker.ray.write(ds, out, group_by="basin", order_by="date",
                         fields=dict(FIELDS, area=["area"]), static=["area"])
    assert n == BASINS
    same_records(out, basins["ref"])
    assert not os.path.exists(tmp_path / ".ray.stk.stoker-parts")


def test_ray_refuses_a_split_group(basins, ray_local, tmp_path):
    import stoker.ray
    ds = ray_local.data.read_parquet(basins["files"][:200]).repartition(4)
    with pytest.raises(Exception, match=r"group basin=\d+ has rows in part"):
        ds.write_datasink(stoker.ray.Datasink(tmp_path / "split.stk", group_by="basin"))
    assert not os.path.exists(tmp_path / "split.stk")
    assert not os.path.exists(tmp_path / ".split.stk.stoker-parts")


def test_ray_worker_killed_mid_task(basins, ray_local, tmp_path):
    import stoker.ray
    from stk_kill_once import kill_once
    files = basins["files"][:400]
    marker = str(tmp_path / "killed")
    ds = ray_local.data.read_parquet(files).map_batches(
        kill_once, fn_args=(marker,), batch_format="pandas")
    out = tmp_path / "killed.stk"
    n = stoker.ray.write(ds, out, group_by="basin", order_by="date", fields=FIELDS)
    assert os.path.exists(marker)
    ref = tmp_path / "ref.stk"
    stoker.write(ref, pa.concat_tables([pq.read_table(f) for f in files]), group_by="basin",
                 order_by="date", fields=FIELDS, static=[])
    got, want = records(out), records(ref)
    assert n == len(want) == 200 and got == want


def test_open_count_parts_merge_with_their_count(tmp_path):
    path = tmp_path / "open"
    for i in (2, 0, 1):
        stoker.write(path, {"x": np.arange(10 * i, 10 * i + 10, dtype=np.int64)},
                     part=(i, None))
    with pytest.raises(stoker.StokerError, match="without their count"):
        stoker.merge(path)
    # A part past the count (another write's) is refused, not merged in.
    with pytest.raises(stoker.StokerError, match="part 2 .* beyond the 2 parts"):
        stoker.merge(path, parts=2)
    with pytest.raises(stoker.StokerError, match="part 3 .* missing"):
        stoker.merge(path, parts=4)
    stoker.merge(path, parts=3)
    with stoker.Loader(path, 30, shuffle="sequential") as ld:
        assert np.asarray(next(iter(ld))["x"]).tolist() == list(range(30))
    with pytest.raises(stoker.InvalidArgument):
        stoker.write(tmp_path / "bad", {"x": np.arange(3)}, part=(2, 2))
    with pytest.raises(TypeError):
        stoker.write(tmp_path / "bad", {"x": np.arange(3)}, part=1)


PART_CHILD = r"""
import sys, numpy as np, stoker
path = sys.argv[1]
def recs():
    for i in range(200000):
        yield {"x": np.full(64, i, np.float32)}
stoker.write(path, recs(), part=(1, None), overwrite=True, shard_bytes=1 << 16)
"""


def test_part_rewritten_over_one_killed_mid_write(tmp_path):
    """What a task run again does: part 1 killed while it writes, then
    written again whole; the merge holds each of its records once."""
    path = tmp_path / "ds"
    stoker.write(path, {"x": np.zeros((5, 64), np.float32)}, part=(0, None))
    p = subprocess.Popen([sys.executable, "-c", PART_CHILD, str(path)])
    deadline = time.time() + 30
    while not glob.glob(str(path / "part-00001-*")) and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert glob.glob(str(path / "part-00001-*")), "the child wrote nothing before the kill"
    with pytest.raises(stoker.StokerError):
        stoker.merge(path, parts=2)  # part 1 unfinished
    stoker.write(path, {"x": np.arange(7 * 64, dtype=np.float32).reshape(7, 64)},
                 part=(1, None), overwrite=True)
    stoker.merge(path, parts=2)
    with stoker.Loader(path, 100, shuffle="sequential") as ld:
        x = np.concatenate([np.asarray(b["x"]) for b in ld])
    assert x.shape == (12, 64)
    assert np.array_equal(x[5:], np.arange(7 * 64, dtype=np.float32).reshape(7, 64))


def test_empty_part_with_named_statics_merges(tmp_path):
    """A task with no rows writes an empty part whose schema is the others'
    (a static field named, none of its groups there): it used to crash."""
    t = pa.table({"basin": pa.array([4, 4, 9], pa.int64()), "f1": pa.array([1, 2, 3], pa.float32()),
                  "area": pa.array([1.5, 1.5, 2.0], pa.float32())})
    kw = dict(group_by="basin", fields={"x": ["f1"], "area": ["area"]}, static=["area"])
    assert stoker.write(tmp_path / "ds", t.schema.empty_table(), part=(0, 2), **kw) == 0
    assert stoker.write(tmp_path / "ds", t, part=(1, 2), **kw) == 2
    stoker.merge(tmp_path / "ds")
    with stoker.Loader(tmp_path / "ds", 2, shuffle="sequential") as ld:
        b = next(iter(ld))
    assert np.asarray(b["area"]).tolist() == [1.5, 2.0]
    assert np.asarray(b["basin"]).tolist() == [4, 9]


# ---- outputs in an object store (the local S3 server of test_py_remote) ----


def _s3_frame():
    rng = np.random.default_rng(7)
    frames = [pd.DataFrame({"basin": np.full(30, b, np.int64),
                            "date": rng.permutation(30).astype(np.int32),
                            "f1": rng.standard_normal(30).astype(np.float32)})
              for b in range(40)]
    # Rows shuffled: a basin's rows in every partition, until grouped.
    return pd.concat(frames, ignore_index=True).sample(frac=1.0, random_state=1)


def _s3_records(path, **kw):
    out = {}
    with stoker.Loader(str(path), 1, shuffle="sequential", **kw) as ld:
        for b in ld:
            out[int(np.asarray(b["basin"])[0])] = np.asarray(b["x"]).tobytes()
    return out


def _s3_want(df, tmp_path):
    stoker.write(tmp_path / "want", pa.Table.from_pandas(df, preserve_index=False),
                 group_by="basin", order_by="date", fields={"x": ["f1"]}, static=[])
    return _s3_records(tmp_path / "want")


def test_dask_writes_to_s3(served, aws, dask_client, tmp_path):
    """stoker.dask.write to an s3:// prefix: each task uploads its part
    (shards, then its part manifest), the merge uploads the manifest last;
    the loader reads the dataset from the bucket, equal to a local pack.  A
    prefix holding a dataset is refused; a split group leaves no dataset
    and no parts behind."""
    import dask.dataframe as dd
    import stoker.dask
    df = _s3_frame()
    want = _s3_want(df, tmp_path)
    ddf = dd.from_pandas(df, npartitions=4, sort=False)
    n = stoker.dask.write(ddf, "s3://bucket/engine-dask.stk", group_by="basin",
                          order_by="date", fields={"x": ["f1"]})
    assert n == 40
    with pytest.raises(stoker.StokerError, match="already there"):
        stoker.dask.write(ddf, "s3://bucket/engine-dask.stk", group_by="basin")
    with pytest.raises(stoker.InvalidArgument, match="has rows in part"):
        stoker.dask.write(ddf, "s3://bucket/engine-split.stk", group_by="basin", shuffle=False)
    assert _s3_records("s3://bucket/engine-dask.stk", cache_dir=tmp_path / "c") == want
    objs = os.listdir(served["root"] / "bucket" / "engine-dask.stk")
    assert "manifest.json" in objs
    assert not [o for o in objs if o.startswith("part-") and o.endswith(".json")]
    split = served["root"] / "bucket" / "engine-split.stk"
    assert not split.exists() or not os.listdir(split)


def test_ray_writes_to_s3(served, aws, ray_local, tmp_path):
    import stoker.ray
    df = _s3_frame()
    want = _s3_want(df, tmp_path)
    ds = ray_local.data.from_pandas(df).repartition(3)
    n = stoker.ray.write(ds, "s3://bucket/engine-ray.stk", group_by="basin", order_by="date",
                         fields={"x": ["f1"]})
    assert n == 40
    assert _s3_records("s3://bucket/engine-ray.stk", cache_dir=tmp_path / "c") == want
