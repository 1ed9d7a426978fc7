"""stoker.write from Arrow sources (pyarrow tables and readers, polars
frames), consumed in C through the Arrow C stream interface, and
`stoker pack --from parquet`."""
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import polars as pl
import pytest

import stoker


def records_of(path):
    """Ragged fields come back whole per record (batch of one)."""
    recs = []
    with stoker.Loader(path, batch_size=1, shuffle="sequential") as ld:
        for b in ld:
            recs.append({k: np.array(v) for k, v in b.items()})
    return recs


def test_rows_become_records(tmp_path):
    n = 50
    rng = np.random.default_rng(0)
    t = pa.table({
        "a": rng.standard_normal(n).astype(np.float32),
        "b": np.arange(n, dtype=np.int64) * 3,
        "flag": rng.random(n) < 0.5,
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 4, dtype=np.float64)), 4),
        "seq": pa.array([list(range(i % 5)) for i in range(n)], pa.list_(pa.int32())),
    })
    assert stoker.write(tmp_path / "d", t) == n
    recs = records_of(tmp_path / "d")
    assert len(recs) == n
    for i, r in enumerate(recs):
        assert r["a"][0] == t["a"][i].as_py()
        assert r["b"][0] == 3 * i
        assert r["flag"][0] == int(t["flag"][i].as_py())
        np.testing.assert_array_equal(r["vec"][0], np.arange(4 * i, 4 * i + 4))
        np.testing.assert_array_equal(r["seq"], np.arange(i % 5, dtype=np.int32))
        np.testing.assert_array_equal(r["seq_offsets"], [0, i % 5])


def test_polars_frame_equals_pyarrow_table(tmp_path):
    n = 40
    t = pa.table({"x": np.linspace(0, 1, n, dtype=np.float32), "k": np.arange(n, dtype=np.int32)})
    stoker.write(tmp_path / "a", t)
    stoker.write(tmp_path / "b", pl.from_arrow(t))
    ra, rb = records_of(tmp_path / "a"), records_of(tmp_path / "b")
    assert len(ra) == len(rb) == n
    for x, y in zip(ra, rb):
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])


def shuffled_rows(n_groups=6, days=30, string_keys=False, seed=1):
    rng = np.random.default_rng(seed)
    basin = np.repeat(np.arange(n_groups), days)
    date = np.tile(np.arange(days), n_groups)
    feats = rng.standard_normal((n_groups * days, 3)).astype(np.float32)
    q = rng.standard_normal(n_groups * days)
    q[rng.random(n_groups * days) < 0.2] = np.nan
    perm = rng.permutation(n_groups * days)
    keys = np.array([f"b{k:02d}" for k in basin]) if string_keys else basin
    cols = {"basin": keys[perm], "date": date[perm].astype(np.int32),
            "f0": feats[perm, 0], "f1": feats[perm, 1], "f2": feats[perm, 2]}
    qv = q[perm]
    cols["q"] = pa.array(np.where(np.isnan(qv), 0, qv), mask=np.isnan(qv))  # nulls, not NaN
    return pa.table(cols), basin, date, feats, q


@pytest.mark.parametrize("string_keys", [False, True])
def test_group_by_order_by_makes_one_record_per_entity(tmp_path, string_keys):
    t, basin, date, feats, q = shuffled_rows(string_keys=string_keys)
    # Several record batches, so that groups are gathered across batches.
    reader = pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=17))
    n = stoker.write(tmp_path / "d", reader, group_by="basin", order_by="date",
                     fields={"x": ["f0", "f1", "f2"], "y": "q", "date": "date"})
    assert n == 6
    with stoker.Loader(tmp_path / "d", batch_size=1, shuffle="sequential") as ld:
        recs = [{k: np.array(v) for k, v in b.items()} for b in ld]
    for g, r in enumerate(recs):
        rows = slice(g * 30, (g + 1) * 30)
        np.testing.assert_array_equal(r["date"], np.arange(30))
        np.testing.assert_array_equal(r["x"], feats[rows])
        np.testing.assert_array_equal(np.isnan(r["y"]), np.isnan(q[rows]))
        np.testing.assert_allclose(r["y"][~np.isnan(r["y"])], q[rows][~np.isnan(q[rows])])
        if string_keys:
            assert bytes(r["basin"]).decode() == f"b{g:02d}"
        else:
            assert r["basin"][0] == g


def test_grouped_dataset_feeds_windows_with_valid_targets(tmp_path):
    t, basin, date, feats, q = shuffled_rows()
    stoker.write(tmp_path / "d", t, group_by="basin", order_by="date",
                 fields={"x": ["f0", "f1", "f2"], "y": "q"})
    expected = sum(1 for g in range(6) for s in range(30 - 7 + 1)
                   if not np.isnan(q[g * 30 + s + 6]))
    with stoker.Loader(tmp_path / "d", batch_size=16, window=7, fields=["x", "y"],
                       valid_field="y", valid="notnan", shuffle="random") as ld:
        total = 0
        for b in ld:
            assert b["x"].shape[1:] == (7, 3)
            assert not np.isnan(b["y"][:, -1]).any()
            total += len(b["x"])
    assert total == expected


@pytest.mark.parametrize("table, kw, words", [
    (pa.table({"s": pa.array([{"a": 1}, {"a": 2}])}), {}, ["'s'"]),
    (pa.table({"k": [1, 1], "name": ["x", "y"]}), {"group_by": "k"}, ["'name'", "strings"]),
    (pa.table({"name": ["x", "y"], "v": [1.0, 2.0]}), {"fields": {"x": ["name", "v"]}},
     ["'name'", "stacked"]),
    (pa.table({"k": [1, 1], "v": [1.0, 2.0]}), {"group_by": "nope"}, ["group_by", "nope"]),
    (pa.table({"k": [1, 1], "v": [1.0, 2.0]}), {"order_by": "k"}, ["order_by", "group_by"]),
    (pa.table({"k": [1, 1], "l": pa.array([[1.0], [2.0]])}), {"group_by": "k"}, ["'l'", "list"]),
    (pa.table({"a": [1.0], "b": pa.array([1], pa.int64())}), {"fields": {"x": ["a", "b"]}},
     ["'x'", "differ"]),
    (pa.table({"a": [1.0]}), {"fields": {"x": ["zz"]}}, ["'x'", "'zz'"]),
])
def test_unfit_schemas_are_refused_before_writing(tmp_path, table, kw, words):
    path = tmp_path / "d"
    with pytest.raises(ValueError) as ei:
        stoker.write(path, table, **kw)
    for w in words:
        assert w in str(ei.value)
    assert not (path / "manifest.json").exists()
    assert not any(p.suffix == ".stk" for p in path.glob("*")) if path.exists() else True


def test_null_in_an_integer_column_leaves_no_complete_dataset(tmp_path):
    t = pa.table({"v": pa.array([1, None, 3], pa.int64())})
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "d", t)
    assert "'v'" in str(ei.value) and "row 1" in str(ei.value)
    with pytest.raises(Exception) as oe:
        stoker.Loader(tmp_path / "d", batch_size=1)
    assert "incomplete" in str(oe.value)


def test_cli_pack_from_parquet_matches_write(tmp_path):
    t, *_ = shuffled_rows(n_groups=4, days=20)
    src = tmp_path / "pq"
    src.mkdir()
    keys = t["basin"].to_numpy()
    for g in range(4):
        pq.write_table(t.filter(pa.array(keys == g)), src / f"b{g}.parquet")
    build = os.environ.get("STOKER_BUILD", "build")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    exe = os.path.join(build if os.path.isabs(build) else os.path.join(root, build), "stoker")
    env = dict(os.environ, STOKER_PYTHON=sys.executable)
    r = subprocess.run([exe, "pack", "--from", "parquet", str(src), "--group-by", "basin",
                        "--order-by", "date", "--field", "x=f0,f1,f2", "--field", "y=q",
                        "-o", str(tmp_path / "cli")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    stoker.write(tmp_path / "py", t, group_by="basin", order_by="date",
                 fields={"x": ["f0", "f1", "f2"], "y": "q"})
    a, b = records_of(tmp_path / "cli"), records_of(tmp_path / "py")
    assert len(a) == len(b) == 4
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x["x"], y["x"])
        np.testing.assert_array_equal(x["y"], y["y"])
    bad = subprocess.run([exe, "pack", "--from", "parquet", str(tmp_path / "none*.parquet"),
                          "-o", str(tmp_path / "z")], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "no such file" in bad.stderr


def test_a_grouped_pack_says_where_its_series_have_gaps(tmp_path):
    """stoker pack (and stoker.write's report) name the order's step and
    count the groups whose rows skip steps or repeat a value."""
    import datetime as dt
    import subprocess
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq
    from stoker import _write
    rows = []
    for b in range(5):
        days = list(range(20))
        if b == 1:
            days = days[:5] + days[9:]                      # one gap of 4 days
        if b == 2:
            days = days[:3] + days[10:14] + days[16:]       # two gaps
        if b == 3:
            days = days + [7]                               # a repeated date
        rows += [(b, dt.date(2000, 1, 1) + dt.timedelta(days=d), float(d)) for d in days]
    np.random.default_rng(0).shuffle(rows)
    t = pa.table({"basin": [r[0] for r in rows],
                  "date": pa.array([r[1] for r in rows], pa.date32()),
                  "q": [r[2] for r in rows]})
    stoker.write(tmp_path / "g.stk", t, group_by="basin", order_by="date")
    r = _write.last_order_report
    assert {k: r[k] for k in ("groups", "step", "gaps", "gap_groups", "repeats",
                              "repeat_groups")} == dict(groups=5, step=1, gaps=3, gap_groups=2,
                                                        repeats=1, repeat_groups=1)
    (tmp_path / "pq").mkdir()
    pq.write_table(t, tmp_path / "pq" / "a.parquet")
    p = subprocess.run([sys.executable, "-m", "stoker", "pack", "--from", "parquet",
                        str(tmp_path / "pq"), "-o", str(tmp_path / "g2.stk"), "--group-by",
                        "basin", "--order-by", "date"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert ("rows by 'date', a step of 1 (date32[day]); 2 of 5 groups have gaps (3 in all)"
            in p.stdout)
    assert "1 groups repeat a value of 'date' (1 rows)" in p.stdout
    # Without --order-by the rows stay in file order (shuffled here), and
    # pack says so, naming the date column as the likely order.
    p = subprocess.run([sys.executable, "-m", "stoker", "pack", "--from", "parquet",
                        str(tmp_path / "pq"), "-o", str(tmp_path / "g3.stk"), "--group-by",
                        "basin"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert ("each group's rows are in the order they were read (no --order-by)" in p.stdout
            and "--order-by date" in p.stdout), p.stdout
    # Without gaps it says so; a float order column has no step to report.
    clean = t.filter(pa.compute.is_in(t["basin"], pa.array([0, 4])))
    stoker.write(tmp_path / "c.stk", clean, group_by="basin", order_by="date")
    assert _write.order_note(_write.last_order_report).endswith("no gaps in 2 groups")
    stoker.write(tmp_path / "f.stk", t, group_by="basin", order_by="q")
    assert _write.order_note(_write.last_order_report) is None
