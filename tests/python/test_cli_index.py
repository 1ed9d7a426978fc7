"""`stoker index`: in-place indexes work with every command that opens a
dataset (inspect, cat, verify, read), and its usage errors are clear."""

import json
import os

import numpy as np
import pytest


@pytest.fixture
def npy_dir(tmp_path):
    d = tmp_path / "arrays"
    d.mkdir()
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(int(n), 3)).astype(np.float32) for n in (4, 9, 1, 6)]
    for i, a in enumerate(arrays):
        np.save(d / f"a{i}.npy", a)
    return d, arrays


def test_index_then_every_command(stoker, tmp_path, npy_dir):
    d, arrays = npy_dir
    idx = tmp_path / "a.idx"
    r = stoker.ok("index", d, "-o", idx)
    assert "indexed 4 records in 4 files" in r.stdout
    info = stoker.inspect(idx)
    assert info.records == 4
    for i, a in enumerate(arrays):
        rec = stoker.cat(idx, i)
        assert rec.shape == a.shape
        np.testing.assert_array_equal(rec.array(), a)
    v = stoker.ok("verify", idx)
    assert "4 records" in v.stdout or "4" in v.stdout
    out = stoker.ok("read", idx, "--batch", "2", "--shuffle", "random", "--json")
    doc = json.loads(out.stdout)
    assert doc["samples"] == 4


def test_verify_reports_a_changed_file(stoker, tmp_path, npy_dir):
    d, _ = npy_dir
    idx = tmp_path / "a.idx"
    stoker.ok("index", d, "-o", idx)
    ds = stoker.ok("verify", idx)
    with open(d / "a2.npy", "ab") as f:
        f.write(b"x")
    r = stoker("verify", idx)
    assert r.returncode != 0
    assert "a2.npy: changed since it was indexed" in r.stderr
    assert "re-run `stoker index`" in r.stderr
    r = stoker("read", idx, "--batch", "2")
    assert r.returncode != 0 and "a2.npy" in r.stderr


def test_paths_are_stored_relative_to_the_index(stoker, tmp_path, npy_dir):
    d, arrays = npy_dir
    stoker.ok("index", d, "-o", tmp_path / "a.idx")
    doc = json.loads((tmp_path / "a.idx").read_text())
    assert [f["path"] for f in doc["files"]] == [f"arrays/a{i}.npy" for i in range(4)]
    # The index and its files move together.
    moved = tmp_path / "moved"
    moved.mkdir()
    os.rename(tmp_path / "a.idx", moved / "a.idx")
    os.rename(d, moved / "arrays")
    np.testing.assert_array_equal(stoker.cat(moved / "a.idx", 1).array(), arrays[1])


@pytest.mark.parametrize("args,msg", [
    ([], "at least one PATH"),
    (["x"], "-o INDEX is required"),
    (["x", "-o", "y", "--from", "tiff"], "'tiff' is not npy, wav, hdf5, raw, image or audio"),
    (["x", "-o", "y", "--bogus"], "unknown option '--bogus'"),
    (["x", "-o"], "-o needs a path"),
])
def test_usage_errors(stoker, args, msg):
    r = stoker("index", *args)
    assert r.returncode == 2
    assert msg in r.stderr


def test_unknown_extension_and_empty_directory(stoker, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    r = stoker("index", tmp_path / "notes.txt", "-o", tmp_path / "x.idx")
    assert r.returncode != 0 and "cannot tell the format" in r.stderr
    (tmp_path / "empty").mkdir()
    r = stoker("index", tmp_path / "empty", "-o", tmp_path / "x.idx")
    assert r.returncode != 0 and "no .npy, .wav or HDF5 files found" in r.stderr
    assert not (tmp_path / "x.idx").exists()
