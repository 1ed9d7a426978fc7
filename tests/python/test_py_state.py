"""Resuming: a run interrupted after k batches and restored from its state
continues with exactly the batches an uninterrupted run would have given,
through torchdata's StatefulDataLoader (in-process and with workers) and
through stoker.Loader's own state_dict(); and a state restored into a
different world size deals the rest of the epoch to the new ranks."""

import warnings

import numpy as np
import pytest
import torch

import stoker
import stoker.torch
from stkpy import ORDERS, drain

StatefulDataLoader = pytest.importorskip(
    "torchdata.stateful_dataloader").StatefulDataLoader

pytestmark = [pytest.mark.usefixtures("no_dist_env"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

N = 240


@pytest.fixture
def ds_path(tmp_path):
    rng = np.random.default_rng(0)
    src = {"id": np.arange(N, dtype=np.int64),
           "x": rng.standard_normal((N, 4)).astype(np.float32)}
    path = tmp_path / "st.stk"
    stoker.write(path, src)
    return path, src


def batches_of(iterable, limit=None):
    """[(ids tuple, x sum)] of the batches, copied out (nothing pinned)."""
    out = []
    for b in iterable:
        out.append((tuple(b["id"].tolist()), float(b["x"].double().sum())))
        del b
        if limit is not None and len(out) == limit:
            break
    return out


def make_sdl(path, num_workers, epoch=None, **kw):
    ds = stoker.torch.Dataset(path, batch_size=8, shuffle="random", seed=5, **kw)
    if epoch is not None:
        ds.set_epoch(epoch)
    return StatefulDataLoader(ds, batch_size=None, num_workers=num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("k", [1, 7, 29])
def test_stateful_dataloader_resumes_exactly(ds_path, num_workers, k):
    path, src = ds_path
    full = batches_of(make_sdl(path, num_workers))
    # Every sample once (N is a multiple of the workers' count).
    ids = [i for b in full for i in b[0]]
    assert sorted(ids) == list(range(N))
    assert len(full) == 30

    dl = make_sdl(path, num_workers)
    it = iter(dl)
    head = batches_of(it, limit=k)
    state = dl.state_dict()
    del it, dl

    fresh = make_sdl(path, num_workers)
    fresh.load_state_dict(state)
    rest = batches_of(fresh)
    assert head == full[:k]
    assert rest == full[k:]
    # The sums agree with the source.
    for idx, s in rest:
        assert s == pytest.approx(float(src["x"][list(idx)].astype(np.float64).sum()))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_resumes_in_a_later_epoch(ds_path, num_workers):
    path, _ = ds_path
    e0 = batches_of(make_sdl(path, num_workers, epoch=0))
    e1 = batches_of(make_sdl(path, num_workers, epoch=1))
    assert e0 != e1
    assert sorted(i for b in e1 for i in b[0]) == list(range(N))

    dl = make_sdl(path, num_workers, epoch=1)
    it = iter(dl)
    head = batches_of(it, limit=4)
    state = dl.state_dict()
    del it, dl
    fresh = make_sdl(path, num_workers)  # epoch 0 unless the state says otherwise
    fresh.load_state_dict(state)
    assert head + batches_of(fresh) == e1


def test_stateful_dataloader_state_before_iterating(ds_path):
    path, _ = ds_path
    full = batches_of(make_sdl(path, 0))
    dl = make_sdl(path, 0)
    state = dl.state_dict()
    fresh = make_sdl(path, 0)
    fresh.load_state_dict(state)
    assert batches_of(fresh) == full


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("k", [0, 3, 14, 15])
def test_loader_state_dict_mid_epoch(ds_path, order, k):
    path, _ = ds_path
    opts = dict(batch_size=16, shuffle=order, seed=9, block_samples=10, block_group=3)
    with stoker.Loader(path, **opts) as ld:
        full = drain(ld)
    assert len(full) == 15
    with stoker.Loader(path, **opts) as ld:
        head = drain(ld, limit=k)
        state = ld.state_dict()
    assert state["position"] == 16 * k and state["epoch"] == 0
    with stoker.Loader(path, **opts) as ld:
        ld.load_state_dict(state)
        rest = drain(ld)
    got = head + rest
    assert [i.tolist() for i, _ in got] == [i.tolist() for i, _ in full]
    for (_, a), (_, b) in zip(got, full):
        np.testing.assert_array_equal(a["x"], b["x"])


@pytest.mark.parametrize("order", ORDERS)
def test_loader_state_dict_after_the_epoch_ended(ds_path, order):
    path, _ = ds_path
    opts = dict(batch_size=16, shuffle=order, seed=9, block_samples=10)
    with stoker.Loader(path, **opts) as ld:
        drain(ld)  # to the end: next() gave None
        state = ld.state_dict()
    # The state resumes at the start of the next epoch.
    assert state["epoch"] == 1 and state["position"] == 0
    with stoker.Loader(path, **opts) as ld:
        ld.load_state_dict(state)
        rest = drain(ld)
    with stoker.Loader(path, epoch=1, **opts) as ld:
        e1 = drain(ld)
    assert len(rest) == 15
    assert [i.tolist() for i, _ in rest] == [i.tolist() for i, _ in e1]


def test_loader_state_dict_rejects_other_options(ds_path):
    path, _ = ds_path
    with stoker.Loader(path, batch_size=16, shuffle="random") as ld:
        ld.next()
        state = ld.state_dict()
    for other in (dict(shuffle="sequential"), dict(shuffle="block"), dict(fields=["x"])):
        with stoker.Loader(path, **dict(dict(batch_size=16, shuffle="random"), **other)) as ld:
            with pytest.raises(ValueError, match="fingerprint"):
                ld.load_state_dict(state)
    with stoker.Loader(path, batch_size=16, shuffle="random") as ld:
        with pytest.raises(ValueError, match="position"):
            ld.load_state_dict(dict(state, position=N + 1))
    with stoker.Loader(path, batch_size=16, shuffle="random") as ld:
        with pytest.raises(ValueError, match="missing"):
            ld.load_state_dict({"epoch": 0})
        with pytest.raises(TypeError):
            ld.load_state_dict([1, 2])


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("new_world", [1, 2, 4, 5])
def test_restore_into_another_world_size(ds_path, order, new_world):
    path, _ = ds_path
    opts = dict(batch_size=8, shuffle=order, seed=2, block_samples=12)
    # The order two ranks read by default: two streams, one per rank.
    with stoker.Loader(path, rank=0, world_size=1, streams=2, **opts) as ld:
        full = np.concatenate([i for i, _ in drain(ld)])
    # Two ranks take 5 batches each: 80 samples of the global order.
    state = None
    taken = []
    for r in range(2):
        with stoker.Loader(path, rank=r, world_size=2, **opts) as ld:
            taken += [i for i, _ in drain(ld, limit=5)]
            st = ld.state_dict()
        assert state is None or st == state  # every rank has the same state
        state = st
    assert state["position"] == 80 and state["streams"] == 2
    taken = np.concatenate(taken)
    assert sorted(taken.tolist()) == sorted(full[:80].tolist())

    rest = []
    for r in range(new_world):
        with stoker.Loader(path, rank=r, world_size=new_world, **opts) as ld:
            ld.load_state_dict(state)
            mine = [i for i, _ in drain(ld)]
            rest.append(np.concatenate(mine) if mine else np.zeros(0, np.uint64))
    # 160 samples remain; every new world size here divides it.
    assert len({len(x) for x in rest}) == 1
    union = np.concatenate(rest)
    assert len(union) == 160
    assert sorted(union.tolist()) == sorted(full[80:].tolist())
    assert set(union.tolist()).isdisjoint(taken.tolist())
    # Dealt as ever: new rank r takes the positions 80 + r, 80 + r + W, ...
    for r in range(new_world):
        assert rest[r].tolist() == full[80 + r::new_world].tolist()


def test_torch_dataset_state_without_dataloader(ds_path):
    path, _ = ds_path
    ds = stoker.torch.Dataset(path, batch_size=8, shuffle="random", seed=1)
    full = batches_of(ds)
    ds2 = stoker.torch.Dataset(path, batch_size=8, shuffle="random", seed=1)
    head = batches_of(ds2, limit=6)
    state = ds2.state_dict()
    ds3 = stoker.torch.Dataset(path, batch_size=8, shuffle="random", seed=1)
    ds3.load_state_dict(state)
    assert head + batches_of(ds3) == full
    assert isinstance(next(iter(ds3))["x"], torch.Tensor)


def test_loaded_state_is_reported_before_the_first_batch(ds_path):
    # len() opens the dataset's loader in this process; a state loaded after
    # that is applied at the first batch, and state_dict() must give it back
    # meanwhile (a checkpoint taken right after resuming keeps the position).
    path, _ = ds_path
    dl = make_sdl(path, 0)
    it = iter(dl)
    batches_of(it, limit=5)
    state = dl.state_dict()
    expected = batches_of(it)

    again = make_sdl(path, 0)
    assert len(again.dataset) == 30
    again.load_state_dict(state)
    assert again.state_dict()["dataset_state"]["position"] == 40
    later = make_sdl(path, 0)
    later.load_state_dict(again.state_dict())
    assert batches_of(later) == expected

    ds = stoker.torch.Dataset(path, batch_size=8, shuffle="random", seed=5)
    len(ds)
    ds.load_state_dict(state["dataset_state"])
    assert ds.state_dict()["position"] == 40
    assert batches_of(ds) == expected
