"""stoker.Loader's life cycle: the with statement, stats(), len(), epochs."""

import numpy as np
import pytest

import stoker
from stkpy import ORDERS

pytestmark = pytest.mark.usefixtures("no_dist_env")

STAGES = ("plan", "io", "assemble", "wait")


def epoch_ids(ld):
    return np.concatenate([b["id"].copy() for b in ld]).tolist()


def test_with_statement_closes(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=8) as ld:
        assert not ld.closed
        assert ld.next() is not None
    assert ld.closed
    with pytest.raises(ValueError, match="closed"):
        ld.next()
    # Also when the body raises; the exception goes through.
    with pytest.raises(KeyError):
        with stoker.Loader(path, batch_size=8) as ld2:
            raise KeyError("body")
    assert ld2.closed


def test_stats(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=8, shuffle="random", prefetch=3, threads=2) as ld:
        taken = 0
        samples = 0
        for b in ld:
            taken += 1
            samples += len(b["id"])
            if taken == 11:
                break
        s = ld.stats()
        for stage in STAGES:
            assert set(s[stage]) == {"count", "bytes", "seconds"}
            assert s[stage]["seconds"] >= 0
            assert s[stage]["count"] >= 0 and s[stage]["bytes"] >= 0
        assert s["batches"] == taken == 11
        assert s["samples"] == samples == 88
        assert s["wait"]["count"] == 11
        assert s["assemble"]["count"] >= 11
        assert s["io"]["bytes"] >= 88 * (8 + 15 * 4)
        assert s["elapsed"] > 0
        assert s["ring_slots"] == 3
        assert s["threads"] == 2
        assert s["backend"] == ld.backend
        assert s["backend"] in ("io_uring", "pool", "mmap")
        assert s["ready_mean"] >= 0
        ld.reset_stats()
        s = ld.stats()
        assert s["batches"] == 0 and s["samples"] == 0 and s["wait"]["count"] == 0
        ld.next()
        assert ld.stats()["batches"] == 1


@pytest.mark.parametrize("batch_size,drop_last", [(8, False), (7, False), (7, True), (240, False),
                                                  (500, False), (500, True)])
def test_len_is_the_batches_per_epoch(ids_ds, batch_size, drop_last):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=batch_size, drop_last=drop_last,
                       shuffle="random") as ld:
        n = sum(1 for _ in ld)
        assert len(ld) == n
        assert n == (240 // batch_size if drop_last else -(-240 // batch_size))
        counts = ld.counts()
        assert counts["rank_batches"] == n
        assert counts["epoch_samples"] == counts["rank_samples"] == 240


def test_len_per_rank(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=7, rank=1, world_size=3) as ld:
        assert len(ld) == -(-80 // 7)
        assert sum(1 for _ in ld) == len(ld)


@pytest.mark.parametrize("order", ["random", "block"])
def test_iterating_twice_runs_two_epochs(ids_ds, order):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=16, shuffle=order, seed=4, block_samples=5) as ld:
        assert ld.epoch == 0
        e0 = epoch_ids(ld)
        e1 = epoch_ids(ld)
        assert ld.epoch == 1
        e2 = epoch_ids(ld)
        assert ld.epoch == 2
    for e in (e0, e1, e2):
        assert sorted(e) == list(range(240))
    assert e0 != e1 and e1 != e2 and e0 != e2
    # The same epochs again, chosen explicitly, in any order.
    with stoker.Loader(path, batch_size=16, shuffle=order, seed=4, block_samples=5) as ld:
        ld.set_epoch(2)
        assert epoch_ids(ld) == e2
        ld.set_epoch(0)
        assert epoch_ids(ld) == e0
        ld.set_epoch(0)
        assert epoch_ids(ld) == e0
        ld.set_epoch(1)
        assert epoch_ids(ld) == e1
    # epoch= at open is the same as set_epoch.
    with stoker.Loader(path, batch_size=16, shuffle=order, seed=4, block_samples=5,
                       epoch=1) as ld:
        assert ld.epoch == 1
        assert epoch_ids(ld) == e1
    # Another seed, another order.
    with stoker.Loader(path, batch_size=16, shuffle=order, seed=5, block_samples=5) as ld:
        assert epoch_ids(ld) != e0


def test_set_epoch_mid_epoch_restarts(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=16, shuffle="random", seed=1) as ld:
        e0 = epoch_ids(ld)
        ld.set_epoch(0)
        it = iter(ld)
        for _ in range(5):
            next(it)
        ld.set_epoch(0)
        assert epoch_ids(ld) == e0


def test_a_broken_off_loop_continues_the_epoch(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=16, shuffle="random", seed=1) as ld:
        e0 = epoch_ids(ld)
        ld.set_epoch(0)
        head = []
        for b in ld:
            head += b["id"].tolist()
            if len(head) == 64:
                break
        assert head + epoch_ids(ld) == e0


@pytest.mark.parametrize("order", ORDERS)
def test_same_bytes_whatever_the_threads_and_backend(ids_ds, order):
    path, _ = ids_ds
    runs = []
    for backend, threads in (("pool", 1), ("pool", 2), ("mmap", 2), ("uring", 1)):
        with stoker.Loader(path, batch_size=9, shuffle=order, seed=8, backend=backend,
                           threads=threads, block_samples=11) as ld:
            runs.append([(ld.sample_ids().tolist(), b["x"].tobytes())
                         for b in ld])
    assert all(r == runs[0] for r in runs[1:])


def test_sample_ids_and_fields(ids_ds):
    path, src = ids_ds
    with stoker.Loader(path, batch_size=10, shuffle="random") as ld:
        assert ld.sample_ids() is None
        assert ld.fields == ("id", "x")
        assert ld.batch_size == 10
        b = ld.next()
        ids = ld.sample_ids()
        assert ids.dtype == np.uint64 and ids.shape == (10,)
        np.testing.assert_array_equal(b["id"], ids.astype(np.int64))
        np.testing.assert_array_equal(b["x"], src["x"][ids])


def test_version():
    assert isinstance(stoker.version, str) and stoker.version
    assert stoker.__version__ == stoker.version


def _threads():
    """Threads of this process (other tests' helper threads may end while
    this runs, never start: hence <= in the checks)."""
    import os
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/task"), reason="needs /proc")
def test_threads_end_with_the_loader(ids_ds):
    import gc
    path, src = ids_ds
    gc.collect()
    base = _threads()
    for _ in range(5):
        with stoker.Loader(path, batch_size=8, threads=3) as ld:
            assert _threads() > base
            ld.next()
    assert _threads() <= base
    # Dropped without close(): the loader's threads end with it.
    ld = stoker.Loader(path, batch_size=8, threads=3)
    ld.next()
    del ld
    gc.collect()
    assert _threads() <= base
    # Closed while a batch is held: the threads end with the last batch.
    ld = stoker.Loader(path, batch_size=8, threads=3, shuffle="sequential")
    b = ld.next()
    ld.close()
    del ld
    gc.collect()
    np.testing.assert_array_equal(b["x"], src["x"][:8])
    del b
    gc.collect()
    assert _threads() <= base


def _evict(path):
    import glob
    import os
    for f in glob.glob(os.path.join(path, "*.stk")):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@pytest.mark.parametrize("order", ORDERS)
def test_warm_up_changes_nothing_but_the_reads(tmp_path, order):
    # Large enough records that opening the dataset (its headers and
    # indexes) leaves its data out of the page cache.
    n = 300
    src = {"id": np.arange(n, dtype=np.int64),
           "x": np.random.default_rng(3).integers(0, 255, size=(n, 20000), dtype=np.uint8)}
    path = str(tmp_path / "big.stk")
    stoker.write(path, src, shard_bytes=1 << 20)
    runs = []
    for warm_up in (False, True, "auto"):
        _evict(path)
        with stoker.Loader(path, batch_size=16, shuffle=order, seed=4, warm_up=warm_up,
                           backend="mmap") as ld:
            runs.append([(b["id"].tolist(), b["x"].tobytes()) for b in ld])
            s = ld.stats()
            assert set(s["warm_up"]) == {"count", "bytes", "seconds"}
            if warm_up is False:
                assert s["warm_up_bytes"] == 0 and s["warm_up_done"]
            else:
                assert s["warm_up_bytes"] >= n * 20000
                assert 0 <= s["warm_up"]["bytes"] <= s["warm_up_bytes"]
    assert runs[1] == runs[0] and runs[2] == runs[0]
    ids = sorted(i for batch in runs[0] for i in batch[0])
    assert ids == list(range(n))
    # The rows delivered are the rows written.
    for b_ids, b_x in runs[1]:
        assert b_x == src["x"][b_ids].tobytes()


@pytest.mark.parametrize("bad", ["yes", 1, None, "ON"])
def test_warm_up_refuses_other_values(ids_ds, bad):
    path, _ = ids_ds
    with pytest.raises(ValueError, match="warm_up"):
        stoker.Loader(path, batch_size=8, warm_up=bad)


def test_options_after_path_and_batch_size_are_keyword_only(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, 8) as ld:
        assert ld.batch_size == 8
    with pytest.raises(TypeError):
        stoker.Loader(path, 8, ["x"])
    with pytest.raises(TypeError):
        stoker.write(path.parent / "w", {"a": np.arange(3)}, True)
    with pytest.raises(TypeError):
        stoker.index([str(path)], path.parent / "i.idx", "npy")


def test_repr_says_what_the_loader_is(ids_ds):
    path, _ = ids_ds
    ld = stoker.Loader(path, batch_size=16, shuffle="random", rank=1, world_size=2)
    r = repr(ld)
    for part in (repr(str(path)), "batch_size=16", "shuffle='random'", "rank=1",
                 "world_size=2", f"len={len(ld)}"):
        assert part in r, (part, r)
    assert "closed" not in r
    ld.close()
    assert "closed" in repr(ld) and "len=" not in repr(ld)


def test_repr_of_the_arrays_the_extension_gives(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=8, output="dlpack") as ld:
        b = ld.next()
        assert repr(b["x"]) == "<stoker.Array f32 (8, 5, 3) cpu>"
        assert repr(b["id"]) == "<stoker.Array i64 (8,) cpu>"


def test_type_information_is_installed():
    from pathlib import Path
    here = Path(stoker.__file__).parent
    assert (here / "py.typed").is_file()
    assert (here / "_stoker.pyi").is_file()


def test_defaults_and_value_names_come_from_the_library():
    """One source for every default and every option-value name: the C
    library's (stk_loader_options_init, names.c); the Loader's signature
    shows the same values, and every name the library knows is accepted."""
    import inspect
    from stoker import _stoker
    d = _stoker.loader_defaults()
    sig = inspect.signature(stoker.Loader)
    for name, value in d.items():
        p = sig.parameters.get(name)
        if p is not None and p.default is not inspect.Parameter.empty:
            assert p.default == value, name
    assert d["shuffle"] in _stoker.option_names("shuffle")
    for option in ("shuffle", "backend", "valid", "warm_up", "on_error"):
        names = _stoker.option_names(option)
        assert names and all(_stoker.option_value(option, n) == v for n, v in names.items())
    assert _stoker.option_value("shuffle", "Block") == -1


def test_compress_takes_levels_and_false_literally(tmp_path):
    """compress={"x": 1} is zstd level 1 (not the default level), and
    {"x": False} stores the field uncompressed."""
    import json
    x = np.arange(4000, dtype=np.float32).reshape(100, 40)
    for value, codec, level in ((1, "zstd", 1), (False, "none", 0), (True, "zstd", 0),
                                ("zstd", "zstd", 0), (7, "zstd", 7)):
        d = tmp_path / f"d{value}"
        stoker.write(d, {"x": x}, compress={"x": value})
        f = json.loads((d / "manifest.json").read_text())["fields"][0]
        assert f["codec"] == codec, value
        if codec == "zstd" and value is not True and value != "zstd":
            assert f["codec_level"] == level, (value, f)
        got = np.concatenate([b["x"] for b in stoker.Loader(d, 10, shuffle="sequential")])
        assert np.array_equal(got, x)
    with pytest.raises(stoker.InvalidArgument):
        stoker.write(tmp_path / "bad", {"x": x}, compress={"x": "lz4"})
