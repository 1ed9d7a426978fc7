"""pack options: --field, --compress, --shard-size; inspect --all; cat --field/--limit."""

import numpy as np
import pytest

from stkcli import assert_same, save, shard_files


def test_field_name_shows_in_inspect_and_cat(stoker, tmp_path):
    a = save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    ds = tmp_path / "ds"
    stoker.pack(a, ds, "--field", "pixels")
    info = stoker.inspect(ds)
    assert [f[0] for f in info.fields] == ["pixels"]
    rec = stoker.cat(ds, 0)
    assert rec.field == "pixels"
    assert_same(rec.array(), np.arange(4, dtype=np.float32))
    # --field on cat picks it by name; a wrong name is an error naming it.
    assert stoker.cat(ds, 0, "--field", "pixels").field == "pixels"
    r = stoker("cat", ds, 0, "--field", "x")
    assert r.returncode == 2
    assert "'x'" in r.stderr


def test_invalid_field_name_is_refused(stoker, tmp_path):
    a = save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    r = stoker("pack", "--from", "npy", a, "-o", tmp_path / "ds", "--field", "bad name!")
    assert r.returncode == 2
    assert "bad name!" in r.stderr


def test_cat_limit(stoker, tmp_path):
    a = save(tmp_path / "a.npy", np.arange(100, dtype=np.int64) * 3)
    ds = tmp_path / "ds"
    stoker.pack(a, ds)
    r = stoker.ok("cat", ds, 0, "--limit", "5")
    assert "0 3 6 9 12 ..." in r.stdout
    assert "15" not in r.stdout.split("\n")[2]
    assert "(5 of 100 values shown; --limit 0 shows all)" in r.stdout
    r = stoker.ok("cat", ds, 0)  # default: 64 values
    assert "(64 of 100 values shown" in r.stdout
    assert_same(stoker.cat(ds, 0).array(), np.arange(100, dtype=np.int64) * 3)


@pytest.mark.parametrize("codec", ["zstd", "zstd:5", "zstd:1", "zstd:19"])
def test_compress_round_trips(stoker, tmp_path, codec):
    rng = np.random.default_rng(5)
    arrays = []
    for k in range(6):
        # Compressible (long runs) but not trivial, with ragged lengths.
        a = np.repeat(rng.standard_normal(64).astype(np.float32), 50)[: 2000 + 300 * k]
        arrays.append(a.reshape(-1, 4))
        save(tmp_path / "in" / f"f{k}.npy", arrays[-1])
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    stoker.pack(tmp_path / "in", plain)
    stoker.pack(tmp_path / "in", packed, "--compress", codec)
    info = stoker.inspect(packed)
    assert info.fields == [("x", "f32", "[*, 4]", "zstd")]
    assert stoker.inspect(plain).fields == [("x", "f32", "[*, 4]", "none")]
    for k, a in enumerate(arrays):
        assert_same(stoker.cat(packed, k).array(), a)
    # The data really is compressed: the shards are much smaller.
    size = lambda ds: sum((ds / f).stat().st_size for f in shard_files(ds))
    raw = sum(a.nbytes for a in arrays)
    assert size(plain) > raw
    assert size(packed) < size(plain) - raw // 2
    stoker.ok("verify", packed)


@pytest.mark.parametrize("bad", ["lz4", "zstd:", "zstd:x", "zstd5", "gzip:3"])
def test_compress_bad_codec_is_a_usage_error(stoker, tmp_path, bad):
    a = save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    r = stoker("pack", "--from", "npy", a, "-o", tmp_path / "ds", "--compress", bad)
    assert r.returncode == 2
    assert bad in r.stderr
    assert "--help" in r.stderr
    assert not (tmp_path / "ds").exists()


def make_records(tmp_path, n, values_per_record=1024):
    """n files of float32[values_per_record] (4 KiB each by default)."""
    arrays = []
    for k in range(n):
        a = np.arange(values_per_record, dtype=np.float32) + 10000 * k
        arrays.append(a)
        save(tmp_path / "in" / f"r{k:03d}.npy", a)
    return arrays


def test_small_shard_size_gives_several_shards(stoker, tmp_path):
    arrays = make_records(tmp_path, 9)
    ds = tmp_path / "ds"
    # Three 4 KiB records (plus alignment) fit under 16 KiB; a fourth does not.
    stoker.pack(tmp_path / "in", ds, "--shard-size", "16K")
    info = stoker.inspect(ds)
    files = shard_files(ds)
    assert info.records == 9
    assert info.shards == len(files) == 3
    assert [row[0] for row in info.shard_rows] == files
    # first/records columns tile the records in order.
    assert [(row[1], row[2]) for row in info.shard_rows] == [(0, 3), (3, 3), (6, 3)]
    assert [row[3] for row in info.shard_rows] == [(ds / f).stat().st_size for f in files]
    for k, a in enumerate(arrays):
        assert_same(stoker.cat(ds, k).array(), a)
    stoker.ok("verify", ds)


@pytest.mark.parametrize("size", ["abc", "-5", "12X", ""])
def test_bad_shard_size_is_a_usage_error(stoker, tmp_path, size):
    a = save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    r = stoker("pack", "--from", "npy", a, "-o", tmp_path / "ds", "--shard-size", size)
    assert r.returncode == 2
    assert "--shard-size" in r.stderr
    assert "--help" in r.stderr


def test_inspect_lists_ten_shards_unless_all(stoker, tmp_path):
    arrays = make_records(tmp_path, 13)
    ds = tmp_path / "ds"
    # 4096 is the smallest shard size: every 4 KiB record gets its own shard.
    stoker.pack(tmp_path / "in", ds, "--shard-size", "4096")
    files = shard_files(ds)
    assert len(files) == 13

    short = stoker.inspect(ds)
    assert short.shards == 13
    assert [row[0] for row in short.shard_rows] == files[:10]
    assert short.more == 3
    assert "--all" in short.text

    full = stoker.inspect(ds, "--all")
    assert full.shards == 13
    assert [row[0] for row in full.shard_rows] == files
    assert [(row[1], row[2]) for row in full.shard_rows] == [(k, 1) for k in range(13)]
    assert full.more == 0
    assert "more (--all" not in full.text
    for k in (0, 9, 10, 12):
        assert_same(stoker.cat(ds, k).array(), arrays[k])
    stoker.ok("verify", ds)


def test_align_option(stoker, tmp_path):
    arrays = [np.arange(3, dtype=np.uint8) + k for k in range(5)]
    for k, a in enumerate(arrays):
        save(tmp_path / "in" / f"{k}.npy", a)
    a1, a4096 = tmp_path / "a1", tmp_path / "a4096"
    stoker.pack(tmp_path / "in", a1, "--align", "1")
    stoker.pack(tmp_path / "in", a4096, "--align", "4096")
    size = lambda ds: sum((ds / f).stat().st_size for f in shard_files(ds))
    assert size(a4096) > size(a1) + 4 * 4096 - 1
    for ds in (a1, a4096):
        for k, a in enumerate(arrays):
            assert_same(stoker.cat(ds, k).array(), a)
        stoker.ok("verify", ds)
    r = stoker("pack", "--from", "npy", tmp_path / "in", "-o", tmp_path / "bad", "--align", "3")
    assert r.returncode == 2
    assert "align" in r.stderr


def test_read_warm_up_option(stoker, tmp_path):
    import json
    import os
    import stoker as stk
    ds = tmp_path / "ds"
    stk.write(ds, {"x": np.arange(64 * 40000, dtype=np.float32).reshape(40000, 64)})
    for f in shard_files(ds):
        fd = os.open(ds / f, os.O_RDONLY)
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    r = stoker.ok("read", ds, "--batch", "1000", "--shuffle", "random", "--warm-up", "on",
                  "--json")
    out = json.loads(r.stdout)
    assert out["samples"] == 40000
    assert out["warm_up_bytes"] >= 40000 * 256
    r = stoker.ok("read", ds, "--batch", "1000", "--warm-up", "off", "--json")
    out = json.loads(r.stdout)
    assert out["samples"] == 40000 and out["warm_up_bytes"] == 0
    r = stoker("read", ds, "--warm-up", "sometimes")
    assert r.returncode == 2
    assert "--warm-up wants auto, on or off" in r.stderr
