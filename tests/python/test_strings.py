"""Strings, binaries, dates and times as fields: written from Arrow columns,
dicts and records, typed in the manifest, and read back as str / bytes
(list, NumPy StringDType or pyarrow), datetime64 and timedelta64 through
numpy, and as bytes and offsets through torch, in every order."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import stoker

pa = pytest.importorskip("pyarrow")

ORDERS = ["sequential", "random", "block"]

# Short, empty, multi-byte, and longer than a string view's 12 inline bytes.
TEXT = ["a", "", "héllo wörld", "日本語", "x" * 40, "tab\tand\nnewline", "z", "∑" * 7] * 4
BLOBS = [t.encode() + b"\x00\xff" for t in TEXT]


def records(path, **kw):
    """Every record of an epoch, {record id: {field: value}}, ragged
    fields cut at their offsets."""
    out = {}
    with stoker.Loader(path, 5, **kw) as ld:
        for b in ld:
            ids = ld.sample_ids()
            for j, rid in enumerate(ids):
                rec = {}
                for k, v in b.items():
                    if k.endswith("_offsets"):
                        continue
                    off = b.get(k + "_offsets")
                    rec[k] = v[off[j]:off[j + 1]] if off is not None else v[j]
                assert int(rid) not in out
                out[int(rid)] = rec
    return out


def manifest(path):
    with open(os.path.join(path, "manifest.json")) as f:
        return {f["name"]: f for f in json.load(f)["fields"]}


@pytest.mark.parametrize("shuffle", ORDERS)
def test_every_arrow_string_and_binary_type_reads_back_equal(tmp_path, shuffle):
    t = pa.table({
        "s": pa.array(TEXT, pa.string()),
        "ls": pa.array(TEXT, pa.large_string()),
        "sv": pa.array(TEXT, pa.string_view()),
        "ds": pa.array(TEXT, pa.string()).dictionary_encode(),
        "b": pa.array(BLOBS, pa.binary()),
        "lb": pa.array(BLOBS, pa.large_binary()),
        "bv": pa.array(BLOBS, pa.binary_view()),
        "fb": pa.array([x[:2].ljust(2, b"_") for x in BLOBS], pa.binary(2)),
        "i": pa.array(range(len(TEXT)), pa.int32()),
    })
    assert stoker.write(tmp_path / "d", t) == len(TEXT)
    m = manifest(tmp_path / "d")
    for k in ("s", "ls", "sv", "ds"):
        assert (m[k]["dtype"], m[k]["shape"], m[k]["type"]) == ("bytes", [-1], "string")
    for k in ("b", "lb", "bv", "fb"):
        assert (m[k]["dtype"], m[k]["type"]) == ("bytes", "binary")
    assert "type" not in m["i"]
    got = records(tmp_path / "d", shuffle=shuffle, seed=3)
    assert sorted(got) == list(range(len(TEXT)))
    for r, rec in got.items():
        assert rec["i"] == r
        for k in ("s", "ls", "sv", "ds"):
            assert type(rec[k]) is str and rec[k] == TEXT[r]
        for k in ("b", "lb", "bv"):
            assert type(rec[k]) is bytes and rec[k] == BLOBS[r]
        assert rec["fb"] == BLOBS[r][:2].ljust(2, b"_")


def test_strings_numpy_arrow_and_torch(tmp_path):
    stoker.write(tmp_path / "d", pa.table({"s": TEXT, "b": pa.array(BLOBS),
                                           "i": np.arange(len(TEXT))}))
    with stoker.Loader(tmp_path / "d", 8, strings="numpy") as ld:
        for b in ld:
            i = b["i"]
            assert b["s"].dtype == np.dtypes.StringDType()
            assert b["s"].tolist() == [TEXT[k] for k in i]
            assert b["b"].dtype == object and b["b"].tolist() == [BLOBS[k] for k in i]
            assert "s_offsets" not in b and "b_offsets" not in b
    with stoker.Loader(tmp_path / "d", 8, strings="arrow") as ld:
        for b in ld:
            i = b["i"]
            assert b["s"].type == pa.large_string() and b["b"].type == pa.large_binary()
            assert b["s"].to_pylist() == [TEXT[k] for k in i]
            assert b["b"].to_pylist() == [BLOBS[k] for k in i]
    torch = pytest.importorskip("torch")
    with stoker.Loader(tmp_path / "d", 8, output="torch", shuffle="random") as ld:
        for b in ld:
            assert b["s"].dtype == torch.uint8 and b["s_offsets"].dtype == torch.int64
            raw, off = bytes(b["s"].numpy()), b["s_offsets"].tolist()
            texts = [raw[off[j]:off[j + 1]].decode() for j in range(len(off) - 1)]
            assert texts == [TEXT[k] for k in b["i"].tolist()]
    with pytest.raises(ValueError, match="strings must be one of"):
        stoker.Loader(tmp_path / "d", 8, strings="pandas")


@pytest.mark.parametrize("make", [
    lambda: TEXT,
    lambda: tuple(TEXT),
    lambda: np.array(TEXT),
    lambda: np.array(TEXT, dtype=object),
    lambda: np.array(TEXT, dtype=np.dtypes.StringDType()),
], ids=["list", "tuple", "U", "object", "StringDType"])
def test_dict_sources_take_strings(tmp_path, make):
    n = len(TEXT)
    stoker.write(tmp_path / "d", {"text": make(), "blob": BLOBS, "y": np.arange(n, dtype="f4")})
    m = manifest(tmp_path / "d")
    assert m["text"]["type"] == "string" and m["blob"]["type"] == "binary"
    for r, rec in records(tmp_path / "d", shuffle="random").items():
        assert rec["text"] == TEXT[r] and rec["blob"] == BLOBS[r] and rec["y"] == r


def test_numpy_fixed_width_bytes_and_record_sources(tmp_path):
    words = [b"ab", b"c", b"def"]
    stoker.write(tmp_path / "s", {"w": np.array(words, dtype="S3")})
    assert [records(tmp_path / "s")[r]["w"] for r in range(3)] == words
    recs = [{"t": TEXT[i], "b": BLOBS[i], "v": np.arange(i % 3, dtype=np.int16)}
            for i in range(len(TEXT))]
    stoker.write(tmp_path / "r", recs)
    for r, rec in records(tmp_path / "r", shuffle="block").items():
        assert rec["t"] == TEXT[r] and rec["b"] == BLOBS[r]
        np.testing.assert_array_equal(rec["v"], np.arange(r % 3))
    # A record whose value changes kind is named.
    with pytest.raises(ValueError, match="record 1: field 't'"):
        stoker.write(tmp_path / "bad", [{"t": "a"}, {"t": b"b"}])


def test_dates_timestamps_durations_and_times_keep_their_units(tmp_path):
    ts = [0, 1_600_000_000_123_456, -5, 7]
    t = pa.table({
        "ts": pa.array(ts, pa.timestamp("us", tz="Europe/Paris")),
        "tn": pa.array(ts, pa.timestamp("ns")),
        "d32": pa.array([0, 19000, -1, 3], pa.date32()),
        "d64": pa.array([0, 86_400_000, 5, 9], pa.date64()),
        "dur": pa.array([1, 2, -3, 4], pa.duration("ms")),
        "t32": pa.array([1, 2, 3, 86399], pa.time32("s")),
        "t64": pa.array([1, 2, 3, 4], pa.time64("ns")),
        "lts": pa.array([[1, 2], [], [3], [4, 5, 6]], pa.list_(pa.timestamp("s"))),
    })
    stoker.write(tmp_path / "d", t)
    m = manifest(tmp_path / "d")
    assert m["ts"]["type"] == "timestamp[us, tz=Europe/Paris]" and m["ts"]["dtype"] == "i64"
    assert m["d32"]["type"] == "date32" and m["d32"]["dtype"] == "i32"
    assert (m["dur"]["type"], m["t32"]["type"], m["lts"]["type"]) == \
        ("duration[ms]", "time32[s]", "timestamp[s]")
    want = {k: t[k].to_numpy() for k in ("ts", "tn", "d32", "d64", "dur")}
    want["ts"] = np.array(ts, "datetime64[us]")  # (UTC, as the values are stored)
    want["t32"] = np.array([1, 2, 3, 86399], "timedelta64[s]")
    want["t64"] = np.array([1, 2, 3, 4], "timedelta64[ns]")
    got = records(tmp_path / "d", shuffle="random")
    for r, rec in got.items():
        for k, w in want.items():
            assert rec[k].dtype == w.dtype, k
            assert rec[k] == w[r], k
        np.testing.assert_array_equal(rec["lts"], np.array(t["lts"][r].as_py(), "datetime64[s]"))
    # NumPy datetime64 from a dict keeps its unit too.
    stoker.write(tmp_path / "n", {"when": np.array(["2020-01-01", "1969-12-31"], "datetime64[D]"),
                                  "at": np.array([5, 6], "datetime64[ms]")})
    got = records(tmp_path / "n")
    assert got[1]["when"] == np.datetime64("1969-12-31") and got[0]["at"].dtype == "datetime64[ms]"
    torch = pytest.importorskip("torch")
    with stoker.Loader(tmp_path / "d", 4, output="torch", shuffle="sequential") as ld:
        b = next(iter(ld))
        assert b["ts"].dtype == torch.int64 and b["ts"].tolist() == ts


def test_refusals_are_clear(tmp_path):
    t = pa.table({"k": [1, 1, 2], "name": ["a", "b", "c"], "x": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="'name' is not constant within group 1.*strings"):
        stoker.write(tmp_path / "g", t, group_by="k")
    with pytest.raises(ValueError, match="row 1 is null"):
        stoker.write(tmp_path / "n", pa.table({"s": ["a", None]}))
    # A string has no rows to window: alone it gives no time axis.
    stoker.write(tmp_path / "w", {"text": ["ab", "cde"]})
    with pytest.raises(ValueError, match="time axis"):
        stoker.Loader(tmp_path / "w", 2, window=3)


def test_a_windowed_loader_gives_each_sample_its_records_string(tmp_path):
    recs = [{"name": f"basin-{i}", "x": np.arange(4 * (i + 2), dtype="f4").reshape(-1, 4)}
            for i in range(5)]
    stoker.write(tmp_path / "d", recs)
    n = 0
    with stoker.Loader(tmp_path / "d", 3, window=2, shuffle="random") as ld:
        for b in ld:
            assert isinstance(b["name"], list) and len(b["name"]) == len(b["x"])
            for name, x in zip(b["name"], b["x"]):
                r = int(name.split("-")[1])
                assert x.shape == (2, 4) and np.isin(x, recs[r]["x"]).all()
                n += 1
    assert n == sum(i + 2 - 1 for i in range(5))


def test_the_type_is_covered_by_the_manifest_checksum(tmp_path):
    stoker.write(tmp_path / "d", {"s": ["a", "b"]})
    p = tmp_path / "d" / "manifest.json"
    text = p.read_text()
    assert '"type": "string"' in text
    p.write_text(text.replace('"type": "string"', '"type": "binary"'))
    with pytest.raises(stoker.StokerError, match="checksum"):
        stoker.Loader(tmp_path / "d", 2)
    # Without the checksum (a hand-edited manifest) the key is known, not damage.
    doc = json.loads(text)
    del doc["manifest_xxh3"]
    p.write_text(json.dumps(doc))
    assert records(tmp_path / "d") == {0: {"s": "a"}, 1: {"s": "b"}}


def test_command_line_shows_the_type(tmp_path):
    stoker.write(tmp_path / "d", pa.table({"s": ["héllo", "x"],
                                           "t": pa.array([1, 2], pa.timestamp("s", tz="UTC"))}))
    build = os.environ.get("STOKER_BUILD", "build")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    exe = os.path.join(build if os.path.isabs(build) else os.path.join(root, build), "stoker")
    run = lambda *a: subprocess.run([exe, *a], capture_output=True, text=True)  # noqa: E731
    r = run("inspect", str(tmp_path / "d"))
    assert r.returncode == 0 and "type string" in r.stdout and "timestamp[s, tz=UTC]" in r.stdout
    r = run("verify", str(tmp_path / "d"))
    assert r.returncode == 0, r.stdout + r.stderr
    r = run("cat", str(tmp_path / "d"), "0")
    assert r.returncode == 0 and "(string)" in r.stdout and "h\\xc3\\xa9llo" in r.stdout


def test_lists_of_lists_of_one_inner_length_become_fixed_inner_dimensions(tmp_path):
    rows = [[[1, 2, 3], [4, 5, 6]], [], [[7, 8, 9]]]
    t = pa.table({"p": pa.array(rows, pa.list_(pa.list_(pa.int16()))),
                  "q": pa.array([[[[1, 2]] * 2]] * 3, pa.list_(pa.list_(pa.list_(pa.int8()))))})
    stoker.write(tmp_path / "d", t)
    m = manifest(tmp_path / "d")
    assert (m["p"]["dtype"], m["p"]["shape"]) == ("i16", [-1, 3])
    assert m["q"]["shape"] == [-1, 2, 2]
    got = records(tmp_path / "d", shuffle="random")
    for r in range(3):
        np.testing.assert_array_equal(got[r]["p"], np.array(rows[r], np.int16).reshape(-1, 3))
        assert got[r]["q"].shape == (1, 2, 2)
    ragged = pa.table({"p": pa.array([[[1], [2, 3]]], pa.list_(pa.list_(pa.int16())))})
    with pytest.raises(ValueError, match="'p'.*lists of lists"):
        stoker.write(tmp_path / "r", ragged)


def test_a_mixture_gives_strings_too(tmp_path):
    stoker.write(tmp_path / "a", {"text": TEXT[:8], "i": np.arange(8)})
    stoker.write(tmp_path / "b", {"text": TEXT[8:16], "i": np.arange(8, 16)})
    seen = {}
    with stoker.Loader([str(tmp_path / "a"), str(tmp_path / "b")], 4, seed=1) as mix:
        for b in mix:
            assert isinstance(b["text"], list)
            for i, t in zip(b["i"].tolist(), b["text"]):
                seen[i] = t
    assert seen == {i: TEXT[i] for i in range(16)}


def test_dict_sources_take_arrow_pandas_and_polars_string_columns(tmp_path):
    pd = pytest.importorskip("pandas")
    cols = {"a": pa.array(TEXT), "b": pa.array(BLOBS, pa.large_binary()),
            "c": pd.Series(TEXT), "n": pd.Series(np.arange(len(TEXT)))}
    try:
        import polars as pl
        cols["d"] = pl.Series(TEXT)
    except ImportError:
        pass
    stoker.write(tmp_path / "d", cols)
    m = manifest(tmp_path / "d")
    assert m["b"]["type"] == "binary" and "type" not in m["n"]
    for r, rec in records(tmp_path / "d", shuffle="random").items():
        assert rec["a"] == rec["c"] == rec.get("d", TEXT[r]) == TEXT[r]
        assert rec["b"] == BLOBS[r] and rec["n"] == r


def test_grouped_rows_take_a_string_attribute_once_a_group(tmp_path):
    rng = np.random.default_rng(1)
    basin = rng.permutation(np.repeat(np.arange(4), 6))
    names = [f"río {b}" if b != 2 else "" for b in basin]  # (an empty name too)
    t = pa.table({"basin": basin, "day": rng.permutation(len(basin)).astype(np.int32),
                  "q": rng.standard_normal(len(basin)).astype("f4"),
                  "name": pa.array(names, pa.large_string())})
    stoker.write(tmp_path / "d", t, group_by="basin", order_by="day")
    m = manifest(tmp_path / "d")
    assert (m["name"]["dtype"], m["name"]["shape"], m["name"]["type"]) == ("bytes", [-1], "string")
    with stoker.Loader(tmp_path / "d", 5, window=3, shuffle="random") as ld:
        for b in ld:
            assert isinstance(b["name"], list) and len(b["name"]) == len(b["q"])
    got = records(tmp_path / "d")
    assert [got[r]["name"] for r in range(4)] == ["río 0", "río 1", "", "río 3"]
    with pytest.raises(ValueError, match="'name' is not constant within group 1"):
        bad = t.set_column(3, "name", pa.array([n + ("!" if i == list(basin).index(1) else "")
                                                for i, n in enumerate(names)]))
        stoker.write(tmp_path / "bad", bad, group_by="basin")
    with pytest.raises(ValueError, match="'name' holds strings.*one a group"):
        stoker.write(tmp_path / "none", t, group_by="basin", static=[])
