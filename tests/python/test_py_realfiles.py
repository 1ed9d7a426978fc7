"""Files made the way users' pipelines make them (pandas, polars, pyarrow
datasets), packed with stoker.write and `stoker pack --from parquet`: every
value delivered equals the source's, or the input is refused with a message
saying what to do."""
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.parquet as pq
import pytest

import stoker

from test_py_arrow import records_of


def cli():
    build = os.environ.get("STOKER_BUILD", "build")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(build if os.path.isabs(build) else os.path.join(root, build), "stoker")


def basin_frame(basins, days=12, seed=3):
    """Rows of several basins, shuffled, as a pandas frame."""
    rng = np.random.default_rng(seed)
    n = len(basins) * days
    df = pd.DataFrame({
        "basin": np.repeat(basins, days),
        "date": pd.to_datetime("2000-01-01") + pd.to_timedelta(np.tile(np.arange(days), len(basins)), "D"),
        "prcp": rng.standard_normal(n).astype(np.float32),
        "q": rng.standard_normal(n),
    })
    return df.sample(frac=1, random_state=1).reset_index(drop=True)


def check_grouped(path, df, keys):
    """The dataset at path holds one record per key of `keys` (in that
    order), each with the key's rows sorted by date, values equal."""
    recs = records_of(path)
    assert len(recs) == len(keys)
    for r, k in zip(recs, keys):
        rows = df[df["basin"] == k].sort_values("date")
        got = bytes(r["basin"]).decode() if r["basin"].dtype == np.uint8 else r["basin"][0]
        assert got == k
        np.testing.assert_array_equal(r["prcp"], rows["prcp"].to_numpy())
        np.testing.assert_array_equal(r["q"], rows["q"].to_numpy())
        # Timestamps are packed as counts of their unit, whichever unit
        # the writing library chose (the field's type says which, and
        # NumPy output gives datetime64 of it): scale to nanoseconds to
        # compare.
        want = rows["date"].to_numpy().astype("datetime64[ns]").astype(np.int64)
        if r["date"].dtype.kind == "M":
            np.testing.assert_array_equal(r["date"].astype("datetime64[ns]").astype(np.int64),
                                          want)
            continue
        per_day = int(r["date"][1] - r["date"][0])
        assert per_day in (86_400, 86_400_000, 86_400_000_000, 86_400_000_000_000)
        np.testing.assert_array_equal(r["date"].astype(np.int64) * (86_400_000_000_000 // per_day),
                                      want)


# ---- 1. dictionary-encoded keys (a pandas Categorical) ------------------------------

def test_categorical_keys_in_per_basin_parquet_files(tmp_path):
    """Each file's dictionary holds only its own basin (index 0 in every
    file): packing must use the ids, never the indices."""
    basins = ["03010655", "01013500", "02011400", "01022500"]
    df = basin_frame(basins)
    df["basin"] = df["basin"].astype("category")
    src = tmp_path / "pq"
    src.mkdir()
    for b in basins:
        part = df[df["basin"] == b].copy()
        part["basin"] = part["basin"].cat.remove_unused_categories()
        part.to_parquet(src / f"{b}.parquet", index=False)
    assert pa.types.is_dictionary(pq.read_schema(src / f"{basins[0]}.parquet").field("basin").type)
    ds = pds.dataset(str(src), format="parquet")
    n = stoker.write(tmp_path / "py", ds.scanner().to_reader(),
                     group_by="basin", order_by="date")
    assert n == len(basins)
    plain = df.assign(basin=df["basin"].astype(str))
    check_grouped(tmp_path / "py", plain, sorted(basins))

    env = dict(os.environ, STOKER_PYTHON=sys.executable)
    r = subprocess.run([cli(), "pack", "--from", "parquet", str(src), "--group-by", "basin",
                        "--order-by", "date", "-o", str(tmp_path / "cli")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    check_grouped(tmp_path / "cli", plain, sorted(basins))


def test_categorical_keys_in_one_file_sort_by_value_not_by_code(tmp_path):
    basins = ["b3", "b1", "b2"]
    df = basin_frame(basins)
    # Categories listed in an order other than the values' own.
    df["basin"] = pd.Categorical(df["basin"], categories=["b3", "b1", "b2"])
    df.to_parquet(tmp_path / "one.parquet", index=False)
    t = pq.read_table(tmp_path / "one.parquet")
    assert pa.types.is_dictionary(t.schema.field("basin").type)
    stoker.write(tmp_path / "d", t, group_by="basin", order_by="date")
    check_grouped(tmp_path / "d", df.assign(basin=df["basin"].astype(str)), ["b1", "b2", "b3"])


def test_integer_categorical_key_and_dictionary_value_columns(tmp_path):
    """A dictionary of integers as the key, and dictionary-encoded numbers
    as a data column: values are decoded."""
    keys = pa.array([30, 10, 20, 10, 30, 20], pa.int64()).dictionary_encode()
    vals = pa.array([1.5, 2.5, 3.5, 4.5, 5.5, 6.5], pa.float64()).dictionary_encode()
    t = pa.table({"k": keys, "v": vals, "i": pa.array(range(6), pa.int32())})
    stoker.write(tmp_path / "d", t, group_by="k", order_by="i")
    recs = records_of(tmp_path / "d")
    assert [r["k"][0] for r in recs] == [10, 20, 30]
    np.testing.assert_array_equal(recs[0]["v"], [2.5, 4.5])
    np.testing.assert_array_equal(recs[1]["v"], [3.5, 6.5])
    np.testing.assert_array_equal(recs[2]["v"], [1.5, 5.5])
    # Row mode: each row's value, not its code.
    stoker.write(tmp_path / "rows", pa.table({"v": vals}))
    assert [r["v"][0] for r in records_of(tmp_path / "rows")] == [1.5, 2.5, 3.5, 4.5, 5.5, 6.5]


# ---- 2. strings from polars and pandas -----------------------------------------------

def test_polars_string_keys(tmp_path):
    """polars hands strings over as string views ("vu")."""
    basins = ["x-2", "x-10", "x-1"]
    df = basin_frame(basins)
    frame = pl.from_pandas(df.assign(basin=df["basin"].astype(str)))
    assert frame.__arrow_c_stream__() is not None
    stoker.write(tmp_path / "pl", frame, group_by="basin", order_by="date")
    check_grouped(tmp_path / "pl", df, sorted(basins))
    # Long ids (over 12 bytes) live outside the view itself.
    long_ids = ["basin-with-a-long-identifier-%d" % i for i in range(3)]
    df2 = basin_frame(long_ids)
    stoker.write(tmp_path / "pl2", pl.from_pandas(df2), group_by="basin", order_by="date")
    check_grouped(tmp_path / "pl2", df2, sorted(long_ids))
    # polars Categorical keys.
    cat = pl.from_pandas(df2).with_columns(pl.col("basin").cast(pl.Categorical))
    stoker.write(tmp_path / "pl3", cat, group_by="basin", order_by="date")
    check_grouped(tmp_path / "pl3", df2, sorted(long_ids))


def test_pandas_string_keys(tmp_path):
    basins = ["b-7", "b-3"]
    df = basin_frame(basins)
    df.to_parquet(tmp_path / "s.parquet", index=False)
    stoker.write(tmp_path / "d", pq.read_table(tmp_path / "s.parquet"), group_by="basin",
                 order_by="date")
    check_grouped(tmp_path / "d", df, sorted(basins))


# ---- 3. unsigned 64-bit keys -----------------------------------------------------------

def test_uint64_keys_keep_their_values_and_order(tmp_path):
    keys = np.array([2**64 - 1, 5, 2**63, 2**63 - 1], dtype=np.uint64)
    t = pa.table({"k": pa.array(np.repeat(keys, 2)), "v": np.arange(8, dtype=np.float32)})
    stoker.write(tmp_path / "d", t, group_by="k")
    recs = records_of(tmp_path / "d")
    got = [int(r["k"][0]) for r in recs]
    assert got == sorted(int(k) for k in keys)
    assert recs[0]["k"].dtype == np.uint64
    for r in recs:
        i = int(np.flatnonzero(keys == np.uint64(int(r["k"][0])))[0])
        np.testing.assert_array_equal(r["v"], [2 * i, 2 * i + 1])


# ---- the Arrow types current pyarrow and polars emit -------------------------------------

N = 7
RNG = np.random.default_rng(5)
F32 = RNG.standard_normal(N).astype(np.float32)
LISTS = [[float(j) for j in range(i % 4)] for i in range(N)]


ACCEPTED = [
    ("bool", pa.array([True, False] * 3 + [True]), lambda a: np.array(a.to_pylist(), np.uint8)),
    ("int8", pa.array(range(-3, 4), pa.int8()), None),
    ("uint16", pa.array(range(N), pa.uint16()), None),
    ("uint64", pa.array([2**64 - 1 - i for i in range(N)], pa.uint64()), None),
    ("float16", pa.array(F32.astype(np.float16)), None),
    ("float32", pa.array(F32), None),
    ("date32", pa.array(np.arange(N), pa.int32()).cast(pa.date32()), lambda a: a.cast(pa.int32()).to_numpy()),
    ("date64", pa.array(np.arange(N) * 86_400_000, pa.int64()).cast(pa.date64()),
     lambda a: a.cast(pa.int64()).to_numpy()),
    ("time32[ms]", pa.array(np.arange(N), pa.int32()).cast(pa.time32("ms")),
     lambda a: a.cast(pa.int32()).to_numpy()),
    ("time64[ns]", pa.array(np.arange(N), pa.int64()).cast(pa.time64("ns")),
     lambda a: a.cast(pa.int64()).to_numpy()),
    ("timestamp[s]", pa.array(np.arange(N) * 1000, pa.int64()).cast(pa.timestamp("s")),
     lambda a: a.cast(pa.int64()).to_numpy()),
    ("timestamp[ms, UTC]", pa.array(np.arange(N), pa.int64()).cast(pa.timestamp("ms", "UTC")),
     lambda a: a.cast(pa.int64()).to_numpy()),
    ("timestamp[us, Europe/Paris]",
     pa.array(np.arange(N), pa.int64()).cast(pa.timestamp("us", "Europe/Paris")),
     lambda a: a.cast(pa.int64()).to_numpy()),
    ("timestamp[ns]", pa.array(np.arange(N), pa.int64()).cast(pa.timestamp("ns")),
     lambda a: a.cast(pa.int64()).to_numpy()),
    ("duration[ms]", pa.array(np.arange(N), pa.int64()).cast(pa.duration("ms")),
     lambda a: a.cast(pa.int64()).to_numpy()),
    ("dictionary<float32>", pa.array(F32[[0, 1, 0, 2, 1, 0, 2]]).dictionary_encode(),
     lambda a: a.dictionary_decode().to_numpy()),
    ("fixed_size_list<float64, 3>",
     pa.FixedSizeListArray.from_arrays(pa.array(np.arange(3 * N, dtype=np.float64)), 3),
     lambda a: np.arange(3 * N, dtype=np.float64).reshape(N, 3)),
    ("list<float32>", pa.array(LISTS, pa.list_(pa.float32())), None),
    ("large_list<float32>", pa.array(LISTS, pa.large_list(pa.float32())), None),
    ("list_view<float32>", pa.array(LISTS, pa.list_view(pa.float32())), None),
    ("large_list_view<float32>", pa.array(LISTS, pa.large_list_view(pa.float32())), None),
]


@pytest.mark.parametrize("name, arr, expect", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_every_accepted_arrow_type_packs_its_values(tmp_path, name, arr, expect):
    t = pa.table({"c": arr})
    assert stoker.write(tmp_path / "d", t) == N
    recs = records_of(tmp_path / "d")
    if name.startswith(("list", "large_list")):
        for r, want in zip(recs, LISTS):
            np.testing.assert_array_equal(r["c"], np.array(want, np.float32))
        return
    want = expect(arr) if expect else arr.to_numpy(zero_copy_only=False)
    got = np.stack([r["c"][0] for r in recs])
    if got.dtype.kind in "Mm":
        # Dates, times, timestamps and durations come as datetime64 /
        # timedelta64 of the unit stored (the field's type): the counts.
        got, want = got.astype(np.int64), np.asarray(want).astype(np.int64)
    assert got.dtype.itemsize == np.asarray(want).dtype.itemsize
    np.testing.assert_array_equal(got, want)


# (Strings and binaries of every layout are fields: test_strings.py.)
REFUSED = [
    ("decimal128", pa.array([1] * N, pa.decimal128(10, 2)), ["decimal", "float64"]),
    ("null", pa.nulls(N), ["only nulls"]),
    ("struct", pa.array([{"a": 1}] * N), ["nested", "flatten"]),
    ("list<string>", pa.array([["a"]] * N), ["list", "'u'"]),
    ("month_day_nano_interval", pa.array([(1, 2, 3)] * N, pa.month_day_nano_interval()),
     ["interval"]),
]


@pytest.mark.parametrize("name, arr, words", REFUSED, ids=[a[0] for a in REFUSED])
def test_unpackable_arrow_types_are_refused_with_what_to_do(tmp_path, name, arr, words):
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "d", pa.table({"c": arr}))
    msg = str(ei.value)
    assert "'c'" in msg
    for w in words:
        assert w in msg, msg
    assert not (tmp_path / "d" / "manifest.json").exists()


@pytest.mark.parametrize("key_type", [pa.string(), pa.large_string(), pa.string_view(),
                                      pa.binary(), pa.large_binary(), pa.binary_view()])
def test_string_and_binary_keys_of_every_layout(tmp_path, key_type):
    ids = ["k2", "k10", "a-much-longer-key-than-twelve-bytes", "k1"]
    keys = pa.array([i.encode() if pa.types.is_binary(key_type) or pa.types.is_large_binary(key_type)
                     or key_type == pa.binary_view() else i for i in ids * 2]).cast(key_type)
    t = pa.table({"k": keys, "v": np.arange(8, dtype=np.float32)})
    stoker.write(tmp_path / "d", t, group_by="k")
    recs = records_of(tmp_path / "d")
    assert [bytes(r["k"]).decode() for r in recs] == sorted(ids)
    for r in recs:
        i = ids.index(bytes(r["k"]).decode())
        np.testing.assert_array_equal(r["v"], [i, i + 4])


def test_stacked_columns_scalars_and_lists(tmp_path):
    """fields={"x": [...]} stacks scalar columns into a vector per record,
    and list columns (polars and pyarrow lists of every layout) into
    [rows, columns] per record."""
    t = pa.table({"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.0]})
    stoker.write(tmp_path / "s", t, fields={"x": ["a", "b"]})
    recs = records_of(tmp_path / "s")
    np.testing.assert_array_equal(np.stack([r["x"][0] for r in recs]), [[1, 4], [2, 5], [3, 6]])
    b_lists = [[10.0 * v for v in row] for row in LISTS]
    for mk in (lambda v: pa.array(v, pa.list_(pa.float32())),
               lambda v: pa.array(v, pa.large_list(pa.float32())),
               lambda v: pa.array(v, pa.list_view(pa.float32()))):
        t = pa.table({"a": mk(LISTS), "b": mk(b_lists)})
        for src in (t, pl.from_arrow(t) if not pa.types.is_list_view(t["a"].type) else t):
            stoker.write(tmp_path / "l", src, fields={"x": ["a", "b"]}, overwrite=True)
            recs = records_of(tmp_path / "l")
            for r, row, brow in zip(recs, LISTS, b_lists):
                np.testing.assert_array_equal(r["x"], np.array([row, brow], np.float32).T
                                              .reshape(-1, 2))
    t = pa.table({"a": pa.array([[1.0, 2.0]], pa.list_(pa.float32())),
                  "b": pa.array([[1.0]], pa.list_(pa.float32()))})
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "bad", t, fields={"x": ["a", "b"]})
    assert "one length" in str(ei.value) and "row 0" in str(ei.value)
    t = pa.table({"a": pa.array([[1.0]], pa.list_(pa.float32())), "b": [1.0]})
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "bad2", t, fields={"x": ["a", "b"]})
    assert "cannot be stacked" in str(ei.value)


# ---- 4. per-record statics ---------------------------------------------------------------

def basins_with_statics(n_basins=5, days=40, seed=2):
    """A long table the way it comes: each row a day, the basin's static
    attributes repeated on every row."""
    rng = np.random.default_rng(seed)
    ids = [f"0{1000 + 7 * i}" for i in range(n_basins)]
    area = rng.uniform(10, 1000, n_basins)
    elev = rng.uniform(0, 3000, n_basins).astype(np.float32)
    rows = []
    for b in range(n_basins):
        for d in range(days):
            rows.append((ids[b], d, float(rng.standard_normal()), area[b], elev[b]))
    rows = [rows[i] for i in rng.permutation(len(rows))]
    df = pd.DataFrame(rows, columns=["basin", "day", "prcp", "area", "elev"])
    df["elev"] = df["elev"].astype(np.float32)
    return df, ids, area, elev


@pytest.mark.parametrize("maker", ["pyarrow", "polars", "pandas-parquet"])
def test_constant_columns_become_per_record_fields(tmp_path, maker):
    df, ids, area, elev = basins_with_statics()
    if maker == "pyarrow":
        src = pa.Table.from_pandas(df, preserve_index=False)
    elif maker == "polars":
        src = pl.from_pandas(df)
    else:
        df.to_parquet(tmp_path / "t.parquet", index=False)
        src = pq.read_table(tmp_path / "t.parquet")
    stoker.write(tmp_path / "d", src, group_by="basin", order_by="day",
                 fields={"x": ["prcp"], "attrs": ["area"],
                         "elev": ["elev"], "day": ["day"]})
    recs = records_of(tmp_path / "d")
    order = sorted(range(len(ids)), key=lambda i: ids[i])
    for r, i in zip(recs, order):
        assert bytes(r["basin"]).decode() == ids[i]
        assert r["attrs"].shape == (1,) and r["attrs"][0] == area[i]   # one value, not 40
        assert r["elev"].shape == (1,) and r["elev"][0] == elev[i]
        assert r["x"].shape == (40,)
        np.testing.assert_array_equal(r["day"], np.arange(40))

    # A windowed loader: time fields windowed, statics and the string id
    # once per sample, with no fields= at all.
    with stoker.Loader(tmp_path / "d", batch_size=8, window=10, shuffle="random") as ld:
        n = 0
        for b in ld:
            assert b["x"].shape == (len(b["x"]), 10)
            assert b["attrs"].shape == (len(b["x"]),)
            assert b["elev"].shape == (len(b["x"]),)
            off = b["basin_offsets"]
            for j in range(len(b["x"])):
                i = ids.index(bytes(b["basin"][off[j]:off[j + 1]]).decode())
                assert b["attrs"][j] == area[i] and b["elev"][j] == elev[i]
                start = int(b["day"][j, 0])
                sub = df[df["basin"] == ids[i]].sort_values("day")
                np.testing.assert_array_equal(b["x"][j], sub["prcp"].to_numpy()[start:start + 10])
            n += len(b["x"])
        assert n == len(ids) * (40 - 10 + 1)


def test_declared_and_refused_statics(tmp_path):
    df, ids, area, elev = basins_with_statics(n_basins=3, days=6)
    t = pa.Table.from_pandas(df, preserve_index=False)
    # static=[] keeps every field's rows.
    stoker.write(tmp_path / "none", t, group_by="basin", order_by="day", static=[])
    r = records_of(tmp_path / "none")[0]
    assert r["area"].shape == (6,)
    # Exactly the fields named.
    stoker.write(tmp_path / "named", t, group_by="basin", order_by="day", static=["elev"])
    r = records_of(tmp_path / "named")[0]
    assert r["elev"].shape == (1,) and r["area"].shape == (6,)
    # A field named static that varies within a group is refused, naming it.
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "bad", t, group_by="basin", order_by="day", static=["prcp"])
    assert "'prcp'" in str(ei.value) and "not constant" in str(ei.value) and "'0" in str(ei.value)
    assert not (tmp_path / "bad" / "manifest.json").exists()
    with pytest.raises(ValueError):
        stoker.write(tmp_path / "bad2", t, static=["elev"])  # needs group_by


# ---- 6. HDF5 files as the current h5py writes them --------------------------------------

@pytest.mark.parametrize("libver", ["earliest", "v110", "v114", "latest"])
@pytest.mark.parametrize("filters", [{}, {"compression": "gzip"}, {"shuffle": True},
                                     {"fletcher32": True},
                                     {"compression": "gzip", "shuffle": True, "fletcher32": True}])
def test_h5py_files_index_or_say_why(tmp_path, libver, filters):
    h5py = pytest.importorskip("h5py")
    data = np.arange(4000, dtype=np.float32).reshape(400, 10)
    p = tmp_path / "f.h5"
    with h5py.File(p, "w", libver=libver) as f:
        f.create_dataset("d", data=data, chunks=(40, 10), **filters)
    try:
        stoker.index(p, tmp_path / "idx", dataset="d")
    except (stoker.StokerError, ValueError, OSError) as e:
        # Refused: the message must be true (the dataset exists) and say
        # what to do.
        msg = e.args[-1] if isinstance(e, stoker.StokerError) else str(e)
        assert "no dataset" not in msg, msg
        assert "'d' is there" in msg and "libver" in msg and "stoker.write" in msg, msg
        assert libver == "latest", msg   # older formats are read
        return
    with stoker.Loader(tmp_path / "idx", batch_size=400, shuffle="sequential") as ld:
        (b,) = list(ld)
    np.testing.assert_array_equal(b["x"] if "x" in b else next(iter(b.values())), data)


# ---- 8. bit vectors stored as '0'/'1' strings (report 002) -------------------------------

def test_bit_strings_from_pandas_and_hdf5_become_bits(tmp_path):
    h5py = pytest.importorskip("h5py")
    rng = np.random.default_rng(9)
    want = rng.random((50, 128)) < 0.3
    strings = ["".join("1" if x else "0" for x in row) for row in want]
    df = pd.DataFrame({"fp": strings, "y": rng.standard_normal(50)})
    with h5py.File(tmp_path / "fp.h5", "w") as f:
        f.create_dataset("fingerprints", data=np.array(strings, dtype="S128"))
    with h5py.File(tmp_path / "fp.h5") as f:
        from_h5 = f["fingerprints"][:]
    assert from_h5.dtype.kind == "S"
    for name, src in (("pandas", df["fp"]), ("hdf5", from_h5),
                      ("arrow", pa.array(strings)), ("list", strings)):
        u8 = stoker.bits(src)
        assert u8.shape == (50, 128) and u8.dtype == np.uint8
        np.testing.assert_array_equal(u8, want.astype(np.uint8), err_msg=name)
    np.testing.assert_array_equal(stoker.bits(strings, packed=True), np.packbits(want, axis=1))
    assert stoker.bits(strings, dtype="f4").dtype == np.float32
    stoker.write(tmp_path / "d", {"fp": stoker.bits(df["fp"], packed=True),
                                  "y": df["y"].to_numpy()})
    with stoker.Loader(tmp_path / "d", batch_size=50, shuffle="sequential") as ld:
        (b,) = list(ld)
    np.testing.assert_array_equal(np.unpackbits(b["fp"], axis=1), want.astype(np.uint8))


def test_bit_strings_that_are_not_say_which_row(tmp_path):
    with pytest.raises(ValueError, match=r"row 1 holds '2' at position 2"):
        stoker.bits(["0101", "0121"])
    with pytest.raises(ValueError, match=r"row 2 is shorter than the others \(3 characters"):
        stoker.bits(["0101", "0110", "011"])
    with pytest.raises(ValueError, match=r"row 1 is shorter"):
        stoker.bits(np.array([b"0101", b"01"], dtype="S4"))
    with pytest.raises(ValueError, match="stoker.bits"):
        # (A 1-d array of strings is a field of one string a record; 2-d
        # is not, and the hint names stoker.bits.)
        stoker.write(tmp_path / "never", {"fp": np.array([[b"0101"]], dtype="S4")})
    assert not (tmp_path / "never").exists()


def test_installed_cli_finds_its_python_outside_the_environment(tmp_path):
    """The `stoker` pip installed beside this interpreter hands `pack --from
    parquet` to it, even with a PATH that leads to another python3."""
    exe = os.path.join(os.path.dirname(sys.executable), "stoker")
    if not os.path.exists(exe):
        pytest.skip("no stoker program beside this interpreter")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run([exe, "pack", "--from", "parquet", "--help"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "--group-by" in r.stdout
    pq.write_table(pa.table({"k": [1, 1, 2], "v": [1.0, 2.0, 3.0]}), tmp_path / "t.parquet")
    r = subprocess.run([exe, "pack", "--from", "parquet", str(tmp_path / "t.parquet"),
                        "--group-by", "k", "-o", str(tmp_path / "d")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert len(records_of(tmp_path / "d")) == 2


# ---- 5. a folder of audio in several encodings, as float32 ------------------------------

SUBTYPES = ["PCM_16", "PCM_24", "PCM_U8", "FLOAT", "PCM_32", "DOUBLE"]


@pytest.fixture
def mixed_audio(tmp_path):
    sf = pytest.importorskip("soundfile")
    rng = np.random.default_rng(12)
    d = tmp_path / "clips"
    d.mkdir()
    want = {}
    for i, sub in enumerate(SUBTYPES * 2):
        n = int(rng.integers(3000, 9000))
        x = np.clip(rng.standard_normal((n, 2)) * 0.3, -1, 0.999).astype(np.float64)
        p = d / f"clip{i:02d}_{sub.lower()}.wav"
        sf.write(p, x, 16000, subtype=sub)
        want[p.name] = sf.read(p, dtype="float32")[0]   # what soundfile delivers
    return d, want


@pytest.mark.parametrize("backend", ["auto", "mmap", "pool"])
def test_mixed_encodings_index_as_float32_equal_to_soundfile(tmp_path, mixed_audio, backend):
    d, want = mixed_audio
    stoker.index(d, tmp_path / "a.idx", float32=True)
    names = sorted(want)
    with stoker.Loader(tmp_path / "a.idx", batch_size=1, shuffle="sequential",
                       backend=backend) as ld:
        recs = [np.array(b[next(k for k in b if not k.endswith("_offsets"))]) for b in ld]
    assert len(recs) == len(names)
    for name, r in zip(names, recs):
        assert r.dtype == np.float32
        np.testing.assert_array_equal(r, want[name], err_msg=name)
    # Windows in random order, each equal to its clip's rows.
    seen = 0
    with stoker.Loader(tmp_path / "a.idx", batch_size=16, window=1000, stride=500,
                       shuffle="random", backend=backend) as ld:
        for b in ld:
            (key,) = [k for k in b if b[k].ndim == 3]
            x = b[key]
            assert x.shape[1:] == (1000, 2) and x.dtype == np.float32
            for w in x:
                hits = [n for n in names if any(
                    np.array_equal(w, want[n][t:t + 1000]) for t in range(0, len(want[n]) - 999, 500))]
                assert hits, "a window equal to no clip's rows"
                seen += 1
    assert seen == sum((len(v) - 1000) // 500 + 1 for v in want.values())


def test_mixed_encodings_without_float32_say_how(tmp_path, mixed_audio):
    d, _ = mixed_audio
    with pytest.raises(stoker.StokerError) as ei:
        stoker.index(d, tmp_path / "a.idx")
    assert "float32=True" in str(ei.value)


# ---- smaller things ---------------------------------------------------------------------

def test_folder_order_is_the_byte_order_of_full_paths(tmp_path):
    """site0.npy before site0/a.npy, as sorted() of the paths gives, in the
    index and in `stoker pack --from npy` alike."""
    root = tmp_path / "data"
    (root / "site0").mkdir(parents=True)
    (root / "site0" / "b").mkdir()
    files = {"site0.npy": 1, "site0/a.npy": 2, "site0/b/c.npy": 3, "site0-x.npy": 4,
             "a.npy": 5, "site1.npy": 6}
    for name, v in files.items():
        np.save(root / name, np.full(3, v, np.int32))
    want = [files[os.path.relpath(p, root)] for p in sorted(str(p) for p in root.rglob("*.npy"))]
    stoker.index(root, tmp_path / "i.idx")
    with stoker.Loader(tmp_path / "i.idx", batch_size=1, shuffle="sequential") as ld:
        assert [int(np.array(b["data"]).ravel()[0]) for b in ld] == want
    r = subprocess.run([cli(), "pack", "--from", "npy", str(root), "-o", str(tmp_path / "p")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = [int(np.array(next(v for k, v in rec.items() if not k.endswith("_offsets"))).ravel()[0])
           for rec in records_of(tmp_path / "p")]
    assert got == want


def test_index_is_named_as_such_by_inspect_and_verify(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(10, dtype=np.float32))
    stoker.index(tmp_path / "a.npy", tmp_path / "a.idx")
    ins = subprocess.run([cli(), "inspect", str(tmp_path / "a.idx")], capture_output=True,
                         text=True)
    assert ins.returncode == 0, ins.stderr
    assert "in-place index of npy files" in ins.stdout and "dataset  ." not in ins.stdout
    ver = subprocess.run([cli(), "verify", str(tmp_path / "a.idx")], capture_output=True,
                         text=True)
    assert ver.returncode == 0, ver.stderr
    assert "is intact" not in ver.stdout and "no checksums" in ver.stdout
