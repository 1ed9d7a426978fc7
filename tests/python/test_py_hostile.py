"""Hostile inputs and careless neighbours (the writer's side): records that
do not match the schema, planted symlinks, foreign files, two writers."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import stoker
from stoker import _stoker


def opens_incomplete(path):
    with pytest.raises(stoker.StokerError) as ei:
        stoker.Loader(path, batch_size=1)
    return "incomplete" in str(ei.value) or "not a stoker dataset" in str(ei.value)


@pytest.mark.parametrize("bad, words", [
    ({"x": np.zeros((2, 2), np.float32)}, ["record 2", "'x'", "(2, 2)", "(*, 3)"]),
    ({"x": np.zeros((2, 3), np.float64)}, ["record 2", "'x'", "float64", "float32"]),
    ({"x": np.zeros((2, 3, 1), np.float32)}, ["record 2", "'x'", "shape"]),
])
def test_iterable_records_that_differ_from_the_first_are_refused(tmp_path, bad, words):
    recs = [{"x": np.ones((4, 3), np.float32), "y": np.int64(1)},
            {"x": np.ones((5, 3), np.float32), "y": np.int64(2)},
            {**bad, "y": np.int64(3)}]
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "d", iter(recs))
    for w in words:
        assert w in str(ei.value), str(ei.value)
    assert opens_incomplete(tmp_path / "d")


def test_fixed_fields_refuse_a_short_record(tmp_path):
    recs = [{"v": np.arange(8, dtype=np.int32)}, {"v": np.arange(8, dtype=np.int32)},
            {"v": np.arange(5, dtype=np.int32)}]
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "d", recs, ragged=[])
    assert "record 2" in str(ei.value) and "'v'" in str(ei.value)


def test_the_writer_never_reads_past_a_value(tmp_path):
    """The raw Writer: a value far smaller than its rows say is refused,
    not read past (this crashed the process)."""
    w = _stoker.Writer(str(tmp_path / "d"), [("x", "f32", (-1, 1024), "none", 0)], 1 << 20, 64,
                       False, False, None)
    w.append([(np.zeros((4, 1024), np.float32), 4)])
    with pytest.raises(ValueError) as ei:
        w.append([(np.zeros(3, np.float32), 1 << 20)])
    assert "record 1" in str(ei.value) and "'x'" in str(ei.value)
    w.abort()


# ---- paths: nothing written outside the dataset, no user file lost ----------------------

def cli():
    build = os.environ.get("STOKER_BUILD", "build")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(build if os.path.isabs(build) else os.path.join(root, build), "stoker")


def small(n=5):
    return {"x": np.arange(n * 3, dtype=np.float32).reshape(n, 3)}


def test_links_planted_at_the_writers_names_are_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    ds = tmp_path / "ds"
    ds.mkdir()
    pid = os.getpid()
    # Every name a writer used to write through: its temporaries (the old,
    # guessable ones) and its journal.
    names = (f".manifest.json.tmp.{pid}", f"..packing.tmp.{pid}")
    for name in names:
        os.symlink(victim, ds / name)
    # A directory holding anything stoker did not write is not written
    # into at all, links included, and is left as it was.
    with pytest.raises(stoker.StokerError) as ei:
        stoker.write(ds, small(7))
    assert ".manifest.json.tmp" in str(ei.value) and "not a regular file" in str(ei.value)
    assert sorted(os.listdir(ds)) == sorted(names)
    for name in names:
        (ds / name).unlink()
    stoker.write(ds, small(7))
    assert victim.read_text() == "precious"
    assert not (ds / "manifest.json").is_symlink()
    with stoker.Loader(ds, batch_size=7, shuffle="sequential") as ld:
        assert len(next(iter(ld))["x"]) == 7
    # Links planted beside a dataset are not its files: replacing it is
    # refused, naming them, rather than done through or over them.
    for name in names + (".packing",):
        if not (ds / name).is_symlink():
            os.symlink(victim, ds / name)
    with pytest.raises(stoker.StokerError) as ei:
        stoker.write(ds, small(2), overwrite=True)
    assert "did not write" in str(ei.value) and ".manifest.json.tmp" in str(ei.value)
    assert victim.read_text() == "precious"
    # A fresh dataset whose shard name is a planted link.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    os.symlink(victim, fresh / "shard-000000.stk")
    with pytest.raises(stoker.StokerError):
        stoker.write(fresh, small())   # a link named like a shard is not ours to replace
    stoker.write(tmp_path / "fresh2", small())
    assert victim.read_text() == "precious"
    # The index's temporary.
    np.save(tmp_path / "a.npy", np.zeros(4, np.float32))
    os.symlink(victim, tmp_path / f".a.idx.tmp.{pid}")
    stoker.index(tmp_path / "a.npy", tmp_path / "a.idx")
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("foreign", ["manifest.json", "notes.stk", "part-7.json", "README.md"])
def test_replacing_refuses_a_directory_with_files_stoker_did_not_write(tmp_path, foreign):
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / foreign).write_text("the user's own words\n")
    np.save(tmp_path / "a.npy", np.zeros((2, 3), np.float32))
    for run in (lambda: stoker.write(ds, small(), overwrite=True),
                lambda: subprocess.run([cli(), "pack", "--from", "npy", str(tmp_path / "a.npy"),
                                        "-o", str(ds), "--force"], capture_output=True,
                                       text=True)):
        try:
            r = run()
        except stoker.StokerError as e:
            msg = str(e)
        else:
            assert r.returncode != 0
            msg = r.stderr
        assert foreign in msg and "did not write" in msg, msg
        assert (ds / foreign).read_text() == "the user's own words\n"


def test_a_second_writer_is_refused_while_the_first_writes(tmp_path):
    ds = tmp_path / "ds"
    w = _stoker.Writer(str(ds), [("x", "f32", (3,), "none", 0)], 1 << 20, 64, False, False, None)
    w.append([(np.zeros(3, np.float32), 3)])
    with pytest.raises(stoker.StokerError) as ei:
        stoker.write(ds, small(), overwrite=True)
    assert "another writer" in str(ei.value)
    np.save(tmp_path / "a.npy", np.zeros((2, 3), np.float32))
    r = subprocess.run([cli(), "pack", "--from", "npy", str(tmp_path / "a.npy"), "-o", str(ds),
                        "--force"], capture_output=True, text=True)
    assert r.returncode != 0 and "another writer" in r.stderr
    w.finish()
    del w
    import gc
    gc.collect()
    stoker.write(ds, small(), overwrite=True)   # free again


def test_a_replacement_that_fails_leaves_the_old_dataset_whole(tmp_path):
    ds = tmp_path / "ds"
    stoker.write(ds, small(4))
    before = {p.name: p.read_bytes() for p in ds.iterdir() if p.suffix in (".stk", ".json")}

    def bad_records():
        yield {"x": np.zeros(3, np.float32)}
        yield {"x": np.zeros(3, np.float32)}
        raise OSError("the source failed half way (as a full disk would)")
    with pytest.raises(OSError):
        stoker.write(ds, bad_records(), overwrite=True)
    with stoker.Loader(ds, batch_size=4, shuffle="sequential") as ld:
        np.testing.assert_array_equal(next(iter(ld))["x"], small(4)["x"])
    after = {p.name: p.read_bytes() for p in ds.iterdir() if p.name in before}
    assert after == before
    # A killed replacement, too.
    code = ("import stoker, numpy as np, os, signal\n"
            "def recs():\n"
            "    for i in range(10**9):\n"
            "        if i == 2000: os.kill(os.getpid(), signal.SIGKILL)\n"
            "        yield {'x': np.full(3, i, np.float32)}\n"
            f"stoker.write({str(ds)!r}, recs(), overwrite=True, shard_bytes=1 << 16)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode != 0
    with stoker.Loader(ds, batch_size=4, shuffle="sequential") as ld:
        np.testing.assert_array_equal(next(iter(ld))["x"], small(4)["x"])
    # And the next replacement clears what the failed ones left.
    stoker.write(ds, small(2), overwrite=True)
    assert len([p for p in ds.iterdir() if p.suffix == ".stk"]) == 1


# ---- walks: loops and pipes never hang ---------------------------------------------------

def test_walks_stop_at_link_loops_and_skip_pipes(tmp_path):
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    np.save(root / "a.npy", np.zeros(3, np.float32))
    np.save(root / "sub" / "b.npy", np.ones(3, np.float32))
    os.mkfifo(root / "pipe.npy")
    # A pipe among the files is skipped; the walk does not block on it.
    for argv in ([cli(), "index", str(root), "-o", str(tmp_path / "i.idx")],
                 [cli(), "pack", "--from", "npy", str(root), "-o", str(tmp_path / "p")]):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    with stoker.Loader(tmp_path / "i.idx", batch_size=8, shuffle="sequential") as ld:
        assert sum(len(b["data"]) for b in ld) == 2   # a.npy and sub/b.npy, not the pipe
    # A pipe named on the command line is refused.
    r = subprocess.run([cli(), "pack", "--from", "npy", str(root / "pipe.npy"), "-o",
                        str(tmp_path / "q")], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "regular file" in r.stderr
    # A link back to a parent: refused, naming it, within the timeout.
    os.symlink(root, root / "sub" / "up")
    for argv in ([cli(), "index", str(root), "-o", str(tmp_path / "j.idx")],
                 [cli(), "pack", "--from", "npy", str(root), "-o", str(tmp_path / "p2")]):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "loop" in r.stderr, r.stderr
    with pytest.raises(stoker.StokerError) as ei:
        stoker.index(root, tmp_path / "k.idx")
    assert "loop" in str(ei.value)


def test_an_indexed_file_that_became_a_pipe_is_refused_not_waited_on(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros(3, np.float32))
    stoker.index(tmp_path / "a.npy", tmp_path / "a.idx")
    os.unlink(tmp_path / "a.npy")
    os.mkfifo(tmp_path / "a.npy")
    r = subprocess.run([cli(), "inspect", str(tmp_path / "a.idx")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "regular file" in r.stderr


def test_a_field_cannot_shadow_the_offsets_of_another(tmp_path):
    recs = [{"x": np.zeros(n, np.float32), "x_offsets": np.int64(7)} for n in (2, 5)]
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "d", recs, ragged=["x"])
    assert "x_offsets" in str(ei.value) and "rename" in str(ei.value)


def test_verify_names_a_manifest_that_does_not_parse_as_damage(tmp_path):
    ds = tmp_path / "ds"
    stoker.write(ds, small())
    (ds / "manifest.json").write_text("{garbage")
    r = subprocess.run([cli(), "verify", str(ds)], capture_output=True, text=True)
    assert r.returncode == 1 and "manifest.json" in r.stderr
    help_text = subprocess.run([cli(), "verify", "--help"], capture_output=True, text=True).stdout
    assert "manifest that does not parse is damage" in help_text


def test_a_manifest_listing_a_shard_twice_is_damage(tmp_path):
    import json
    ds = tmp_path / "ds"
    stoker.write(ds, {"x": np.arange(40, dtype=np.float32).reshape(10, 4)}, shard_bytes=4096 * 2)
    m = json.loads((ds / "manifest.json").read_text())
    m["shards"].append(dict(m["shards"][0]))
    m["records"] += m["shards"][0]["records"]
    (ds / "manifest.json").write_text(json.dumps(m))
    r = subprocess.run([cli(), "verify", str(ds)], capture_output=True, text=True)
    assert r.returncode == 1 and "checksum fails" in r.stderr, r.stderr
    # Edited by hand, without the manifest's checksum: the check behind it.
    del m["manifest_xxh3"]
    (ds / "manifest.json").write_text(json.dumps(m))
    r = subprocess.run([cli(), "verify", str(ds)], capture_output=True, text=True)
    assert r.returncode == 1 and "listed twice" in r.stderr


def test_every_byte_stoker_writes_is_covered(tmp_path):
    """A bit flipped in a shard header's padding or in a manifest key's
    name (codec_level) is damage that verify finds (exit 1)."""
    ds = tmp_path / "ds"
    stoker.write(ds, {"x": np.arange(40, dtype=np.float32).reshape(10, 4)},
                 compress={"x": 3})
    shard = sorted(ds.glob("shard-*.stk"))[0]
    pristine_shard, pristine_man = shard.read_bytes(), (ds / "manifest.json").read_bytes()

    def verify():
        return subprocess.run([cli(), "verify", str(ds)], capture_output=True, text=True)

    assert verify().returncode == 0
    for off in (112, 128, 1000, 4095):
        b = bytearray(pristine_shard)
        b[off] ^= 0x04
        shard.write_bytes(bytes(b))
        r = verify()
        assert r.returncode == 1 and shard.name in r.stderr, (off, r.stderr)
    shard.write_bytes(pristine_shard)
    text = pristine_man.decode()
    assert '"codec_level"' in text
    (ds / "manifest.json").write_text(text.replace('"codec_level"', '"codec_levem"', 1))
    r = verify()
    assert r.returncode == 1 and "checksum" in r.stderr, r.stderr
    (ds / "manifest.json").write_bytes(pristine_man)
    assert verify().returncode == 0


def test_an_index_with_counts_no_file_holds_is_refused_before_allocating(tmp_path):
    import json
    import resource
    np.save(tmp_path / "a.npy", np.zeros((100, 4), np.float32))
    stoker.index(tmp_path / "a.npy", tmp_path / "a.idx", split_axis0=True)
    doc = json.loads((tmp_path / "a.idx").read_text())
    run = doc["files"][0]["runs"][0]
    for bad in ([run[0], 2**32, run[2], run[3]], [run[0], 2**32, 0, 0]):
        doc["files"][0]["runs"] = [bad]
        doc["records"] = bad[1]
        (tmp_path / "b.idx").write_text(json.dumps(doc))
        # Under a 2 GiB address-space limit, unless AddressSanitizer runs
        # (its shadow memory needs more address space than that).
        asan = "asan" in os.environ.get("LD_PRELOAD", "") or "ASAN_OPTIONS" in os.environ
        limit = "" if asan else "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        code = ("import resource, stoker\n" + limit +
                f"stoker.Loader({str(tmp_path / 'b.idx')!r}, batch_size=1)\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode != 0
        assert "do not fit" in r.stderr and "out of memory" not in r.stderr, r.stderr[-500:]


@pytest.mark.parametrize("chunk", [0, 1, 9])
def test_an_hdf5_chunk_key_with_a_trailing_element_offset_is_refused(tmp_path, chunk):
    """A v1 B-tree key's last coordinate (the offset within an element) is
    not 0: libhdf5 finds no chunk for those rows and reads fill values;
    stoker must refuse the chunk, not deliver its bytes."""
    h5py = pytest.importorskip("h5py")
    p = _h5_with_a_key_changed(tmp_path, 10 * chunk, 2, 4)
    with h5py.File(p) as f:
        assert (f["d"][10 * chunk:10 * chunk + 10] == 0).all()   # what libhdf5 reads there
        assert (f["d"][50:60] == np.arange(200, 240).reshape(10, 4)).all()
    with pytest.raises(stoker.StokerError) as ei:
        stoker.index(p, tmp_path / "a.idx", dataset="d")
    msg = str(ei.value)
    assert "a.h5" in msg and "'d'" in msg and f"row {10 * chunk}" in msg, msg


# ---- resource limits ------------------------------------------------------------------------

def test_close_with_a_live_batch_stops_the_threads_and_gives_the_ring_back(tmp_path):
    """close() while a batch is still referenced: the threads stop and the
    buffers not held return to the system at once; the held batch stays
    valid until it goes."""
    def rss():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) << 10

    def threads():
        return len(os.listdir("/proc/self/task"))

    n = 160   # 10 batches of 16 MiB: more than the ring of 8 holds
    x = np.arange(n * 256 * 1024, dtype=np.float32).reshape(n, 256 * 1024)  # 1 MiB records
    stoker.write(tmp_path / "d", {"x": x})
    base_threads = threads()
    ld = stoker.Loader(tmp_path / "d", batch_size=16, shuffle="sequential", prefetch=8,
                       warm_up=False)
    it = iter(ld)
    held = next(it)["x"]                       # 16 MiB, kept
    import time
    time.sleep(0.5)                            # the ring fills: 8 buffers of 16 MiB
    before, busy = rss(), threads()
    assert busy > base_threads
    ld.close()
    after = rss()
    assert threads() == base_threads
    assert before - after > 64 << 20, (before, after)   # most of the 128 MiB ring
    np.testing.assert_array_equal(held, x[:16])          # the held batch is intact
    del held, it


def test_an_interrupt_inside_next_loses_no_batch(tmp_path):
    """Ctrl-C after the C loader handed a batch over but before the caller
    had it: the batch is put back; the next call gives it, and a state saved
    in between resumes at it."""
    stoker.write(tmp_path / "d", {"x": np.arange(200, dtype=np.int64)})
    kw = dict(batch_size=16, shuffle="random", seed=3)
    with stoker.Loader(tmp_path / "d", **kw) as ref:
        want = [b["x"].tolist() for b in ref]
    with stoker.Loader(tmp_path / "d", **kw) as ld:
        got = [ld.next()["x"].tolist(), ld.next()["x"].tolist()]
        real = ld._convert
        calls = {"n": 0}

        def interrupted(arrays):
            calls["n"] += 1
            if calls["n"] == 1:
                raise KeyboardInterrupt
            return real(arrays)
        ld._convert = interrupted
        with pytest.raises(KeyboardInterrupt):
            ld.next()
        state = ld.state_dict()
        got.append(ld.next()["x"].tolist())       # the batch put back
        ld._convert = real
        with stoker.Loader(tmp_path / "d", **kw) as again:
            again.load_state_dict(state)
            resumed = [b["x"].tolist() for b in again]
    assert got == want[:3]
    assert resumed == want[2:]


def _h5_with_a_key_changed(tmp_path, row, k, value):
    """a.h5: a dataset 'd' of 100 x 4 float32 in chunks of 10 rows, in a v1
    B-tree, with coordinate k of the key of the chunk at `row` (0: rows,
    1: columns, 2: the offset within an element) set to `value`."""
    import h5py
    import struct
    p = tmp_path / "a.h5"
    with h5py.File(p, "w", libver="earliest") as f:
        f.create_dataset("d", data=np.arange(400, dtype=np.float32).reshape(100, 4),
                         chunks=(10, 4))
    b = bytearray(p.read_bytes())
    key = struct.pack("<IIQQQ", 160, 0, row, 0, 0)   # chunk bytes, mask, (row, 0, elem)
    assert b.count(key) == 1
    i = b.find(key) + 8 + 8 * k
    b[i:i + 8] = struct.pack("<Q", value)
    p.write_bytes(bytes(b))
    return p


def test_an_hdf5_chunk_key_beyond_dimension_0_is_refused(tmp_path):
    """A B-tree key that puts a chunk at column 4 of a 4-column dataset:
    libhdf5 reads fill values for those rows; stoker must not deliver the
    chunk's bytes there."""
    h5py = pytest.importorskip("h5py")
    p = _h5_with_a_key_changed(tmp_path, 10, 1, 4)
    with h5py.File(p) as f:
        assert (f["d"][10:20] == 0).all()   # what libhdf5 reads there
    with pytest.raises(stoker.StokerError) as ei:
        stoker.index(p, tmp_path / "a.idx", dataset="d")
    assert "chunk" in str(ei.value) and "whole rows" in str(ei.value)


# ---- resource limits ---------------------------------------------------------------------

def test_a_low_descriptor_limit_is_kept_with_many_shards_and_files(tmp_path):
    """Under `ulimit -n 64`, 227 shards and an index of 300 files read with
    every backend and order, verify and doctor: the loader's descriptor
    cache holds the reads of a block-order group in slices within its
    budget (they once pinned every shard of the group at once), and the
    device measurement opens its files one at a time."""
    import resource
    ds = tmp_path / "ds"
    stoker.write(ds, {"x": np.arange(227 * 1024, dtype=np.float32).reshape(-1, 1024)},
                 shard_bytes=4096, sync=False)
    assert len(list(ds.glob("shard-*.stk"))) >= 200
    files = tmp_path / "files"
    files.mkdir()
    for i in range(300):
        np.save(files / f"f{i:03d}.npy", np.full(4, i, np.float32))
    subprocess.run([cli(), "index", str(files), "-o", str(files / "files.idx")], check=True,
                   capture_output=True)

    def low():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    def run(*args):
        p = subprocess.run([cli(), *args], capture_output=True, text=True, preexec_fn=low,
                           timeout=120)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        return p.stdout

    for path, n in ((ds, 227), (files / "files.idx", 300)):
        for backend in ("pool", "uring", "mmap"):
            for order in ("sequential", "random", "block"):
                out = run("read", str(path), "--backend", backend, "--shuffle", order,
                          "--batch", "4", "--json", "--block-bytes", "64K", "--block-group", "64")
                assert json.loads(out)["samples"] == n, (backend, order, out)
        run("verify", str(path))
    # The device measurement (as doctor and stoker.profile take it), in a
    # child under the same limit.
    code = ("import os, resource, stoker; resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n"
            "ld = stoker.Loader(%r, batch_size=4, shuffle='block', backend='pool')\n"
            "print(sum(len(b['x']) for b in ld))\n"
            "for f in os.listdir(%r):\n"
            "    fd = os.open(os.path.join(%r, f), os.O_RDONLY)\n"
            "    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)\n"
            "print(*ld._c.measure_limit())\n" % (str(ds), str(ds), str(ds)))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "227", p.stdout
    # The device was measured (its figure replaced memcpy's), or the data
    # could not be evicted here (resident is then the reason).
    assert "device" in lines[1] or float(lines[1].split()[-1]) >= 0.9, lines[1]


# ---- an index names files by path: only under its root, unless trusted -------------------

def test_an_index_reads_only_files_under_its_root_unless_the_reader_trusts_it(tmp_path):
    """A crafted index can name any file (absolute, ../.., a link out of
    the tree); the loader refuses every file that does not resolve under
    the index's directory, naming it, unless the reader names a root."""
    data = tmp_path / "data"
    data.mkdir()
    secret = tmp_path / "secret.npy"
    np.save(secret, np.full(4, 7, np.float32))
    for i in range(3):
        np.save(data / f"a{i}.npy", np.full(4, i, np.float32))
    idx = data / "ok.idx"
    stoker.index(data, idx)
    assert sum(len(b["data"]) for b in stoker.Loader(idx, batch_size=2)) == 3
    doc = json.loads(idx.read_text())
    st = os.stat(secret)
    (data / "link.npy").symlink_to(secret)
    for name, path in (("abs", str(secret)), ("dotdot", "../secret.npy"),
                       ("link", "link.npy")):
        crafted = json.loads(json.dumps(doc))
        crafted["files"][1].update(path=path, size=st.st_size, mtime_ns=st.st_mtime_ns)
        bad = data / f"{name}.idx"
        bad.write_text(json.dumps(crafted))
        with pytest.raises(stoker.StokerError) as ei:
            stoker.Loader(bad, batch_size=2)
        msg = str(ei.value)
        assert ei.value.code == -1015, msg
        assert str(secret) in msg and "file 1" in msg and str(data) in msg, msg
        p = subprocess.run([cli(), "cat", str(bad), "1"], capture_output=True, text=True)
        assert p.returncode != 0 and "lies outside" in p.stderr, p.stderr
        # The reader who trusts it says so.
        got = [b["data"] for b in stoker.Loader(bad, batch_size=3, shuffle="sequential",
                                               root=tmp_path)]
        assert got[0][1].tolist() == [7, 7, 7, 7]


def test_an_index_written_away_from_its_files_says_which_root_to_allow(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        np.save(data / f"a{i}.npy", np.full(4, i, np.float32))
    out = tmp_path / "elsewhere"
    out.mkdir()
    p = subprocess.run([cli(), "index", str(data), "-o", str(out / "d.idx")],
                       capture_output=True, text=True, check=True)
    assert "note:" in p.stdout and f"--root {data}" in p.stdout, p.stdout
    p = subprocess.run([cli(), "read", str(out / "d.idx")], capture_output=True, text=True)
    assert p.returncode != 0 and f"allows root {data} " in p.stderr, p.stderr
    for cmd in (["read"], ["inspect"], ["verify"], ["cat", "--field", "data"], ["doctor"]):
        args = [cli(), cmd[0], str(out / "d.idx"), "--root", str(data), *cmd[1:]]
        if cmd[0] == "cat":
            args.insert(3, "2")
        p = subprocess.run(args, capture_output=True, text=True)
        assert p.returncode == 0, (cmd, p.stderr)
    ld = stoker.Loader(out / "d.idx", batch_size=3, shuffle="sequential", root=data)
    assert [b["data"][:, 0].tolist() for b in ld] == [[0, 1, 2]]
    with pytest.raises(stoker.NotFound):
        stoker.Loader(out / "d.idx", batch_size=3, root=tmp_path / "nowhere")


# ---- resume and merge take only the inputs they started from ------------------------------

def _npy_tree(root, n, size=2048):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        np.save(root / f"f{i:03d}.npy", np.full(size, i, np.float32))


def test_resume_refuses_inputs_that_changed(tmp_path):
    """`stoker pack --resume` continues only the pack of the same inputs:
    a file added that sorts first, one deleted, one rewritten, or another
    directory of the same names are refused, naming why; the same inputs
    resume after the shards already packed, equal to an uninterrupted pack."""
    import signal
    import time
    src = tmp_path / "src"
    _npy_tree(src, 300, size=256 << 10)  # 1 MiB each
    out = tmp_path / "ds"

    def args(*extra, inputs=(src,)):
        return [cli(), "pack", "--from", "npy", *map(str, inputs), "-o", str(out),
                "--shard-size", "2M", "--no-sync", *extra]

    def pack(*extra, inputs=(src,)):
        return subprocess.run(args(*extra, inputs=inputs), capture_output=True, text=True)

    # Killed once the journal lists a few shards (a pack that finishes first
    # is started again on a fresh directory).
    for attempt in range(20):
        subprocess.run(["rm", "-rf", str(out)])
        proc = subprocess.Popen(args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        marker = out / ".packing"
        while proc.poll() is None:
            try:
                if marker.read_text().count("\nshard ") >= 3:
                    proc.send_signal(signal.SIGKILL)
                    break
            except OSError:
                pass
            time.sleep(0.0005)
        proc.wait()
        if proc.returncode == -signal.SIGKILL:
            break
    else:
        pytest.skip("the pack always finished before it could be killed")
    assert opens_incomplete(out)

    def refused(p, says):
        return (p.returncode != 0 and "an input changed since the interrupted pack began" in
                p.stderr and says in p.stderr), p.stderr

    np.save(src / "a_first.npy", np.full(256 << 10, -1, np.float32))
    assert refused(pack("--resume"), f"{src}/a_first.npy added")
    (src / "a_first.npy").unlink()
    (src / "f299.npy").rename(tmp_path / "f299.npy")
    assert refused(pack("--resume"), f"{src}/f299.npy removed")
    (tmp_path / "f299.npy").rename(src / "f299.npy")
    five = (src / "f005.npy").read_bytes()
    st = os.stat(src / "f005.npy")
    (src / "f005.npy").write_bytes(five)  # rewritten: the same bytes, a new time
    assert refused(pack("--resume"), f"{src}/f005.npy changed (its modification time)")
    (src / "f005.npy").write_bytes(five[:-4] + b"\x00\x00\x80\x7f")  # same size, last value
    os.utime(src / "f005.npy", ns=(st.st_atime_ns, st.st_mtime_ns))  # and its time put back
    assert refused(pack("--resume"), f"{src}/f005.npy changed (its first or last bytes")
    (src / "f005.npy").write_bytes(five)
    os.utime(src / "f005.npy", ns=(st.st_atime_ns, st.st_mtime_ns))
    other = tmp_path / "other"
    _npy_tree(other, 300, size=256 << 10)
    assert refused(pack("--resume", inputs=(other,)), f"{other}/f000.npy added")
    # Refusing touched nothing; the same inputs resume after what was packed.
    assert opens_incomplete(out)
    p = pack("--resume")
    assert p.returncode == 0 and "resuming after" in p.stderr, p.stderr
    got = [int(b["x"][0][0]) for b in stoker.Loader(out, batch_size=1, shuffle="sequential")]
    assert got == list(range(300))
    r = subprocess.run([cli(), "verify", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_merge_refuses_parts_packed_from_different_inputs(tmp_path):
    src = tmp_path / "src"
    _npy_tree(src, 10)
    out = tmp_path / "ds"

    def part(i):
        subprocess.run([cli(), "pack", "--from", "npy", str(src), "-o", str(out), "--part",
                        f"{i}/2", "--no-sync", "-q"], check=True, capture_output=True)

    part(0)
    np.save(src / "f100.npy", np.full(2048, 100, np.float32))  # the set changed in between
    part(1)
    p = subprocess.run([cli(), "merge", str(out)], capture_output=True, text=True)
    assert p.returncode != 0 and "packed from other inputs" in p.stderr, p.stderr
    assert f"{src}/f100.npy added between them" in p.stderr, p.stderr
    assert opens_incomplete(out)
    subprocess.run([cli(), "pack", "--from", "npy", str(src), "-o", str(out), "--part", "0/2",
                    "--no-sync", "-q", "--force"], check=True, capture_output=True)
    subprocess.run([cli(), "merge", str(out)], check=True, capture_output=True)
    n = sum(len(b["x"]) for b in stoker.Loader(out, batch_size=4))
    assert n == 11
