"""stoker.torch's transforms (per sample, re-batched; per batch), the
stoker.torch.DataLoader helper, and the warning a collating DataLoader
gets: every transformed batch equals the transform applied by hand to
the batch read without it, with and without workers, and after a resume."""

import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import stoker
import stoker.torch

pytestmark = pytest.mark.usefixtures("no_dist_env")

N = 120
COLLATED = "batch_size=None"


@pytest.fixture
def path(tmp_path):
    """Records with a unique `uid`, a float row `x` and a ragged `v`."""
    rng = np.random.default_rng(7)
    uids = rng.permutation(10 * N)[:N].astype(np.int64) + 1000
    recs = [{"uid": np.int64(u), "x": rng.standard_normal(3).astype(np.float32),
             "v": np.arange(int(rng.integers(1, 5)), dtype=np.int32) + int(u)} for u in uids]
    p = tmp_path / "t.stk"
    assert stoker.write(p, recs, ragged=["v"]) == N
    return p


def per_sample(s):
    """A transform that changes values, shapes, a ragged field's lengths,
    and returns a number and a string."""
    return {"uid": s["uid"], "x": s["x"] * 2 + s["uid"].double(),
            "v": torch.cat([s["v"], s["v"]]) - 1, "n": int(s["v"].numel()),
            "tag": f"u{int(s['uid'])}"}


def per_batch(b):
    return (b["x"] * 3, b["uid"] + 1)


def by_hand(batch):
    """per_sample applied to each sample of an untransformed batch."""
    off = batch["v_offsets"].tolist()
    return [per_sample({"uid": batch["uid"][i], "x": batch["x"][i],
                        "v": batch["v"][off[i]:off[i + 1]]})
            for i in range(len(batch["uid"]))]


def rows(batch):
    """A transformed batch cut into samples, copied out."""
    off = batch["v_offsets"].tolist()
    return [{"uid": int(batch["uid"][i]), "x": batch["x"][i].tolist(),
             "v": batch["v"][off[i]:off[i + 1]].tolist(), "n": int(batch["n"][i]),
             "tag": batch["tag"][i]} for i in range(len(batch["uid"]))]


def plain(path, **kw):
    ds = stoker.torch.Dataset(path, 16, shuffle="random", seed=3, **kw)
    return [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
            for b in DataLoader(ds, batch_size=None)]


def want_rows(batches):
    return [[{"uid": int(s["uid"]), "x": s["x"].tolist(), "v": s["v"].tolist(), "n": s["n"],
              "tag": s["tag"]} for s in by_hand(b)] for b in batches]


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_per_sample_transform_is_applied_to_every_sample(path, workers):
    ref = plain(path)
    ds = stoker.torch.Dataset(path, 16, shuffle="random", seed=3, transform=per_sample)
    got = list(DataLoader(ds, batch_size=None, num_workers=workers))
    assert len(got) == len(ref) == -(-N // 16)
    b = got[0]
    assert sorted(b) == ["n", "tag", "uid", "v", "v_offsets", "x"]
    assert b["x"].dtype == torch.float32 and b["x"].shape == (16, 3)
    assert b["n"].dtype == torch.int64 and isinstance(b["tag"], list)
    assert [rows(b) for b in got] == want_rows(ref)
    # The ragged field doubled in length, its offsets with it.
    assert got[0]["v_offsets"][-1] == 2 * ref[0]["v_offsets"][-1]


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_transform_runs_after_the_per_sample_one(path, workers):
    ref = plain(path)
    ds = stoker.torch.Dataset(path, 16, shuffle="random", seed=3, batch_transform=per_batch)
    got = list(DataLoader(ds, batch_size=None, num_workers=workers))
    assert len(got) == len(ref)
    for (x, uid), b in zip(got, ref):
        assert torch.equal(x, b["x"] * 3) and torch.equal(uid, b["uid"] + 1)
    both = stoker.torch.Dataset(path, 16, shuffle="random", seed=3, transform=per_sample,
                                batch_transform=lambda b: b["x"].sum(dim=1))
    for s, b in zip(DataLoader(both, batch_size=None, num_workers=0), ref):
        assert torch.equal(s, torch.stack([r["x"] for r in by_hand(b)]).sum(dim=1))


def scale(s):
    return {"uid": s["uid"], "x": s["x"] * 10}


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_transforms_reach_workers_of_every_start_method(path, context):
    ref = plain(path)
    ds = stoker.torch.Dataset(path, 16, shuffle="random", seed=3, transform=scale,
                              batch_transform=per_batch)
    dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=context)
    got = list(dl)
    assert len(got) == len(ref)
    for (x, uid), b in zip(got, ref):
        assert torch.equal(x, b["x"] * 10 * 3) and torch.equal(uid, b["uid"] + 1)


def test_a_transform_spawn_cannot_pickle_is_named(path):
    ds = stoker.torch.Dataset(path, 16, transform=lambda s: s)
    dl = DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="spawn")
    with pytest.raises(TypeError, match="transform=.*cannot be pickled.*module's top level"):
        next(iter(dl))


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_with_transforms(path, workers):
    pytest.importorskip("torchdata")

    def make():
        return stoker.torch.DataLoader(path, 16, shuffle="random", seed=3, stateful=True,
                                       num_workers=workers, transform=per_sample)

    full = [rows(b) for b in make()]
    assert full == want_rows(plain(path))
    dl = make()
    it = iter(dl)
    head = [rows(next(it)) for _ in range(3)]
    state = dl.state_dict()
    del it, dl
    fresh = make()
    fresh.load_state_dict(state)
    assert head == full[:3]
    assert [rows(b) for b in fresh] == full[3:]


def test_samples_transform(path):
    ref = plain(path)
    ds = stoker.torch.Samples(path, read_batch=16, shuffle="random", seed=3,
                              transform=lambda s: {"uid": s["uid"], "x": s["x"] - 1})
    got = list(DataLoader(ds, batch_size=8))
    assert torch.equal(torch.cat([b["uid"] for b in got]), torch.cat([b["uid"] for b in ref]))
    assert torch.equal(torch.cat([b["x"] for b in got]), torch.cat([b["x"] for b in ref]) - 1)
    with pytest.raises(TypeError, match="collate_fn"):
        stoker.torch.Samples(path, batch_transform=per_batch)


def test_transform_errors_name_what_is_wrong(path):
    ds = stoker.torch.Dataset(path, 16, transform=lambda s: s["x"])
    with pytest.raises(TypeError, match="dict of the sample's fields, not Tensor"):
        next(iter(ds))
    ds = stoker.torch.Dataset(path, 16, transform=lambda s: {"x": s["x"][:int(s["uid"]) % 3]})
    with pytest.raises(stoker.InvalidArgument, match="'x' of shapes .*pad or crop"):
        next(iter(ds))
    with pytest.raises(TypeError, match="transform must be callable"):
        stoker.torch.Dataset(path, 16, transform="x")


# ---- the collating DataLoader: warned once, and only then ------------------------------

def collate_warnings(make, passes=2):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        shapes = [tuple(b["x"].shape) for _ in range(passes) for b in make()]
    return shapes, [str(r.message) for r in rec if COLLATED in str(r.message)]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_collating_dataloader_is_warned_once(path, workers):
    ds = stoker.torch.Dataset(path, 16, shuffle="random")
    dl = DataLoader(ds, num_workers=workers)              # batch_size=1, the default
    shapes, got = collate_warnings(lambda: dl)
    assert shapes[0] == (1, 16, 3)                        # the trap itself
    assert len(got) == 1
    assert "stoker.torch.DataLoader" in got[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stateful_collating_dataloader_is_warned(path, workers):
    sdl = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader
    ds = stoker.torch.Dataset(path, 16, shuffle="random", transform=scale)
    shapes, got = collate_warnings(lambda: sdl(ds, num_workers=workers), passes=1)
    assert shapes[0] == (1, 16, 3) and len(got) == 1


@pytest.mark.parametrize("workers", [0, 2])
def test_no_warning_without_collation(path, workers):
    ds = stoker.torch.Dataset(path, 16, shuffle="random")
    shapes, got = collate_warnings(lambda: DataLoader(ds, batch_size=None, num_workers=workers))
    assert got == [] and shapes[0] == (16, 3)
    shapes, got = collate_warnings(
        lambda: stoker.torch.DataLoader(path, 16, num_workers=workers))
    assert got == [] and shapes[0] == (16, 3)
    samples = stoker.torch.Samples(path, fields=["x"])
    shapes, got = collate_warnings(lambda: DataLoader(samples, batch_size=4,
                                                      num_workers=workers))
    assert got == [] and shapes[0] == (4, 3)
    shapes, got = collate_warnings(lambda: stoker.torch.Dataset(path, 16))
    assert got == [] and shapes[0] == (16, 3)


# ---- stoker.torch.DataLoader ----------------------------------------------------------------

@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_helper_gives_the_datasets_batches(path, workers):
    dl = stoker.torch.DataLoader(path, 16, shuffle="random", seed=3, num_workers=workers,
                                 stateful=False)
    assert type(dl) is torch.utils.data.DataLoader
    assert dl.batch_size is None and dl.persistent_workers == (workers > 0)
    ref = plain(path)
    for epoch in range(2):
        dl.dataset.set_epoch(epoch)
        got = [(b["uid"].tolist(), b["x"].tolist(), b["v"].tolist()) for b in dl]
        if epoch == 0:
            assert got == [(b["uid"].tolist(), b["x"].tolist(), b["v"].tolist()) for b in ref]
        assert len(got) == len(dl) == -(-N // 16)
        assert sorted(u for g in got for u in g[0]) == sorted(int(u) for b in ref
                                                              for u in b["uid"])


def test_dataloader_helper_refuses_what_cannot_work(path):
    with pytest.raises(stoker.InvalidArgument, match="num_workers=0"):
        stoker.torch.DataLoader(path, 16, device="cuda", num_workers=2)
    with pytest.raises(stoker.InvalidArgument, match="persistent_workers"):
        stoker.torch.DataLoader(path, 16, persistent_workers=True)


def test_a_dataset_with_a_lambda_transform_deep_copies(path):
    import copy
    ds = copy.deepcopy(stoker.torch.Dataset(path, 16, transform=lambda s: {"x": s["x"] + 1}))
    assert next(iter(ds))["x"].shape == (16, 3)
