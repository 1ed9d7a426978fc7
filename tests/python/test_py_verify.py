"""Read-time checksums from Python: a damaged byte stops the epoch with a
StokerError naming the shard file and the record; verify=False reads on."""
import numpy as np
import pytest

import stoker


@pytest.mark.parametrize("backend", ["pool", "mmap"])
def test_damaged_record_is_named(tmp_path, backend):
    n = 64
    src = {"x": np.arange(n * 256, dtype=np.float32).reshape(n, 256)}
    stoker.write(tmp_path / "d", src, sync=False)
    shard = tmp_path / "d" / "shard-000000.stk"
    data = bytearray(shard.read_bytes())
    pos = data.find(src["x"][37].tobytes())
    assert pos > 0
    data[pos + 100] ^= 0x01
    shard.write_bytes(bytes(data))
    with stoker.Loader(tmp_path / "d", batch_size=8, shuffle="random", backend=backend) as ld:
        with pytest.raises(stoker.StokerError) as ei:
            for _ in ld:
                pass
    code, msg = ei.value.args
    assert "shard-000000.stk" in msg and "record 37:" in msg and "checksum" in msg
    with stoker.Loader(tmp_path / "d", batch_size=8, shuffle="random", backend=backend,
                       verify=False) as ld:
        assert sum(len(b["x"]) for b in ld) == n
        assert ld.stats()["verify"]["count"] == 0


def test_skip_policy_replaces_the_damaged_record_and_warns(tmp_path):
    n = 64
    src = {"id": np.arange(n, dtype=np.int64),
           "x": np.arange(n * 256, dtype=np.float32).reshape(n, 256)}
    stoker.write(tmp_path / "d", src, sync=False)
    shard = tmp_path / "d" / "shard-000000.stk"
    data = bytearray(shard.read_bytes())
    pos = data.find(src["x"][37].tobytes())
    data[pos + 100] ^= 0x01
    shard.write_bytes(bytes(data))
    with stoker.Loader(tmp_path / "d", batch_size=8, shuffle="random", on_error="skip") as ld:
        with pytest.warns(RuntimeWarning, match="record 37"):
            ids = np.concatenate([b["id"].copy() for b in ld])
        assert len(ids) == n  # same batch count: the sample was replaced, not dropped
        assert 37 not in ids
        assert ld.stats()["skipped"] >= 1
    with pytest.raises(ValueError, match="on_error"):
        stoker.Loader(tmp_path / "d", batch_size=8, on_error="ignore")


@pytest.mark.parametrize("backend", ["mmap", "pool"])
@pytest.mark.parametrize("at", [0, 300, 447, 448, 511])
def test_damaged_small_record_is_named(tmp_path, backend, at):
    # 512-byte records, the size of the small-records benchmark: each is
    # hashed whole by the vector build of XXH3 the CPU has (AVX-512 or AVX2),
    # as it is gathered from the mapping (mmap) or after it lands (pool).  A
    # flip in a middle stripe, in the last full one and in the final stripe
    # XXH3 reads separately (the last 64 bytes) each names its record.
    n, bad = 4096, 2777
    src = {"x": np.random.default_rng(5).standard_normal((n, 128), dtype=np.float32)}
    stoker.write(tmp_path / "d", src, sync=False)
    shard = tmp_path / "d" / "shard-000000.stk"
    data = bytearray(shard.read_bytes())
    pos = data.find(src["x"][bad].tobytes())
    assert pos > 0
    data[pos + at] ^= 0x40
    shard.write_bytes(bytes(data))
    seen = 0
    with stoker.Loader(tmp_path / "d", batch_size=256, shuffle="random", backend=backend) as ld:
        with pytest.raises(stoker.StokerError) as ei:
            for b in ld:
                seen += len(b["x"])
    code, msg = ei.value.args
    assert "shard-000000.stk" in msg and f"record {bad}:" in msg and "checksum" in msg
    assert seen < n
