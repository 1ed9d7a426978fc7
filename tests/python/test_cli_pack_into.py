"""Where a pack may write: a new or empty directory, or over a stoker
dataset (--force / overwrite=True). A directory holding anything else (a
user's own manifest.json, the input files themselves) is refused, with and
without --force, naming it and what is in it, and is left exactly as it was:
not even a lock file is added."""
import os

import numpy as np
import pytest

import stoker


def listing(d):
    return sorted(os.listdir(d))


def pack(stoker, inputs, out, *extra):
    return stoker("pack", "--from", "npy", *map(str, inputs), "-o", str(out), "-q", *extra)


def write(path, **kw):
    try:
        stoker.write(path, {"x": np.zeros((3, 2), np.float32)}, **kw)
    except stoker.StokerError as e:
        return str(e)
    return None


@pytest.mark.parametrize("force", [False, True])
def test_a_users_manifest_is_not_called_a_dataset_and_nothing_is_left(stoker, tmp_path, force):
    ds = tmp_path / "mine"
    ds.mkdir()
    (ds / "manifest.json").write_text('{"my": "own manifest"}\n')
    np.save(tmp_path / "a.npy", np.zeros((2, 3), np.float32))
    r = pack(stoker, [tmp_path / "a.npy"], ds, *(["--force"] if force else []))
    assert r.returncode != 0
    msg = r.stderr
    assert "already exists" not in msg and "pass --force" not in msg, msg
    assert "not a stoker dataset" in msg and "manifest.json" in msg, msg
    assert "not a stoker manifest" in msg and "will not touch" in msg, msg
    assert listing(ds) == ["manifest.json"]
    assert (ds / "manifest.json").read_text() == '{"my": "own manifest"}\n'
    # The Python writer says the same and leaves the same.
    msg = write(ds, overwrite=force)
    assert msg and "not a stoker dataset" in msg and "not a stoker manifest" in msg, msg
    assert listing(ds) == ["manifest.json"]


@pytest.mark.parametrize("force", [False, True])
def test_the_input_directory_is_refused_and_left_as_it_was(stoker, tmp_path, force):
    src = tmp_path / "clips"
    src.mkdir()
    for i in range(3):
        np.save(src / f"c{i}.npy", np.full((4,), i, np.float32))
    (src / "notes.txt").write_text("mine\n")
    before = {n: (src / n).read_bytes() for n in listing(src)}
    r = pack(stoker, [src], src, *(["--force"] if force else []))
    assert r.returncode != 0
    assert str(src) in r.stderr and "not a stoker dataset" in r.stderr, r.stderr
    assert "c0.npy" in r.stderr and "notes.txt" in r.stderr, r.stderr
    assert "4 files" in r.stderr, r.stderr
    assert {n: (src / n).read_bytes() for n in listing(src)} == before
    msg = write(src, overwrite=force)
    assert msg and "not a stoker dataset" in msg and "c0.npy" in msg, msg
    assert {n: (src / n).read_bytes() for n in listing(src)} == before


def test_a_subdirectory_counts_as_something_else(stoker, tmp_path):
    ds = tmp_path / "out"
    (ds / "sub").mkdir(parents=True)
    np.save(tmp_path / "a.npy", np.zeros(3, np.float32))
    r = pack(stoker, [tmp_path / "a.npy"], ds, "--force")
    assert r.returncode != 0 and "sub/" in r.stderr, r.stderr
    assert listing(ds) == ["sub"]


def test_new_empty_and_stoker_directories_are_still_written(stoker, tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((2, 3), np.float32))
    new = tmp_path / "new" / "deeper"
    assert pack(stoker, [tmp_path / "a.npy"], new).returncode == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert pack(stoker, [tmp_path / "a.npy"], empty).returncode == 0
    # A dataset: refused without --force (it is one), replaced with it.
    r = pack(stoker, [tmp_path / "a.npy"], empty)
    assert r.returncode != 0 and "a dataset already exists" in r.stderr, r.stderr
    assert pack(stoker, [tmp_path / "a.npy"], empty, "--force").returncode == 0
    assert write(empty) and write(empty, overwrite=True) is None
    # An interrupted pack's files are stoker's: --force clears them.
    (empty / "manifest.json").unlink()
    assert pack(stoker, [tmp_path / "a.npy"], empty, "--force").returncode == 0
    with stoker_loader(empty) as ld:
        assert sum(len(b["x"]) for b in ld) == 1


def test_a_dataset_with_a_users_file_beside_it_says_so(stoker, tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((2, 3), np.float32))
    ds = tmp_path / "ds"
    assert pack(stoker, [tmp_path / "a.npy"], ds).returncode == 0
    (ds / "README.md").write_text("about my data\n")
    before = {n: (ds / n).read_bytes() for n in listing(ds)}
    for extra in ([], ["--force"]):
        r = pack(stoker, [tmp_path / "a.npy"], ds, *extra)
        assert r.returncode != 0 and "README.md" in r.stderr and "did not write" in r.stderr
        assert {n: (ds / n).read_bytes() for n in listing(ds)} == before


def stoker_loader(path):
    return stoker.Loader(path, batch_size=4, shuffle="sequential")
