"""Format version 2 (records located by arithmetic) from Python and the
command line, as users meet it:
- stoker.write picks version 2 for fixed-shape, uncompressed fields and
  version 1 otherwise; format_version=1 and 2 ask; the manifest and the
  shard headers say which.
- `stoker pack --format-version` does the same; verify and inspect read both.
- A mixture of a version 1 and a version 2 dataset delivers every sample
  equal to its source's record, in random order, checks on.
- A damaged byte in a version 2 record stops a random epoch naming the
  shard and the record.
"""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

import stoker
from stkcli import shard_files

N = 500


def cli():
    build = os.environ.get("STOKER_BUILD", "build")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(build if os.path.isabs(build) else os.path.join(root, build), "stoker")


def data(seed):
    rng = np.random.default_rng(seed)
    return {"id": np.arange(N, dtype=np.int64) * 10 + seed,
            "x": rng.standard_normal((N, 7)).astype(np.float32),
            "m": rng.integers(0, 255, (N, 2, 3), dtype=np.uint8)}


def versions(ds):
    """(manifest version, {shard header versions})."""
    m = json.loads((ds / "manifest.json").read_text())["version"]
    hv = {struct.unpack_from("<I", (ds / s).read_bytes(), 8)[0] for s in shard_files(ds)}
    return m, hv


@pytest.mark.parametrize("fv, want", [(0, 2), (1, 1), (2, 2)])
def test_write_picks_and_is_told_the_version(tmp_path, fv, want):
    d = data(1)
    ds = tmp_path / "ds"
    stoker.write(ds, d, format_version=fv, shard_bytes=8192)
    assert versions(ds) == (want, {want})
    with stoker.Loader(ds, batch_size=64, shuffle="random", seed=5) as ld:
        seen = 0
        for b in ld:
            i = (np.asarray(b["id"]) - 1) // 10
            assert (np.asarray(b["x"]) == d["x"][i]).all()
            assert (np.asarray(b["m"]) == d["m"][i]).all()
            seen += len(i)
    assert seen == N


def test_ragged_and_compressed_stay_version_1(tmp_path):
    recs = [{"t": np.zeros(k + 1, np.float32)} for k in range(5)]
    stoker.write(tmp_path / "r", recs, ragged=["t"])
    assert versions(tmp_path / "r") == (1, {1})
    stoker.write(tmp_path / "z", data(2), compress={"x": 3})
    assert versions(tmp_path / "z") == (1, {1})
    with pytest.raises(stoker.InvalidArgument, match="fixed-shape"):
        stoker.write(tmp_path / "r2", recs, ragged=["t"], format_version=2)


@pytest.mark.parametrize("fv, want", [(None, 2), ("1", 1), ("2", 2)])
def test_pack_format_version(tmp_path, fv, want):
    src = tmp_path / "in"
    src.mkdir()
    for k in range(6):
        np.save(src / f"a{k}.npy", np.full((3, 4), k, np.float32))
    ds = tmp_path / "ds"
    cmd = [cli(), "pack", "--from", "npy", str(src), "-o", str(ds), "-q", "--no-sync"]
    r = subprocess.run(cmd + (["--format-version", fv] if fv else []), capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert versions(ds) == (want, {want})
    assert subprocess.run([cli(), "verify", str(ds)], capture_output=True).returncode == 0
    r = subprocess.run([cli(), "inspect", str(ds)], capture_output=True, text=True)
    assert r.returncode == 0 and f"stoker version {want}" in r.stdout, r.stdout
    bad = subprocess.run(cmd + ["--force", "--format-version", "3"], capture_output=True, text=True)
    assert bad.returncode != 0 and "format-version" in bad.stderr


def test_mixture_of_version_1_and_version_2(tmp_path):
    a, b = data(1), data(2)
    stoker.write(tmp_path / "a", a, format_version=1, shard_bytes=8192)
    stoker.write(tmp_path / "b", b, shard_bytes=8192)
    assert versions(tmp_path / "a")[1] == {1} and versions(tmp_path / "b")[1] == {2}
    src = [stoker.Source(str(tmp_path / "a"), 1.0), stoker.Source(str(tmp_path / "b"), 1.0)]
    seen = {0: set(), 1: set()}
    with stoker.Loader(src, 32, shuffle="random", seed=7) as mx:
        for bt in mx:
            ids = np.asarray(bt["id"])
            s = np.asarray(bt["source"])
            for j, (i, k) in enumerate(zip(ids.tolist(), s.tolist())):
                d = (a, b)[k]
                r = (i - (1 + k)) // 10
                assert i % 10 == 1 + k and d["id"][r] == i
                assert (np.asarray(bt["x"])[j] == d["x"][r]).all()
                assert (np.asarray(bt["m"])[j] == d["m"][r]).all()
                assert r not in seen[k]
                seen[k].add(r)
    assert len(seen[0]) == len(seen[1]) == N


def test_damaged_version_2_record_is_named(tmp_path):
    d = data(3)
    ds = tmp_path / "ds"
    stoker.write(ds, d)
    (shard,) = shard_files(ds)
    raw = bytearray((ds / shard).read_bytes())
    k = 321
    at = raw.find(d["x"][k].tobytes())
    assert at > 0
    raw[at + 5] ^= 0x01
    (ds / shard).write_bytes(bytes(raw))
    with pytest.raises(stoker.StokerError) as ei:
        for _ in stoker.Loader(ds, batch_size=50, shuffle="random", seed=1):
            pass
    msg = str(ei.value)
    assert shard in msg and f"record {k}:" in msg and "checksum" in msg, msg
