"""`stoker pack --from npy`, one record per file, read back with `stoker cat`."""

import random

import numpy as np
import pytest

from stkcli import assert_same, save


def test_directory_input_is_recursive_and_sorted(stoker, tmp_path):
    src = tmp_path / "in"
    # The order stoker must produce: each directory's entries sorted by name,
    # subdirectories expanded where they sort.
    want_order = ["a.npy", "a2/x.npy", "b.npy", "sub/c.npy", "sub/deeper/a.npy", "z.npy"]
    arrays = {
        name: np.arange(6, dtype=np.float32).reshape(2, 3) + 100 * k
        for k, name in enumerate(want_order)
    }
    # Create them in a scrambled order so that directory order is not sorted.
    created = list(want_order)
    random.Random(7).shuffle(created)
    for name in created:
        save(src / name, arrays[name])
    (src / "notes.txt").write_text("not an array\n")
    (src / "sub" / "data.bin").write_bytes(b"\x93NUMPY junk")

    ds = tmp_path / "ds"
    stoker.pack(src, ds)
    info = stoker.inspect(ds)
    assert info.records == len(want_order)
    assert info.fields == [("x", "f32", "[2, 3]", "none")]
    for i, name in enumerate(want_order):
        rec = stoker.cat(ds, i)
        assert rec.index == i
        assert rec.field == "x"
        assert_same(rec.array(), arrays[name])


def test_explicit_files_keep_argument_order(stoker, tmp_path):
    a = save(tmp_path / "a.npy", np.full(4, 1, np.int64))
    b = save(tmp_path / "b.npy", np.full(4, 2, np.int64))
    ds = tmp_path / "ds"
    stoker.pack([b, a], ds)
    recs = stoker.all_records(ds)
    assert [r.array()[0] for r in recs] == [2, 1]


def test_pack_prints_a_summary_unless_quiet(stoker, tmp_path):
    a = save(tmp_path / "a.npy", np.zeros(3, np.float32))
    r = stoker.ok("pack", "--from", "npy", a, "-o", tmp_path / "ds1")
    assert "packed 1 records" in r.stdout
    r = stoker.ok("pack", "--from", "npy", a, "-o", tmp_path / "ds2", "-q")
    assert r.stdout == ""


def test_same_shapes_give_a_fixed_shape(stoker, tmp_path):
    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4) * (k + 1) for k in range(4)]
    for k, a in enumerate(arrays):
        save(tmp_path / "in" / f"{k}.npy", a)
    ds = tmp_path / "ds"
    stoker.pack(tmp_path / "in", ds)
    info = stoker.inspect(ds)
    assert info.fields == [("x", "f32", "[3, 4]", "none")]
    assert "*" not in info.fields[0][2]
    for k, a in enumerate(arrays):
        rec = stoker.cat(ds, k)
        assert rec.shape == (3, 4)
        assert_same(rec.array(), a)


@pytest.mark.parametrize(
    "shapes, want",
    [
        ([(2, 3), (5, 3), (1, 3)], "[*, 3]"),
        ([(4,), (7,), (1,)], "[*]"),
        ([(2, 2, 2), (3, 2, 2), (0, 2, 2)], "[*, 2, 2]"),
    ],
)
def test_differing_first_dims_are_ragged(stoker, tmp_path, shapes, want):
    arrays = []
    for k, shape in enumerate(shapes):
        a = (np.arange(int(np.prod(shape)), dtype=np.float32) + 1000 * k).reshape(shape)
        arrays.append(a)
        save(tmp_path / "in" / f"f{k}.npy", a)
    ds = tmp_path / "ds"
    stoker.pack(tmp_path / "in", ds)
    info = stoker.inspect(ds)
    assert info.records == len(shapes)
    assert info.fields == [("x", "f32", want, "none")]
    for k, a in enumerate(arrays):
        rec = stoker.cat(ds, k)
        assert rec.shape == a.shape
        assert_same(rec.array(), a)


def test_ragged_flag_forces_a_ragged_first_dim(stoker, tmp_path):
    arrays = [np.arange(6, dtype=np.int8).reshape(2, 3) - k for k in range(3)]
    for k, a in enumerate(arrays):
        save(tmp_path / "in" / f"f{k}.npy", a)
    fixed, ragged = tmp_path / "fixed", tmp_path / "ragged"
    stoker.pack(tmp_path / "in", fixed)
    stoker.pack(tmp_path / "in", ragged, "--ragged")
    assert stoker.inspect(fixed).fields == [("x", "i8", "[2, 3]", "none")]
    assert stoker.inspect(ragged).fields == [("x", "i8", "[*, 3]", "none")]
    for k, a in enumerate(arrays):
        assert_same(stoker.cat(ragged, k).array(), a)


def test_zero_dim_arrays_give_scalar_records(stoker, tmp_path):
    vals = [np.float32(1.5), np.float32(-2.25), np.float32(3e-7)]
    for k, v in enumerate(vals):
        save(tmp_path / "in" / f"s{k}.npy", np.array(v))
    ds = tmp_path / "ds"
    stoker.pack(tmp_path / "in", ds)
    assert stoker.inspect(ds).fields == [("x", "f32", "[]", "none")]
    for k, v in enumerate(vals):
        rec = stoker.cat(ds, k)
        assert rec.shape == ()
        assert_same(rec.array(), np.array(v))


# Values chosen to catch lost precision, sign or range in the round trip.
# f32 values print with %.9g, which round-trips every f32 exactly; f64 values
# are ones whose shortest form has at most 9 significant digits, so %.9g
# round-trips them too (and 1e300 would not survive a detour through f32).
DTYPE_VALUES = {
    "float32": ("f32", np.array(
        [0.1, -1.0 / 3, 3.4028235e38, 1.17549435e-38, 1.4e-45, 16777217.0, -0.0,
         np.inf, -np.inf, np.nan, 123456.789, 2.0 ** -20], dtype=np.float32)),
    "float64": ("f64", np.array(
        [0.5, -1.25, 1e300, -2.5e-300, 12345.675, 0.1, 1e-7, np.inf, np.nan, 123456789.0],
        dtype=np.float64)),
    "float16": ("f16", np.array(
        [0.0, 1.5, -2.25, 65504.0, -65504.0, 6.1035156e-05, 5.9604645e-08, 0.1, 1.0 / 3,
         np.inf, np.nan, 1000.5], dtype=np.float16)),
    "int8": ("i8", np.array([-128, -1, 0, 1, 127, 42, -77, 5], dtype=np.int8)),
    "int64": ("i64", np.array(
        [-(2 ** 63), 2 ** 63 - 1, 2 ** 53 + 1, -12345678901234567, 0, 1, -1, 9007199254740993],
        dtype=np.int64)),
    "uint8": ("u8", np.array([0, 1, 127, 128, 200, 255, 17, 99], dtype=np.uint8)),
    "bool": ("u8", np.array([True, False, False, True, True, False, True, True], dtype=np.bool_)),
}


@pytest.mark.parametrize("npdtype", list(DTYPE_VALUES))
def test_dtypes_round_trip(stoker, tmp_path, npdtype):
    name, vals = DTYPE_VALUES[npdtype]
    # Three files of shape (2, n/2): the values, reversed, and rotated.
    arrays = [v.reshape(2, -1) for v in (vals, vals[::-1].copy(), np.roll(vals, 3))]
    for k, a in enumerate(arrays):
        save(tmp_path / "in" / f"f{k}.npy", a)
    ds = tmp_path / "ds"
    stoker.pack(tmp_path / "in", ds)
    info = stoker.inspect(ds)
    assert info.records == 3
    assert info.fields == [("x", name, f"[2, {len(vals) // 2}]", "none")]
    for k, a in enumerate(arrays):
        rec = stoker.cat(ds, k)
        assert rec.dtype == name
        got = rec.array()
        assert_same(got, a)
        if npdtype.startswith("float"):
            # Exact to the bit (so -0.0 stays -0.0), NaN aside.
            nan = np.isnan(a)
            bits = f"u{a.itemsize}"
            assert np.array_equal(got[~nan].view(bits), a[~nan].view(bits))
            assert np.array_equal(np.isnan(got), nan)
    assert stoker.ok("verify", ds).returncode == 0
