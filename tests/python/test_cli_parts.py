"""Split packing: `stoker pack --part I/N` then `stoker merge`."""

import numpy as np
import pytest

from stkcli import assert_same, save, shard_files


def make_inputs(tmp_path, split):
    """Input files and the records they should give, in order."""
    src = tmp_path / "in"
    rng = np.random.default_rng(11)
    if split:
        # 7 + 4 rows: with 3 parts the rows split 3/4/4, so part 1 takes rows
        # from both files.
        arrays = [rng.standard_normal((7, 5)).astype(np.float32),
                  rng.standard_normal((4, 5)).astype(np.float32)]
        for k, a in enumerate(arrays):
            save(src / f"f{k}.npy", a)
        return src, [row for a in arrays for row in a]
    arrays = [rng.standard_normal((k % 4 + 1, 3)).astype(np.float32) for k in range(10)]
    for k, a in enumerate(arrays):
        save(src / f"f{k:02d}.npy", a)
    return src, arrays


def pack_parts(stoker, src, ds, n, *opts, parts=None):
    """Runs `pack --part I/N` for each I as its own process, all at once."""
    procs = [
        stoker.popen("pack", "--from", "npy", src, "-o", ds, "--part", f"{i}/{n}", "-q", *opts)
        for i in (range(n) if parts is None else parts)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err


def assert_same_datasets(stoker, a, b):
    ia, ib = stoker.inspect(a), stoker.inspect(b)
    assert ia.records == ib.records
    assert ia.fields == ib.fields
    for k in range(ia.records):
        ra, rb = stoker.cat(a, k), stoker.cat(b, k)
        assert (ra.field, ra.dtype, ra.shape, ra.tokens) == (rb.field, rb.dtype, rb.shape, rb.tokens), k


@pytest.mark.parametrize("split", [False, True], ids=["per-file", "split-axis0"])
def test_three_parts_merged_equal_a_single_pack(stoker, tmp_path, split):
    src, want = make_inputs(tmp_path, split)
    opts = ["--split-axis0"] if split else []
    single, ds = tmp_path / "single", tmp_path / "parts"
    stoker.pack(src, single, *opts)
    pack_parts(stoker, src, ds, 3, *opts)
    # Every part wrote its own shards.
    assert {f.split("-shard-")[0] for f in shard_files(ds)} == {
        "part-00000", "part-00001", "part-00002"}
    r = stoker.ok("merge", ds)
    assert f"{len(want)} records" in r.stdout
    assert not list(ds.glob("part-*.json"))
    assert_same_datasets(stoker, single, ds)
    for k, a in enumerate(want):
        assert_same(stoker.cat(ds, k).array(), a)
    stoker.ok("verify", ds)


def test_more_parts_than_records(stoker, tmp_path):
    src = tmp_path / "in"
    arrays = [np.full((2, 2), k, np.int64) for k in range(2)]
    for k, a in enumerate(arrays):
        save(src / f"{k}.npy", a)
    single, ds = tmp_path / "single", tmp_path / "parts"
    stoker.pack(src, single)
    pack_parts(stoker, src, ds, 3)  # one part gets no record at all
    stoker.ok("merge", ds)
    assert_same_datasets(stoker, single, ds)
    stoker.ok("verify", ds)


def test_unmerged_parts_do_not_open(stoker, tmp_path):
    src, _ = make_inputs(tmp_path, False)
    ds = tmp_path / "ds"
    pack_parts(stoker, src, ds, 3)
    for args in (["inspect", ds], ["cat", ds, "0"], ["verify", ds]):
        r = stoker(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "merge" in r.stderr, args
        assert r.stdout == ""
    stoker.ok("merge", ds)
    stoker.ok("inspect", ds)


@pytest.mark.parametrize("missing", [0, 1, 2])
def test_merge_with_a_missing_part_names_it(stoker, tmp_path, missing):
    src, _ = make_inputs(tmp_path, False)
    ds = tmp_path / "ds"
    pack_parts(stoker, src, ds, 3, parts=[i for i in range(3) if i != missing])
    r = stoker("merge", ds)
    assert r.returncode == 2
    assert f"part {missing} " in r.stderr
    assert f"part-{missing:05d}.json" in r.stderr
    # Nothing was published: the dataset still does not open.
    assert not (ds / "manifest.json").exists()
    r = stoker("inspect", ds)
    assert r.returncode == 2
    assert "merge" in r.stderr
    # Writing the missing part afterwards completes it.
    pack_parts(stoker, src, ds, 3, parts=[missing])
    stoker.ok("merge", ds)
    assert stoker.inspect(ds).records == 10


def test_merge_twice_and_merge_nothing(stoker, tmp_path):
    src, _ = make_inputs(tmp_path, False)
    ds = tmp_path / "ds"
    pack_parts(stoker, src, ds, 2)
    stoker.ok("merge", ds)
    r = stoker("merge", ds)
    assert r.returncode == 2
    assert "already" in r.stderr
    stoker.ok("verify", ds)

    empty = tmp_path / "empty"
    empty.mkdir()
    r = stoker("merge", empty)
    assert r.returncode == 2
    assert "no finished parts" in r.stderr


def test_part_already_written_needs_force(stoker, tmp_path):
    src, _ = make_inputs(tmp_path, False)
    ds = tmp_path / "ds"
    pack_parts(stoker, src, ds, 2, parts=[0])
    r = stoker("pack", "--from", "npy", src, "-o", ds, "--part", "0/2", "-q")
    assert r.returncode == 2
    assert "--force" in r.stderr
    stoker.ok("pack", "--from", "npy", src, "-o", ds, "--part", "0/2", "-q", "--force")
    pack_parts(stoker, src, ds, 2, parts=[1])
    stoker.ok("merge", ds)
    assert stoker.inspect(ds).records == 10


@pytest.mark.parametrize("bad", ["3/3", "1", "a/b", "1/0", "-1/3", "1/3x", "1/"])
def test_bad_part_is_a_usage_error(stoker, tmp_path, bad):
    a = save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    r = stoker("pack", "--from", "npy", a, "-o", tmp_path / "ds", "--part", bad)
    assert r.returncode == 2
    assert "--part" in r.stderr
    assert "--help" in r.stderr
    assert not (tmp_path / "ds").exists()
