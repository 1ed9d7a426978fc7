"""What a batch holds equals the source it was written from: dict sources of
every dtype, ragged records, windows over ragged time series; in every order
each sample comes exactly once per epoch."""

import numpy as np
import pytest

import stoker
from stkpy import ORDERS, drain, ragged_series, window_index

pytestmark = pytest.mark.usefixtures("no_dist_env")

N = 150


def typed_source(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "u8": rng.integers(0, 256, n).astype(np.uint8),
        "u16": rng.integers(0, 1 << 16, n).astype(np.uint16),
        "u32": rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32),
        "u64": rng.integers(0, 1 << 63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(1),
        "i8": rng.integers(-128, 128, n).astype(np.int8),
        "i16": rng.integers(-(1 << 15), 1 << 15, n).astype(np.int16),
        "i32": rng.integers(-(1 << 31), 1 << 31, n).astype(np.int32),
        "i64": rng.integers(-(1 << 62), 1 << 62, n).astype(np.int64),
        "f16": rng.standard_normal((n, 3)).astype(np.float16),
        "f32": rng.standard_normal((n, 2, 3, 4)).astype(np.float32),
        "f64": rng.standard_normal((n, 7)),
        "flag": rng.random(n) > 0.5,
        "img": rng.integers(0, 256, (n, 4, 5, 2)).astype(np.uint8),
        "idx": np.arange(n, dtype=np.int64),
    }


@pytest.fixture(scope="module")
def typed_ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("typed") / "typed.stk"
    src = typed_source()
    assert stoker.write(path, src) == N
    return path, src


def expected(src, name):
    a = src[name]
    return a.astype(np.uint8) if a.dtype == np.bool_ else a


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("backend", ["pool", "mmap", "uring"])
def test_dict_source_every_dtype(typed_ds, order, backend):
    path, src = typed_ds
    ld = stoker.Loader(path, batch_size=16, shuffle=order, seed=11, backend=backend,
                       block_samples=10, block_group=3)
    with ld:
        assert set(ld.fields) == set(src)
        assert ld.backend == {"uring": "io_uring"}.get(backend, backend)
        got = drain(ld)
        assert len(got) == len(ld) == -(-N // 16)
    all_ids = np.concatenate([ids for ids, _ in got])
    assert sorted(all_ids.tolist()) == list(range(N))
    if order != "sequential":
        assert all_ids.tolist() != list(range(N))
    for ids, b in got:
        assert len(ids) == len(b["idx"])
        np.testing.assert_array_equal(b["idx"], ids.astype(np.int64))
        for name in src:
            want = expected(src, name)[ids]
            assert b[name].dtype == want.dtype, name
            assert b[name].shape == want.shape, name
            np.testing.assert_array_equal(b[name], want, err_msg=name)


def test_field_selection(typed_ds):
    path, src = typed_ds
    with stoker.Loader(path, batch_size=32, fields=["f16", "idx"], shuffle="random") as ld:
        assert ld.fields == ("f16", "idx")
        for b in ld:
            assert set(b) == {"f16", "idx"}
            np.testing.assert_array_equal(b["f16"], src["f16"][b["idx"]])
    with stoker.Loader(path, batch_size=32, fields="u16") as ld:
        b = ld.next()
        assert set(b) == {"u16"}
        np.testing.assert_array_equal(b["u16"], src["u16"][ld.sample_ids()])


def test_drop_last_and_len(typed_ds):
    path, _ = typed_ds
    with stoker.Loader(path, batch_size=16, drop_last=True, shuffle="random") as ld:
        sizes = [len(b["idx"]) for b in ld]
        assert len(ld) == len(sizes) == N // 16
        assert set(sizes) == {16}
    with stoker.Loader(path, batch_size=16, shuffle="random") as ld:
        sizes = [len(b["idx"]) for b in ld]
        assert len(ld) == len(sizes) == N // 16 + 1
        assert sizes[-1] == N % 16


@pytest.fixture(scope="module")
def ragged_ds(tmp_path_factory):
    recs = ragged_series(60, seed=5)
    # A record of zero rows and a record of one row too.
    recs[3] = {"x": np.zeros((0, 3), np.float32), "t": np.zeros(0, np.int64),
               "rec": np.int64(3)}
    recs[4]["x"] = recs[4]["x"][:1]
    recs[4]["t"] = recs[4]["t"][:1]
    path = tmp_path_factory.mktemp("ragged") / "ragged.stk"
    assert stoker.write(path, iter(recs), ragged=["x", "t"]) == len(recs)
    return path, recs


@pytest.mark.parametrize("order", ORDERS)
def test_ragged_records(ragged_ds, order):
    path, recs = ragged_ds
    with stoker.Loader(path, batch_size=7, shuffle=order, seed=2, block_samples=5) as ld:
        assert set(ld.fields) == {"x", "t", "rec"}
        got = drain(ld)
    ids = np.concatenate([i for i, _ in got])
    assert sorted(ids.tolist()) == list(range(len(recs)))
    for ids, b in got:
        assert set(b) == {"x", "x_offsets", "t", "t_offsets", "rec"}
        n = len(ids)
        assert b["x_offsets"].dtype == np.int64 and b["x_offsets"].shape == (n + 1,)
        np.testing.assert_array_equal(b["x_offsets"], b["t_offsets"])
        off = b["x_offsets"]
        assert off[0] == 0 and off[-1] == len(b["x"]) == len(b["t"])
        assert b["rec"].shape == (n,) and b["rec"].dtype == np.int64
        np.testing.assert_array_equal(b["rec"], ids.astype(np.int64))
        for j, r in enumerate(ids):
            np.testing.assert_array_equal(b["x"][off[j]:off[j + 1]], recs[r]["x"])
            np.testing.assert_array_equal(b["t"][off[j]:off[j + 1]], recs[r]["t"])


@pytest.fixture(scope="module")
def series_ds(tmp_path_factory):
    lengths = [5, 12, 3, 9, 20, 1, 17, 8, 30, 11, 4, 14]
    recs = ragged_series(len(lengths), seed=9, lengths=lengths)
    path = tmp_path_factory.mktemp("series") / "series.stk"
    # No `ragged`: found from the first two records.
    assert stoker.write(path, recs) == len(recs)
    return path, recs, lengths


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("window,stride", [(4, 1), (4, 2), (5, 3), (1, 1), (12, 5)])
def test_windows(series_ds, order, window, stride):
    path, recs, lengths = series_ds
    index = window_index(lengths, window, stride)
    with stoker.Loader(path, batch_size=6, window=window, stride=stride, shuffle=order,
                       seed=4, block_samples=4, block_group=2) as ld:
        assert ld.counts()["epoch_samples"] == len(index)
        got = drain(ld)
    ids = np.concatenate([i for i, _ in got])
    assert sorted(ids.tolist()) == list(range(len(index)))
    if order != "sequential" and len(index) > 6:
        assert ids.tolist() != sorted(ids.tolist())
    for ids, b in got:
        n = len(ids)
        assert set(b) == {"x", "t", "rec"}
        assert b["x"].shape == (n, window, 3)
        assert b["t"].shape == (n, window)
        assert b["rec"].shape == (n,)
        for j, w in enumerate(ids):
            r, t = index[w]
            np.testing.assert_array_equal(b["x"][j], recs[r]["x"][t:t + window])
            np.testing.assert_array_equal(b["t"][j], recs[r]["t"][t:t + window])
            assert b["rec"][j] == r


def test_windows_over_a_fixed_time_dimension(tmp_path):
    # A dict source whose records all have 10 rows: the field is still a
    # time field for windows of at most 10 rows.
    rng = np.random.default_rng(1)
    src = {"y": rng.standard_normal((8, 10, 2)).astype(np.float32),
           "k": np.arange(8, dtype=np.int32)}
    path = tmp_path / "fixed.stk"
    stoker.write(path, src)
    index = window_index([10] * 8, 4, 3)
    with stoker.Loader(path, batch_size=5, window=4, stride=3, shuffle="random") as ld:
        got = drain(ld)
    ids = np.concatenate([i for i, _ in got])
    assert sorted(ids.tolist()) == list(range(len(index)))
    for ids, b in got:
        for j, w in enumerate(ids):
            r, t = index[w]
            np.testing.assert_array_equal(b["y"][j], src["y"][r, t:t + 4])
            assert b["k"][j] == r


@pytest.mark.parametrize("order", ORDERS)
def test_each_sample_once_per_epoch_over_epochs(tmp_path, order):
    path = tmp_path / "ids.stk"
    stoker.write(path, {"id": np.arange(97, dtype=np.int64)})
    with stoker.Loader(path, batch_size=10, shuffle=order, seed=3, block_samples=8) as ld:
        epochs = []
        for _ in range(3):
            ids = np.concatenate([b["id"].copy() for b in ld])
            assert sorted(ids.tolist()) == list(range(97))
            epochs.append(ids.tolist())
    if order == "sequential":
        assert epochs[0] == epochs[1] == epochs[2] == list(range(97))
    else:
        assert epochs[0] != epochs[1] and epochs[1] != epochs[2]


def test_write_scalar_fields_from_records_keep_their_shape(tmp_path):
    # A 0-d value per record is a scalar field, as with a dict source.
    # (np.float32(i / 2): under NumPy 1, np.float32(i) / 2 is a float64.)
    recs = [{"a": np.float32(i / 2), "b": i, "v": np.arange(i % 3 + 1, dtype=np.int16)}
            for i in range(10)]
    path = tmp_path / "s.stk"
    assert stoker.write(path, recs, ragged=["v"]) == 10
    with stoker.Loader(path, batch_size=4, shuffle="sequential") as ld:
        b = ld.next()
        assert b["a"].shape == (4,) and b["a"].dtype == np.float32
        assert b["b"].shape == (4,) and b["b"].dtype == np.int64
        np.testing.assert_array_equal(b["a"], np.arange(4, dtype=np.float32) / 2)
        np.testing.assert_array_equal(b["b"], np.arange(4))
        np.testing.assert_array_equal(b["v_offsets"], [0, 1, 3, 6, 7])


def test_write_returns_counts_and_overwrite(tmp_path):
    path = tmp_path / "o.stk"
    assert stoker.write(path, {"a": np.arange(5)}) == 5
    with pytest.raises((FileExistsError, stoker.StokerError), match="overwrite"):
        stoker.write(path, {"a": np.arange(6)})
    assert stoker.write(path, {"a": np.arange(6) * 2}, overwrite=True) == 6
    with stoker.Loader(path, batch_size=10, shuffle="sequential") as ld:
        np.testing.assert_array_equal(ld.next()["a"], np.arange(6) * 2)


def test_write_compressed_field(tmp_path):
    rng = np.random.default_rng(0)
    src = {"z": np.repeat(rng.integers(0, 4, (50, 1)), 64, axis=1).astype(np.int32),
           "id": np.arange(50)}
    path = tmp_path / "z.stk"
    stoker.write(path, src, compress={"z": True})
    with stoker.Loader(path, batch_size=8, shuffle="random") as ld:
        for b in ld:
            np.testing.assert_array_equal(b["z"], src["z"][b["id"]])


@pytest.mark.parametrize("shape", [(0,), (0, 3)])
def test_write_empty_dict_source(tmp_path, shape):
    path = tmp_path / "empty.stk"
    assert stoker.write(path, {"a": np.zeros(shape, np.float32)}) == 0
    with stoker.Loader(path, batch_size=4) as ld:
        assert len(ld) == 0
        assert ld.next() is None
        assert list(ld) == []


@pytest.mark.parametrize("valid,field", [("mask", "m"), ("notnan", "x")])
@pytest.mark.parametrize("order", ORDERS)
def test_windows_kept_by_a_validity_rule(tmp_path, valid, field, order):
    rng = np.random.default_rng(3)
    lengths = [10, 3, 15, 8, 21, 2, 12]
    recs = []
    for i, n in enumerate(lengths):
        x = rng.standard_normal((n, 2)).astype(np.float32)
        x[rng.random(n) > 0.7, 1] = np.nan
        recs.append({"x": x, "m": (rng.random(n) > 0.4).astype(np.uint8),
                     "row": np.arange(n, dtype=np.int64) + 100 * i})
    path = tmp_path / "valid.stk"
    stoker.write(path, recs)
    window, stride = 3, 2
    # The windows whose last row passes, numbered among themselves.
    index = [(r, t) for r, t in window_index(lengths, window, stride)
             if (recs[r]["m"][t + window - 1] != 0 if valid == "mask"
                 else not np.isnan(recs[r]["x"][t + window - 1]).any())]
    assert 0 < len(index) < len(window_index(lengths, window, stride))
    with stoker.Loader(path, batch_size=4, window=window, stride=stride, valid_field=field,
                       valid=valid, shuffle=order, block_samples=3) as ld:
        assert ld.counts()["epoch_samples"] == len(index)
        got = drain(ld)
    ids = np.concatenate([i for i, _ in got])
    assert sorted(ids.tolist()) == list(range(len(index)))
    for ids, b in got:
        for j, w in enumerate(ids):
            r, t = index[w]
            np.testing.assert_array_equal(b["row"][j], recs[r]["row"][t:t + window])
            np.testing.assert_array_equal(b["x"][j], recs[r]["x"][t:t + window])
            np.testing.assert_array_equal(b["m"][j], recs[r]["m"][t:t + window])


def test_bfloat16_fields_from_torch(tmp_path):
    """A torch.bfloat16 tensor makes a bf16 field, from a dict source and
    from records (fixed and ragged): torch reads back the same values, in
    bfloat16; NumPy reads the raw 16-bit words; the manifest says bf16."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(40, 6, generator=g).to(torch.bfloat16)
    y = torch.randn(40, generator=g).to(torch.bfloat16)
    assert stoker.write(tmp_path / "cols", {"x": x, "y": y, "i": np.arange(40)}) == 40
    rows = [torch.randn(1 + i % 5, 3, generator=g).to(torch.bfloat16) for i in range(40)]
    assert stoker.write(tmp_path / "recs", [{"x": x[i], "r": rows[i]} for i in range(40)]) == 40
    import json
    manifest = json.loads((tmp_path / "cols" / "manifest.json").read_text())
    assert {f["name"]: f["dtype"] for f in manifest["fields"]} == {"x": "bf16", "y": "bf16",
                                                                   "i": "i64"}
    for order in ORDERS:
        with stoker.Loader(tmp_path / "cols", 8, shuffle=order, output="torch") as ld:
            for b in ld:
                i = b["i"]
                assert b["x"].dtype == torch.bfloat16 and torch.equal(b["x"], x[i])
                assert torch.equal(b["y"], y[i])
        with stoker.Loader(tmp_path / "recs", 8, shuffle=order, output="torch") as ld:
            for b in ld:
                ids = ld.sample_ids()
                assert torch.equal(b["x"], x[torch.from_numpy(ids.astype(np.int64))])
                offs = b["r_offsets"]
                for j, r in enumerate(ids):
                    assert torch.equal(b["r"][offs[j]:offs[j + 1]], rows[int(r)])
    with stoker.Loader(tmp_path / "cols", 40, shuffle="sequential") as ld:
        b = next(iter(ld))
    assert b["x"].dtype == np.uint16
    assert np.array_equal(b["x"], x.view(torch.int16).numpy().view(np.uint16))


def test_bfloat16_mixed_with_other_dtypes_is_refused_per_record(tmp_path):
    """A record whose bf16 field comes as another dtype is refused, naming
    the record and the field."""
    torch = pytest.importorskip("torch")
    recs = [{"x": torch.zeros(3, dtype=torch.bfloat16)}, {"x": torch.zeros(3)}]
    with pytest.raises(stoker.InvalidArgument, match=r"record 1: field 'x'"):
        stoker.write(tmp_path / "d", recs)
