"""`stoker pack --split-axis0`: the rows of each array become the records."""

import numpy as np
import pytest

from stkcli import assert_same, save


def test_split_one_2d_array(stoker, tmp_path):
    a = (np.arange(5 * 3, dtype=np.float32) * 1.5 - 7).reshape(5, 3)
    f = save(tmp_path / "a.npy", a)
    ds = tmp_path / "ds"
    stoker.pack(f, ds, "--split-axis0")
    info = stoker.inspect(ds)
    assert info.records == 5
    assert info.fields == [("x", "f32", "[3]", "none")]
    for i in range(5):
        rec = stoker.cat(ds, i)
        assert rec.shape == (3,)
        assert_same(rec.array(), a[i])


def test_split_several_arrays_keeps_their_order(stoker, tmp_path):
    # Different numbers of rows, one row shape: records are a's rows, then
    # b's, then c's (directory order), and the record shape is fixed.
    rng = np.random.default_rng(1)
    arrays = {
        "a.npy": rng.integers(-2**40, 2**40, size=(4, 2, 3), dtype=np.int64),
        "b.npy": rng.integers(-2**40, 2**40, size=(2, 2, 3), dtype=np.int64),
        "c.npy": rng.integers(-2**40, 2**40, size=(3, 2, 3), dtype=np.int64),
    }
    for name in ("c.npy", "a.npy", "b.npy"):
        save(tmp_path / "in" / name, arrays[name])
    ds = tmp_path / "ds"
    stoker.pack(tmp_path / "in", ds, "--split-axis0")
    rows = np.concatenate([arrays[n] for n in ("a.npy", "b.npy", "c.npy")])
    info = stoker.inspect(ds)
    assert info.records == len(rows) == 9
    assert info.fields == [("x", "i64", "[2, 3]", "none")]
    for i, want in enumerate(rows):
        rec = stoker.cat(ds, i)
        assert rec.shape == (2, 3)
        assert_same(rec.array(), want)


def test_split_explicit_files_in_argument_order(stoker, tmp_path):
    a = save(tmp_path / "a.npy", np.array([[1, 2], [3, 4]], dtype=np.uint8))
    b = save(tmp_path / "b.npy", np.array([[5, 6]], dtype=np.uint8))
    ds = tmp_path / "ds"
    stoker.pack([b, a], ds, "--split-axis0")
    got = [stoker.cat(ds, i).array().tolist() for i in range(3)]
    assert got == [[5, 6], [1, 2], [3, 4]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.bool_])
def test_split_1d_array_gives_scalar_records(stoker, tmp_path, dtype):
    a = (np.arange(7) * 3 - 10).astype(dtype)
    f = save(tmp_path / "v.npy", a)
    ds = tmp_path / "ds"
    stoker.pack(f, ds, "--split-axis0")
    info = stoker.inspect(ds)
    assert info.records == 7
    assert info.fields[0][2] == "[]"
    for i in range(7):
        rec = stoker.cat(ds, i)
        assert rec.shape == ()
        assert len(rec.tokens) == 1
        assert_same(rec.array(), a[i])


def test_split_rows_of_a_4d_array_are_row_major(stoker, tmp_path):
    a = np.arange(3 * 2 * 4 * 5, dtype=np.float16).reshape(3, 2, 4, 5)
    f = save(tmp_path / "t.npy", a)
    ds = tmp_path / "ds"
    stoker.pack(f, ds, "--split-axis0")
    assert stoker.inspect(ds).fields == [("x", "f16", "[2, 4, 5]", "none")]
    for i in range(3):
        rec = stoker.cat(ds, i)
        assert rec.shape == (2, 4, 5)
        assert_same(rec.array(), a[i])


def test_split_zero_dim_array_is_refused(stoker, tmp_path):
    f = save(tmp_path / "scalar.npy", np.array(3.0, dtype=np.float32))
    ds = tmp_path / "ds"
    r = stoker("pack", "--from", "npy", f, "--split-axis0", "-o", ds)
    assert r.returncode == 2
    assert "scalar.npy" in r.stderr
    assert "--split-axis0" in r.stderr
    assert not ds.exists()


def test_split_arrays_with_different_row_shapes_are_refused(stoker, tmp_path):
    save(tmp_path / "in" / "a.npy", np.zeros((4, 3), np.float32))
    save(tmp_path / "in" / "b.npy", np.zeros((4, 2), np.float32))
    r = stoker("pack", "--from", "npy", tmp_path / "in", "--split-axis0", "-o", tmp_path / "ds")
    assert r.returncode == 2
    assert "a.npy" in r.stderr and "b.npy" in r.stderr
