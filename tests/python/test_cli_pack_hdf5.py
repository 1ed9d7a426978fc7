"""stoker pack --from hdf5: the rows of HDF5 datasets packed as records
(one field per dataset, rows aligned), through libhdf5, so any layout, byte
order and filter it decodes; and every refusal of `stoker index` for an
HDF5 dataset it cannot read in place advises a command that works: each is
run here, and what it packs equals what h5py reads."""
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

import stoker as stk

h5py = pytest.importorskip("h5py")


def records(path):
    """Every record of the dataset at `path`, as a dict of arrays of all rows."""
    with stk.Loader(path, batch_size=1 << 20, shuffle="sequential") as ld:
        (b,) = list(ld)
    return {k: np.asarray(v) for k, v in b.items()}


def test_two_datasets_of_two_files_are_records_with_a_field_each(stoker, tmp_path):
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(n, 4, 3)).astype(np.float32) for n in (37, 20)]
    ys = [rng.integers(-9, 9, size=n).astype(">i8") for n in (37, 20)]   # big-endian
    for i in range(2):
        with h5py.File(tmp_path / f"f{i}.h5", "w") as f:
            f.create_dataset("grp/feat", data=xs[i], chunks=(5, 2, 3), compression="gzip",
                             shuffle=True)   # chunks that cut rows apart
            f.create_dataset("label", data=ys[i], chunks=(8,), scaleoffset=0)
    stoker.ok("pack", "--from", "hdf5", tmp_path / "f0.h5", tmp_path / "f1.h5",
              "--dataset", "grp/feat", "--dataset", "y=label", "-o", tmp_path / "ds", "-q")
    got = records(tmp_path / "ds")
    assert sorted(got) == ["feat", "y"]
    np.testing.assert_array_equal(got["feat"], np.concatenate(xs))
    assert got["y"].dtype == np.int64
    np.testing.assert_array_equal(got["y"], np.concatenate(ys).astype(np.int64))
    # Parts, joined by merge: the same records.
    for i in range(3):
        stoker.ok("pack", "--from", "hdf5", tmp_path / "f0.h5", tmp_path / "f1.h5",
                  "--dataset", "grp/feat", "--dataset", "y=label", "-o", tmp_path / "parts",
                  "--part", f"{i}/3", "-q")
    stoker.ok("merge", tmp_path / "parts")
    np.testing.assert_array_equal(records(tmp_path / "parts")["feat"], np.concatenate(xs))
    # The only dataset of a file needs no --dataset; the help says how.
    with h5py.File(tmp_path / "one.h5", "w") as f:
        f.create_dataset("v", data=np.arange(6, dtype=np.float64))
    stoker.ok("pack", "--from", "hdf5", tmp_path / "one.h5", "-o", tmp_path / "one", "-q")
    np.testing.assert_array_equal(records(tmp_path / "one")["v"], np.arange(6.0))
    assert "--dataset" in stoker.ok("pack", "--from", "hdf5", "--help").stdout


def test_inputs_that_do_not_fit_are_refused_naming_them(stoker, tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f.create_dataset("x", data=np.zeros((5, 3), np.float32))
        f.create_dataset("y", data=np.zeros(4, np.int32))
        f.create_dataset("s", data=np.array([b"ab", b"cd"]))
    with h5py.File(tmp_path / "b.h5", "w") as f:
        f.create_dataset("x", data=np.zeros((5, 4), np.float32))
    cases = [
        (["a.h5", "--dataset", "x", "--dataset", "y"], r"'y' has 4 rows and 'x' 5"),
        (["a.h5", "b.h5", "--dataset", "x"], r"b\.h5: dataset 'x' has rows of f32 \(4,?\), not "
                                             r"f32 \(3,?\)"),
        (["a.h5", "--dataset", "nope"], r"a\.h5: no dataset 'nope'"),
        (["a.h5"], r"a\.h5: holds 3 datasets; name those to pack with --dataset"),
        (["a.h5", "--dataset", "s"], r"'s' holds neither integers nor IEEE floats"),
    ]
    for args, want in cases:
        r = stoker("pack", "--from", "hdf5", *[str(tmp_path / a) if a.endswith(".h5") else a
                                               for a in args], "-o", tmp_path / "out")
        assert r.returncode == 2 and re.search(want, r.stderr), (args, r.stderr)
        assert not (tmp_path / "out" / "manifest.json").exists()


def refusals(p):
    """Datasets `stoker index` cannot read in place, and what h5py reads."""
    rng = np.random.default_rng(2)
    data = rng.normal(size=(60, 5)).astype(np.float32)
    ints = rng.integers(0, 1000, size=(60, 5)).astype(np.int32)
    with h5py.File(p, "w", libver="earliest") as f:
        f.create_dataset("split", data=data, chunks=(10, 2))
        f.create_dataset("bigend", data=data.astype(">f4"))
        f.create_dataset("scaled", data=ints, chunks=(10, 5), scaleoffset=0)
        f.create_dataset("lzf", data=data, chunks=(10, 5), compression="lzf")
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple((6, 5))
        h5py.h5d.create(f.id, b"compact", h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)
        f["compact"][...] = data[:6]
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((8, 5))
        dcpl.set_deflate(4)
        dcpl.set_shuffle()
        h5py.h5d.create(f.id, b"order", h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple((60, 5)),
                        dcpl=dcpl)
        f["order"][...] = data
        # Only the first two chunks written: the rest read as the fill value.
        d = f.create_dataset("holes", shape=(60, 5), dtype=np.float32, chunks=(10, 5),
                             fillvalue=-1.0)
        d[:20] = data[:20]
    with h5py.File(p.with_name("latest.h5"), "w", libver="latest") as f:
        f.create_dataset("d", data=data, chunks=(10, 5), compression="gzip")


@pytest.mark.parametrize("name", ["split", "bigend", "scaled", "lzf", "compact", "order",
                                  "holes", "latest:d"])
@pytest.mark.parametrize("deep", [False, True])
def test_every_refusal_advises_a_command_that_works(stoker, tmp_path, name, deep):
    src = tmp_path / "in dir"   # a space: the advice must quote the path
    if deep:  # a long path: the message is shortened, never the command at its end
        src = tmp_path / ("a long folder name " * 6) / "in dir"
        src.parent.mkdir()
    src.mkdir()
    refusals(src / "r.h5")
    file, _, dset = name.rpartition(":")
    path = src / ((file or "r") + ".h5")
    r = stoker("index", path, "--dataset", dset, "-o", tmp_path / "x.idx")
    assert r.returncode != 0, r.stdout
    msg = r.stderr.strip()
    m = re.search(r"(stoker pack --from hdf5 .* -o OUT\.stk|python3 -c '.*')$", msg)
    assert m, msg
    out = tmp_path / "out.stk"
    argv = shlex.split(m.group(1).replace("OUT.stk", str(out)))
    argv[0] = str(stoker.exe) if argv[0] == "stoker" else sys.executable
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (argv, run.stderr)
    with h5py.File(path, "r") as f:
        want = f[dset][:]
    (got,) = records(out).values()
    np.testing.assert_array_equal(got, want.astype(want.dtype.newbyteorder("=")))
