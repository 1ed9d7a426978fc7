"""`stoker verify` and damaged datasets."""

import re
import struct

import numpy as np
import pytest

from stkcli import assert_same, save, shard_files

N = 12


def pattern(k, n=256):
    """Record k's data: float32 values that occur in no other record."""
    return (np.arange(n, dtype=np.float32) * 0.25 + 1000.0 * (k + 1) + 0.125).astype(np.float32)


def pack_patterns(stoker, tmp_path, *opts):
    arrays = [pattern(k) for k in range(N)]
    for k, a in enumerate(arrays):
        save(tmp_path / "in" / f"r{k:03d}.npy", a)
    ds = tmp_path / "ds"
    stoker.pack(tmp_path / "in", ds, *opts)
    return ds, arrays


def find_record(ds, k):
    """(shard file, offset) of record k's bytes, found by content."""
    needle = pattern(k).tobytes()
    hits = []
    for name in shard_files(ds):
        data = (ds / name).read_bytes()
        at = data.find(needle)
        while at >= 0:
            hits.append((ds / name, at))
            at = data.find(needle, at + 1)
    assert len(hits) == 1, f"record {k}'s bytes found {len(hits)} times"
    return hits[0]


def record_extent(ds, k):
    """(shard file, offset, stored size) of record k's single field, as
    docs/FORMAT.md lays it out: read from the shard's record index (format
    version 1), or computed from the schema and alignment (version 2)."""
    import json
    man = json.loads((ds / "manifest.json").read_text())
    (field,) = man["fields"]
    itemsize = {"f32": 4}[field["dtype"]]
    size = itemsize * int(np.prod(field["shape"]))
    align = man["align"]
    for name in shard_files(ds):
        data = (ds / name).read_bytes()
        assert data[:8] == b"STKSHARD"
        version, = struct.unpack_from("<I", data, 8)
        nfields, = struct.unpack_from("<I", data, 20)
        nrec, = struct.unpack_from("<Q", data, 24)
        data_off, = struct.unpack_from("<Q", data, 32)
        index_off, = struct.unpack_from("<Q", data, 48)
        assert nfields == 1 and version in (1, 2)
        # Shards are numbered in record order; skip whole shards.
        if k >= nrec:
            k -= nrec
            continue
        if version == 2:
            stride = -(-size // align) * align
            return ds / name, data_off + k * stride, size
        _, off, size, _ = struct.unpack_from("<4Q", data, index_off + k * 32)
        return ds / name, off, size
    raise AssertionError("record past the last shard")


def named_records(stderr):
    """The global record numbers a message names ("record 7", not the
    "shard record 1" that follows it)."""
    return {int(m) for m in re.findall(r"(?<!shard )\brecord (\d+)", stderr)}


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def test_verify_intact(stoker, tmp_path):
    ds, _ = pack_patterns(stoker, tmp_path)
    r = stoker("verify", ds)
    assert r.returncode == 0, r.stderr
    assert "intact" in r.stdout
    assert f"{N} records" in r.stdout
    assert r.stderr == ""
    r = stoker("verify", ds, "-q", "--threads", "2")
    assert r.returncode == 0
    assert r.stdout == ""


@pytest.mark.parametrize(
    "opts, k",
    [
        ([], 0),
        ([], 6),
        ([], N - 1),
        (["--shard-size", "4096"], 7),  # several records per shard, k not in the first
    ],
    ids=["one-shard-first", "one-shard-middle", "one-shard-last", "many-shards"],
)
def test_flipped_byte_is_found_and_named(stoker, tmp_path, opts, k):
    ds, arrays = pack_patterns(stoker, tmp_path, *opts)
    if opts:
        assert len(shard_files(ds)) > 2
    stoker.ok("verify", ds)
    shard, off = find_record(ds, k)
    assert record_extent(ds, k)[:2] == (shard, off)
    flip_byte(shard, off + 4 * 100 + 1)

    r = stoker("verify", ds)
    assert r.returncode == 1, r.stdout + r.stderr
    assert shard.name in r.stderr
    named = named_records(r.stderr)
    assert named == {k}, r.stderr
    assert "intact" not in r.stdout

    # Opening checks no record bytes, so inspect still works.
    assert stoker.inspect(ds).records == N
    r = stoker("cat", ds, k)
    assert r.returncode == 2
    assert "checksum" in r.stderr
    assert shard.name in r.stderr
    assert f"record {k}" in r.stderr
    for j in range(N):
        if j != k:
            assert_same(stoker.cat(ds, j).array(), arrays[j])


def test_damaged_compressed_record(stoker, tmp_path):
    # A compressed frame cannot be found by its content: find record k
    # through the shard's index instead, and damage the middle of its frame.
    ds, arrays = pack_patterns(stoker, tmp_path, "--compress", "zstd:3", "--shard-size", "4K")
    assert len(shard_files(ds)) >= 2
    k = 7
    shard, off, size = record_extent(ds, k)
    assert size < pattern(k).nbytes  # it is compressed
    flip_byte(shard, off + size // 2)
    r = stoker("verify", ds)
    assert r.returncode == 1
    assert shard.name in r.stderr
    assert named_records(r.stderr) == {k}, r.stderr
    r = stoker("cat", ds, k)
    assert r.returncode == 2
    assert "checksum" in r.stderr
    for j in range(N):
        if j != k:
            assert_same(stoker.cat(ds, j).array(), arrays[j])


def test_two_damaged_records_are_both_named(stoker, tmp_path):
    ds, _ = pack_patterns(stoker, tmp_path, "--shard-size", "8K")
    for k in (2, 9):
        shard, off = find_record(ds, k)
        flip_byte(shard, off + 8)
    r = stoker("verify", ds)
    assert r.returncode == 1
    assert named_records(r.stderr) == {2, 9}
    m = re.search(r"is damaged: (\d+) problems", r.stderr)
    assert m and int(m.group(1)) >= 2, r.stderr


def test_truncated_shard(stoker, tmp_path):
    ds, _ = pack_patterns(stoker, tmp_path, "--shard-size", "8K")
    victim = ds / shard_files(ds)[1]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) - 100])
    r = stoker("verify", ds)
    assert r.returncode == 1
    assert victim.name in r.stderr
    r = stoker("inspect", ds)
    assert r.returncode == 2
    assert victim.name in r.stderr


def test_missing_shard(stoker, tmp_path):
    ds, _ = pack_patterns(stoker, tmp_path, "--shard-size", "8K")
    victim = ds / shard_files(ds)[-1]
    victim.unlink()
    for cmd in ("inspect", "verify"):
        r = stoker(cmd, ds)
        assert r.returncode == 2, cmd
        assert victim.name in r.stderr, cmd


def test_damaged_shard_header(stoker, tmp_path):
    ds, _ = pack_patterns(stoker, tmp_path)
    shard = ds / shard_files(ds)[0]
    flip_byte(shard, 30)  # inside the record count
    r = stoker("verify", ds)
    assert r.returncode == 1
    assert shard.name in r.stderr
    assert "header" in r.stderr
    r = stoker("inspect", ds)
    assert r.returncode == 2
    assert shard.name in r.stderr
