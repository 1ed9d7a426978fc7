"""stoker.stats: each element's mean and std over every row of a field,
NaN left out, equal NumPy's nanmean/nanstd over the rows written, for the
whole dataset, per record (a record of NaN only gives NaN), over a period of
a time field and with ddof=1; a per-record float field counts one row a
record; mistakes are named.

Over the whole dataset they are the statistics the writer gathered as it
packed: equal (to float tolerance) to those computed by reading the data,
with min, max and NaN counts too, integers included; given without reading
a record; joined exactly from parts; the same bits after a pack killed and
resumed; computed as before for a dataset packed without them; printed by
`stoker inspect --stats`."""
import json
import shutil
import subprocess

import numpy as np
import pytest

import stoker
from stoker import _stats
from conftest import stoker_exe
from test_cli_resume import kill_after_shards

KEYS = ("mean", "std", "count", "min", "max", "nan_count")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(3)
    recs = []
    for r in range(17):
        n = int(rng.integers(1, 300))
        x = (rng.normal(size=(n, 3)) * 1e3 + 1e6).astype(np.float32)
        x[rng.random((n, 3)) < 0.2] = np.nan
        if r == 5:
            x[:] = np.nan
        t = np.arange(n, dtype=np.int64) * 10 + r
        recs.append({"x": x, "t": t, "area": np.float64(r * 1.5), "tag": f"basin {r}"})
    path = tmp_path_factory.mktemp("stats") / "s.stk"
    stoker.write(path, recs, ragged=["x", "t"], shard_bytes=8192)
    return path, recs


def computed(path, fields=None, **kw):
    """stoker.stats as it reads the data (the stored statistics ignored)."""
    keep = _stats._stored
    _stats._stored = lambda *a: None
    try:
        return stoker.stats(path, fields, **kw)
    finally:
        _stats._stored = keep


def assert_close(got, want):
    assert set(got) == set(want)
    for f in want:
        for k in KEYS:
            g, w = np.asarray(got[f][k]), np.asarray(want[f][k])
            assert g.shape == w.shape, (f, k)
            if k in ("count", "nan_count", "min", "max"):
                np.testing.assert_array_equal(g, w, err_msg=f"{f} {k}")
            else:
                np.testing.assert_allclose(g, w, rtol=1e-11, err_msg=f"{f} {k}")


def test_whole_and_per_record(data):
    path, recs = data
    s = stoker.stats(path, "x", by_group=True)["x"]
    rows = np.concatenate([r["x"] for r in recs]).astype(np.float64)
    np.testing.assert_allclose(s["mean"], np.nanmean(rows, axis=0), rtol=1e-12)
    np.testing.assert_allclose(s["std"], np.nanstd(rows, axis=0), rtol=1e-9)
    assert (s["count"] == (~np.isnan(rows)).sum(axis=0)).all()
    assert s["record_mean"].shape == (17, 3)
    for i, r in enumerate(recs):
        v = r["x"].astype(np.float64)
        if i == 5:
            assert np.isnan(s["record_mean"][i]).all() and (s["record_count"][i] == 0).all()
            continue
        np.testing.assert_allclose(s["record_mean"][i], np.nanmean(v, axis=0), rtol=1e-12)
        np.testing.assert_allclose(s["record_std"][i], np.nanstd(v, axis=0), rtol=1e-9)
    s1 = stoker.stats(path, "x", ddof=1)["x"]
    np.testing.assert_allclose(s1["std"], np.nanstd(rows, axis=0, ddof=1), rtol=1e-9)


def test_period(data):
    path, recs = data
    s = stoker.stats(path, "x", period=(500, 1200), order_by="t")["x"]
    rows = np.concatenate([r["x"][(r["t"] >= 500) & (r["t"] <= 1200)]
                           for r in recs]).astype(np.float64)
    np.testing.assert_allclose(s["mean"], np.nanmean(rows, axis=0), rtol=1e-12)
    np.testing.assert_allclose(s["std"], np.nanstd(rows, axis=0), rtol=1e-9)


def test_default_fields_and_per_record_values(data):
    path, recs = data
    s = stoker.stats(path)
    assert set(s) == {"x", "area"}
    np.testing.assert_allclose(s["area"]["mean"], np.mean([r["area"] for r in recs]))


@pytest.mark.parametrize("kw,needle", [
    (dict(fields="tag"), "numeric"),
    (dict(fields="nope"), "nope"),
    (dict(fields="x", period=(0, 1)), "order_by"),
    (dict(fields="area", period=(0, 1), order_by="t"), "rows"),
])
def test_mistakes(data, kw, needle):
    path, _ = data
    with pytest.raises(stoker.InvalidArgument) as e:
        stoker.stats(path, **kw)
    assert needle in str(e.value)


def test_stored_agree_with_computed_and_numpy(data):
    path, recs = data
    for fields in (None, ["x", "area", "t"]):
        for ddof in (0, 1):
            assert_close(stoker.stats(path, fields, ddof=ddof),
                         computed(path, fields, ddof=ddof))
    s = stoker.stats(path, ["x", "t"])
    rows = np.concatenate([r["x"] for r in recs]).astype(np.float64)
    np.testing.assert_array_equal(s["x"]["nan_count"], np.isnan(rows).sum(axis=0))
    np.testing.assert_array_equal(s["x"]["min"], np.nanmin(rows, axis=0))
    np.testing.assert_array_equal(s["x"]["max"], np.nanmax(rows, axis=0))
    np.testing.assert_allclose(s["x"]["std"], np.nanstd(rows, axis=0), rtol=1e-9)
    t = np.concatenate([r["t"] for r in recs]).astype(np.float64)
    assert s["t"]["count"] == len(t) and s["t"]["nan_count"] == 0
    np.testing.assert_allclose(s["t"]["mean"], t.mean(), rtol=1e-12)
    np.testing.assert_allclose(s["t"]["std"], t.std(), rtol=1e-9)
    assert (s["t"]["min"], s["t"]["max"]) == (t.min(), t.max())


def test_stored_agree_with_computed_for_fixed_shapes_and_static_fields(tmp_path):
    """A field of a fixed shape (and a grouped pack's static field, one
    value per group) is one row a record, each element a column: stored
    and computed agree on that, column for column."""
    rng = np.random.default_rng(5)
    fixed = rng.normal(50, 7, (300, 4, 3)).astype(np.float32)
    fixed[7, 1, 2] = np.nan
    stoker.write(tmp_path / "f.stk", {"img": fixed, "s": np.arange(300, dtype=np.int16)},
                 shard_bytes=4096)
    got = stoker.stats(tmp_path / "f.stk")
    assert got["img"]["mean"].shape == (4, 3)
    assert_close(got, computed(tmp_path / "f.stk"))
    np.testing.assert_allclose(got["img"]["std"], np.nanstd(fixed.astype(np.float64), axis=0),
                               rtol=1e-9)
    pa = pytest.importorskip("pyarrow")
    n = 240
    basin = np.repeat(np.arange(6), n // 6)
    area, elev = rng.uniform(1, 900, 6), rng.uniform(10, 3000, 6)
    t = pa.table({"basin": basin, "day": np.tile(np.arange(n // 6), 6),
                  "q": rng.normal(3, 1, n), "area": area[basin], "elev": elev[basin]})
    stoker.write(tmp_path / "g.stk", t, group_by="basin", order_by="day",
                 fields={"q": "q", "attrs": ["area", "elev"]}, static=["attrs"])
    got = stoker.stats(tmp_path / "g.stk", ["attrs", "q"], ddof=1)
    assert_close(got, computed(tmp_path / "g.stk", ["attrs", "q"], ddof=1))
    np.testing.assert_allclose(got["attrs"]["mean"], [area.mean(), elev.mean()], rtol=1e-6)
    np.testing.assert_array_equal(got["attrs"]["count"], [6, 6])


def test_stored_read_no_record(data, tmp_path):
    """The record bytes of a copy are overwritten with NaN: the stored
    statistics are still those of what was packed."""
    path, _ = data
    want = stoker.stats(path)
    copy = tmp_path / "copy.stk"
    shutil.copytree(path, copy)
    shard = sorted(copy.glob("*.stk"))[0]
    with open(shard, "r+b") as f:
        f.seek(4096)
        f.write(b"\xff" * 2048)
    assert_close(stoker.stats(copy), want)
    with pytest.raises(stoker.StokerError, match="checksum"):
        computed(copy)  # a reader of the records finds the damage


def test_parts_merged_give_the_statistics_of_the_whole(data, tmp_path):
    path, recs = data
    parts = tmp_path / "parts.stk"
    for i, (a, b) in enumerate([(0, 6), (6, 7), (7, 17)]):
        stoker.write(parts, recs[a:b], ragged=["x", "t"], shard_bytes=8192, part=(i, 3))
    stoker.merge(parts)
    assert_close(stoker.stats(parts, ["x", "area", "t"]), stoker.stats(path, ["x", "area", "t"]))


def test_without_stored_statistics_they_are_computed(data, tmp_path):
    """A manifest as stoker wrote it before statistics (and before its
    checksum) opens, and stoker.stats reads the data instead."""
    path, _ = data
    old = tmp_path / "old.stk"
    shutil.copytree(path, old)
    m = json.loads((old / "manifest.json").read_text())
    del m["stats"], m["manifest_xxh3"]
    (old / "manifest.json").write_text(json.dumps(m))
    assert_close(stoker.stats(old), stoker.stats(path))


def test_a_resumed_pack_ends_with_the_same_statistics(tmp_path):
    exe = str(stoker_exe())
    rows = np.random.default_rng(5).standard_normal((200_000, 8)).astype(np.float32) * 50 + 300
    rows[::7, 3] = np.nan
    src = tmp_path / "rows.npy"
    np.save(src, rows)
    pack = [exe, "pack", "--from", "npy", str(src), "--split-axis0", "--shard-size", "256K", "-q"]
    full = tmp_path / "full.stk"
    subprocess.run(pack + ["-o", str(full)], check=True)
    want = stoker.stats(full)  # a record is one row of 8: 8 columns
    assert [w["count"].tolist() for w in want.values()] == [
        np.count_nonzero(~np.isnan(rows), axis=0).tolist()]
    resumed = 0
    for after in (2, 9):
        ds = tmp_path / f"r{after}.stk"
        kill_after_shards(subprocess.Popen(pack + ["-o", str(ds)]), ds, after)
        r = subprocess.run(pack + ["-o", str(ds), "--resume"], capture_output=True, text=True)
        if r.returncode != 0:  # it had finished before the kill
            assert "already exists" in r.stderr
            continue
        resumed += 1
        got = stoker.stats(ds)
        assert list(got) == list(want)
        for f in want:
            for k in KEYS:
                assert np.array_equal(got[f][k], want[f][k], equal_nan=True), (f, k)
    assert resumed, "every pack finished before it was killed"


def test_inspect_prints_each_column(data):
    path, _ = data
    out = subprocess.run([str(stoker_exe()), "inspect", str(path), "--stats"], check=True,
                         capture_output=True, text=True).stdout
    s = stoker.stats(path, ["x", "area", "t"])
    lines = out[out.index("stats "):].splitlines()[2:]
    table = {}
    field = None
    for line in lines:
        cells = line.split()
        if line.startswith("  ") and not line.startswith("   "):
            field = cells.pop(0)
        if cells and cells[0].startswith("("):
            table[field] = " ".join(cells)
            continue
        table.setdefault(field, []).append(cells)
    assert table["tag"] == "(bytes: no statistics)"
    assert [c[0] for c in table["x"]] == ["[0]", "[1]", "[2]"] and table["area"][0][0] == "-"
    for f in ("x", "area", "t"):
        for k, cells in enumerate(table[f]):
            count, nan, mean, std, lo, hi = (float(v) for v in cells[1:])
            idx = (k,) if f == "x" else ()
            assert count == s[f]["count"][idx] and nan == s[f]["nan_count"][idx]
            for v, key in ((mean, "mean"), (std, "std"), (lo, "min"), (hi, "max")):
                np.testing.assert_allclose(v, s[f][key][idx], rtol=1e-6)


def test_dates_have_no_statistics_but_their_neighbours_do(tmp_path):
    """A date field (read as datetime64) is not numeric to stoker.stats,
    stored statistics or not; the float field beside it is."""
    path = tmp_path / "d.stk"
    v = np.arange(10, dtype=np.float32)
    stoker.write(path, {"day": np.arange(10).astype("datetime64[D]"), "v": v})
    with pytest.raises(stoker.InvalidArgument, match="numeric"):
        stoker.stats(path, "day")
    s = stoker.stats(path)
    assert list(s) == ["v"] and s["v"]["mean"] == v.mean() and s["v"]["max"] == 9
