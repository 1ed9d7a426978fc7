"""stoker.torch.Dataset inside torch.utils.data.DataLoader: every sample once
per epoch, with and without worker processes."""

import gc
import os
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import stoker
import stoker.torch

pytestmark = [pytest.mark.usefixtures("no_dist_env"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

N = 200  # a multiple of every ranks-times-workers count used here


@pytest.fixture
def rec_ds(tmp_path):
    """Ragged records, each with a unique `uid` field (not its index)."""
    rng = np.random.default_rng(4)
    uids = rng.permutation(10 * N)[:N].astype(np.int64) + 1000
    recs = [{"uid": np.int64(u), "v": np.full(int(rng.integers(1, 6)), u, np.int32)}
            for u in uids]
    path = tmp_path / "recs.stk"
    assert stoker.write(path, recs, ragged=["v"]) == N
    return path, recs, uids


def epoch_uids(loader):
    out = []
    for b in loader:
        assert isinstance(b["uid"], torch.Tensor)
        # The ragged values belong to the record of the same row.
        off = b["v_offsets"].tolist()
        for j, u in enumerate(b["uid"].tolist()):
            assert b["v"][off[j]:off[j + 1]].tolist() == [u] * (off[j + 1] - off[j])
        out += b["uid"].tolist()
        del b
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("shuffle", ["random", "block", "sequential"])
def test_dataloader_gives_every_record_once(rec_ds, num_workers, shuffle):
    path, _, uids = rec_ds
    ds = stoker.torch.Dataset(path, batch_size=16, shuffle=shuffle, block_samples=9)
    dl = DataLoader(ds, batch_size=None, num_workers=num_workers)
    for epoch in range(2):
        ds.set_epoch(epoch)
        got = epoch_uids(dl)
        assert len(got) == N
        assert sorted(got) == sorted(uids.tolist())


def test_dataloader_workers_split_the_samples(rec_ds):
    path, _, uids = rec_ds
    ds = stoker.torch.Dataset(path, batch_size=10, shuffle="random")
    seen = {}
    for b in DataLoader(ds, batch_size=None, num_workers=2):
        for u in b["uid"].tolist():
            seen[u] = seen.get(u, 0) + 1
    assert sorted(seen) == sorted(uids.tolist())
    assert set(seen.values()) == {1}


def test_dataloader_with_ranks_and_workers(rec_ds):
    path, _, uids = rec_ds
    shares = []
    for rank in range(2):
        ds = stoker.torch.Dataset(path, batch_size=8, shuffle="random", rank=rank,
                                  world_size=2)
        shares.append(epoch_uids(DataLoader(ds, batch_size=None, num_workers=2)))
    assert len(shares[0]) == len(shares[1]) == N // 2
    assert set(shares[0]).isdisjoint(shares[1])
    assert sorted(shares[0] + shares[1]) == sorted(uids.tolist())


def test_one_worker_after_the_parent_opened_the_loader(rec_ds):
    # len() opens the loader in the parent; a single worker has the same
    # share, and must still open its own (the parent's has no threads there).
    path, _, uids = rec_ds
    ds = stoker.torch.Dataset(path, batch_size=16, shuffle="random")
    assert len(ds) == -(-N // 16)
    got = epoch_uids(DataLoader(ds, batch_size=None, num_workers=1))
    assert sorted(got) == sorted(uids.tolist())
    # And the parent's loader still works.
    assert sorted(epoch_uids(ds)) == sorted(uids.tolist())


@pytest.mark.parametrize("context", ["forkserver"])
def test_workers_started_without_fork(rec_ds, context):
    # (spawn pickles the dataset the same way; forkserver is the quicker.)
    path, _, uids = rec_ds
    ds = stoker.torch.Dataset(path, batch_size=25, shuffle="random")
    len(ds)  # an open loader in the parent must not stop pickling
    dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=context)
    got = epoch_uids(dl)
    assert sorted(got) == sorted(uids.tolist())


def test_dataset_in_process(rec_ds):
    path, _, uids = rec_ds
    ds = stoker.torch.Dataset(path, batch_size=16, shuffle="random", seed=1)
    e0 = epoch_uids(ds)
    e1 = epoch_uids(ds)  # iterating again runs the next epoch
    assert sorted(e0) == sorted(e1) == sorted(uids.tolist())
    assert e0 != e1
    ds.set_epoch(0)
    assert epoch_uids(ds) == e0
    assert len(ds) == -(-N // 16)


def test_dataset_rejects_output(rec_ds):
    path, _, _ = rec_ds
    with pytest.raises(TypeError, match="output"):
        stoker.torch.Dataset(path, batch_size=4, output="numpy")


def test_windows_through_the_dataloader(tmp_path):
    lengths = [30, 7, 19, 40, 12, 25, 3, 5, 33]
    rng = np.random.default_rng(0)
    recs = [{"x": rng.standard_normal((n, 2)).astype(np.float32),
             "row": np.arange(n, dtype=np.int64) + 1000 * i} for i, n in enumerate(lengths)]
    path = tmp_path / "w.stk"
    stoker.write(path, recs)
    want = {}
    for i, n in enumerate(lengths):
        for t in range(0, n - 5 + 1, 2):
            want[1000 * i + t] = recs[i]["x"][t:t + 5]
    n_windows = len(want)
    assert n_windows == 72  # two workers' shares drop nothing
    ds = stoker.torch.Dataset(path, batch_size=9, window=5, stride=2, shuffle="random")
    got = {}
    for b in DataLoader(ds, batch_size=None, num_workers=2):
        assert b["x"].shape[1:] == (5, 2)
        for j, start in enumerate(b["row"][:, 0].tolist()):
            assert start not in got
            got[start] = b["x"][j].numpy().copy()
            np.testing.assert_array_equal(b["row"][j].numpy(), np.arange(start, start + 5))
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


# ---- workers: len() and epochs (real DataLoader configurations) ---------------------------

def batches_of(dl):
    return [tuple(b["uid"].tolist()) for b in dl]


@pytest.mark.parametrize("batch, workers", [(48, 2), (30, 3), (16, 2), (7, 4), (200, 2), (64, 3)])
def test_len_of_the_dataloader_is_what_it_yields(rec_ds, batch, workers):
    path, _, uids = rec_ds
    ds = stoker.torch.Dataset(path, batch_size=batch, shuffle="random", seed=3)
    dl = DataLoader(ds, batch_size=None, num_workers=workers)
    with warnings.catch_warnings():
        # torch warns when len() was wrong
        warnings.filterwarnings("error", message=".*[Ll]ength of IterableDataset.*")
        got = batches_of(dl)
    assert len(dl) == len(got) == -(-N // batch)
    # Whole batches dealt to the workers in turn: the same batches, in the
    # same order, as without workers.
    assert got == batches_of(DataLoader(ds, batch_size=None, num_workers=0))
    assert sorted(u for b in got for u in b) == sorted(uids.tolist())


def test_len_with_drop_last_and_ranks(rec_ds):
    path, _, _ = rec_ds
    for rank in range(3):
        ds = stoker.torch.Dataset(path, batch_size=9, shuffle="block", rank=rank, world_size=3,
                                  drop_last=True)
        dl = DataLoader(ds, batch_size=None, num_workers=2)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*[Ll]ength of IterableDataset.*")
            got = batches_of(dl)
        assert len(dl) == len(got) == (N // 3) // 9
        assert all(len(b) == 9 for b in got)


def threads_now():
    """Threads of this process (other tests' helper threads may end while
    a check runs, never start: hence <=)."""
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
@pytest.mark.parametrize("kwargs", [
    dict(shuffle="random"),
    dict(shuffle="block", rank=1, world_size=3, drop_last=True),
    dict(shuffle="sequential", rank=2, world_size=3, pad=True),
    dict(shuffle="random", fields=["v"], window=2, stride=1),
])
def test_len_starts_no_threads_and_is_what_an_epoch_yields(rec_ds, kwargs):
    # The DataLoader calls len() in the parent process, which then forks
    # its workers: a loader's threads there would be waste, or worse.
    path, _, _ = rec_ds
    gc.collect()
    before = threads_now()
    ds = stoker.torch.Dataset(path, batch_size=7, **kwargs)
    n = len(ds)
    assert threads_now() <= before
    # The check can see a loader's threads.
    with stoker.Loader(path, batch_size=7, threads=2):
        assert threads_now() >= before + 2
    assert n > 0
    assert n == sum(1 for _ in ds)
    for workers in (0, 2):
        dl = DataLoader(ds, batch_size=None, num_workers=workers)
        assert len(dl) == n == sum(1 for _ in dl)


@pytest.mark.parametrize("persistent, workers", [(False, 0), (False, 2), (True, 2), (True, 1)])
def test_epochs_follow_set_epoch_in_every_worker_setting(rec_ds, persistent, workers):
    path, _, uids = rec_ds
    ref = stoker.torch.Dataset(path, batch_size=16, shuffle="random", seed=5)
    want = {}
    for e in range(4):
        ref.set_epoch(e)
        want[e] = batches_of(DataLoader(ref, batch_size=None, num_workers=0))
    assert want[0] != want[1]
    ds = stoker.torch.Dataset(path, batch_size=16, shuffle="random", seed=5)
    kw = dict(num_workers=workers, persistent_workers=persistent) if workers else {}
    dl = DataLoader(ds, batch_size=None, **kw)
    for e in (2, 0, 3, 3):
        ds.set_epoch(e)
        assert batches_of(dl) == want[e], f"set_epoch({e})"
    # Without set_epoch, each pass runs the next epoch.
    ds.set_epoch(0)
    assert batches_of(dl) == want[0]
    assert batches_of(dl) == want[1]
    assert batches_of(dl) == want[2]
