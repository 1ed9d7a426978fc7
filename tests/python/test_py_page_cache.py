"""What the writer leaves in the page cache: a shard just written is held in
2 MiB folios, which the loader's mapping covers with 2 MiB pages (its
gather of small records is up to a third slower over 4 KiB pages; the
writer writes the data region in pieces that end on the file's 2 MiB
boundaries so that a dataset read right after it was written is not).
Where this machine's page cache makes no large folios on write at all (the
kernel, the file system or transparent huge pages set to never), a control
file says so and the test is skipped."""

import mmap
import os

import numpy as np
import pytest

import stoker

MiB = 1 << 20


def pmd_mapped(path):
    """Bytes of `path` that a MADV_HUGEPAGE mapping of it covers with 2 MiB
    pages once every page is touched (FilePmdMapped of its entry in
    /proc/self/smaps): what the page cache holds in 2 MiB folios."""
    path = os.path.realpath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        m = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
        sum(m[off] for off in range(0, size, 4096))
        total, inside = 0, False
        with open("/proc/self/smaps") as smaps:
            for line in smaps:
                head = line.split()
                if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                    inside = line.rstrip("\n").endswith(" " + path)
                elif inside and head[0] == "FilePmdMapped:":
                    total += int(head[1]) * 1024
        return total
    finally:
        m.close()


@pytest.fixture
def large_folios_on_write(tmp_path):
    """Skips unless 2 MiB-aligned writes of 2 MiB leave 2 MiB folios here."""
    control = tmp_path / "control"
    fd = os.open(control, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        block = os.urandom(2 * MiB)
        for k in range(4):
            os.pwrite(fd, block, k * 2 * MiB)
    finally:
        os.close(fd)
    if pmd_mapped(control) < 6 * MiB:
        pytest.skip("this page cache makes no 2 MiB folios on write (kernel, file system or "
                    "transparent huge pages)")


def shard_files(path):
    return sorted(p for p in os.scandir(path) if p.name.endswith(".stk"))


@pytest.mark.parametrize("kind", ["fixed", "ragged", "compressed"])
def test_a_shard_just_written_is_held_in_2mib_folios(tmp_path, large_folios_on_write, kind):
    rng = np.random.default_rng(4)
    if kind == "fixed":  # version 2, 512-byte records: many small pieces
        recs = {"x": rng.standard_normal((48 * 1024, 128)).astype(np.float32)}
        kw = {}
    elif kind == "ragged":  # version 1, records of 1 KiB to 1.5 MiB
        recs = [{"x": rng.integers(0, 255, int(n), dtype=np.uint8)}
                for n in rng.integers(1 << 10, 3 * (1 << 19), 48)]
        kw = {"ragged": ["x"]}
    else:  # stored compressed: one piece a record, some over 2 MiB
        recs = [{"x": rng.integers(0, 255, int(n), dtype=np.uint8)}
                for n in rng.integers(1 << 20, 5 * MiB, 12)]
        kw = {"ragged": ["x"], "compress": {"x": "zstd"}}
    out = tmp_path / "d.stk"
    stoker.write(str(out), recs, **kw)
    shards = shard_files(out)
    assert shards
    for sh in shards:
        size = sh.stat().st_size
        # All but the first 2 MiB (the header's page is written first) and
        # the last partial 2 MiB (the data's tail, the index, the checksums).
        want = (size // (2 * MiB) - 1) * 2 * MiB
        assert want >= 8 * MiB, size
        got = pmd_mapped(sh.path)
        assert got >= want, (sh.path, got, want)
    # And the bytes are the ones written.
    want = list(recs["x"]) if kind == "fixed" else [r["x"] for r in recs]
    got = []
    with stoker.Loader(str(out), 16, shuffle="sequential") as ld:
        for b in ld:
            x = np.asarray(b["x"])
            if kind == "fixed":
                got += [r.copy() for r in x]
            else:
                o = np.asarray(b["x_offsets"])
                got += [x[o[i]:o[i + 1]].copy() for i in range(len(o) - 1)]
    assert len(got) == len(want)
    assert all(np.array_equal(a, w) for a, w in zip(got, want))
