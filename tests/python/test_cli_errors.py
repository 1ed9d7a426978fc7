"""Bad input, bad datasets and bad command lines: exit status 2 and a message
that says what is wrong and where."""

import numpy as np
import pytest

from stkcli import assert_same, save, shard_files


def pack_fails(stoker, tmp_path, *inputs, opts=()):
    ds = tmp_path / "ds"
    r = stoker("pack", "--from", "npy", *inputs, "-o", ds, *opts)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""
    # Inputs are checked before anything is written.
    assert not ds.exists()
    return r.stderr


# ---- bad .npy input ----

@pytest.mark.parametrize(
    "content",
    [b"hello world, this is not numpy at all\n" * 4, b"", b"\x93NUMP", b"PK\x03\x04" + bytes(60)],
    ids=["text", "empty", "short-magic", "zip"],
)
def test_not_an_npy_file_is_named(stoker, tmp_path, content):
    good = save(tmp_path / "in" / "a.npy", np.zeros(3, np.float32))
    bad = tmp_path / "in" / "b_not_numpy.npy"
    bad.write_bytes(content)
    err = pack_fails(stoker, tmp_path, tmp_path / "in")
    assert "b_not_numpy.npy" in err
    assert "npy" in err.replace("b_not_numpy.npy", "")
    assert good.name not in err


def test_bad_npy_version_is_named(stoker, tmp_path):
    f = save(tmp_path / "v9.npy", np.zeros(3, np.float32))
    data = bytearray(f.read_bytes())
    data[6] = 9
    f.write_bytes(bytes(data))
    err = pack_fails(stoker, tmp_path, f)
    assert "v9.npy" in err
    assert "version" in err


def test_malformed_header_is_named(stoker, tmp_path):
    f = save(tmp_path / "mangled.npy", np.zeros(3, np.float32))
    data = f.read_bytes().replace(b"'shape'", b"'shapf'")
    f.write_bytes(data)
    err = pack_fails(stoker, tmp_path, f)
    assert "mangled.npy" in err


def test_fortran_order_is_named_with_advice(stoker, tmp_path):
    save(tmp_path / "in" / "a.npy", np.zeros((3, 4), np.float32))
    save(tmp_path / "in" / "f.npy", np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)))
    err = pack_fails(stoker, tmp_path, tmp_path / "in")
    assert "f.npy" in err
    assert "Fortran" in err
    assert "ascontiguousarray" in err


@pytest.mark.parametrize("descr", [">f4", ">i8", ">f8", ">u2"])
def test_big_endian_is_refused(stoker, tmp_path, descr):
    f = save(tmp_path / "big.npy", np.arange(5).astype(descr))
    err = pack_fails(stoker, tmp_path, f)
    assert "big.npy" in err
    assert "big-endian" in err
    assert descr in err


def test_single_byte_dtypes_have_no_byte_order(stoker, tmp_path):
    # '|u1' and '|i1' carry no byte order: they are fine.
    f = save(tmp_path / "u1.npy", np.arange(5, dtype=np.uint8))
    ds = tmp_path / "ds"
    stoker.pack(f, ds)
    assert_same(stoker.cat(ds, 0).array(), np.arange(5, dtype=np.uint8))


@pytest.mark.parametrize(
    "arr",
    [np.zeros(3, np.complex64), np.zeros(3, dtype=[("a", "<f4"), ("b", "<i4")]),
     np.array(["ab", "c"]), np.zeros(3, "datetime64[s]")],
    ids=["complex", "structured", "unicode", "datetime"],
)
def test_unsupported_dtype_is_named(stoker, tmp_path, arr):
    f = save(tmp_path / "odd.npy", arr)
    err = pack_fails(stoker, tmp_path, f)
    assert "odd.npy" in err
    assert "support" in err


def test_mismatching_dtypes_name_both_files(stoker, tmp_path):
    save(tmp_path / "in" / "a_f32.npy", np.zeros((2, 3), np.float32))
    save(tmp_path / "in" / "b_f32.npy", np.zeros((2, 3), np.float32))
    save(tmp_path / "in" / "c_f64.npy", np.zeros((2, 3), np.float64))
    err = pack_fails(stoker, tmp_path, tmp_path / "in")
    assert "c_f64.npy" in err
    assert "a_f32.npy" in err
    assert "f64" in err.replace("c_f64.npy", "") and "f32" in err.replace("a_f32.npy", "")


@pytest.mark.parametrize("other", [(2, 4), (2, 3, 1), (6,)], ids=["tail", "ndim+", "ndim-"])
def test_mismatching_shapes_name_both_files(stoker, tmp_path, other):
    save(tmp_path / "in" / "a.npy", np.zeros((2, 3), np.int8))
    save(tmp_path / "in" / "b.npy", np.zeros(other, np.int8))
    err = pack_fails(stoker, tmp_path, tmp_path / "in")
    assert "a.npy" in err and "b.npy" in err


@pytest.mark.parametrize("cut", ["data", "header"])
def test_truncated_npy_is_named(stoker, tmp_path, cut):
    save(tmp_path / "in" / "a.npy", np.arange(1000, dtype=np.float32))
    f = save(tmp_path / "in" / "b_cut.npy", np.arange(1000, dtype=np.float32))
    data = f.read_bytes()
    f.write_bytes(data[: 2000] if cut == "data" else data[:40])
    err = pack_fails(stoker, tmp_path, tmp_path / "in")
    assert "b_cut.npy" in err
    assert "a.npy" not in err


def test_missing_input_is_named(stoker, tmp_path):
    err = pack_fails(stoker, tmp_path, tmp_path / "nowhere.npy")
    assert "nowhere.npy" in err


def test_directory_without_npy_files(stoker, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "readme.txt").write_text("hi")
    err = pack_fails(stoker, tmp_path, tmp_path / "in")
    assert "no .npy files" in err


# ---- existing datasets ----

def test_existing_dataset_needs_force(stoker, tmp_path):
    # 4800-byte records: with --shard-size 4096 each gets a shard.
    old = [np.full((2, 600), 1.5 + k, np.float32) for k in range(6)]
    for k, a in enumerate(old):
        save(tmp_path / "old" / f"{k}.npy", a)
    new = [np.full((3,), -7 - k, np.float32) for k in range(2)]
    for k, a in enumerate(new):
        save(tmp_path / "new" / f"{k}.npy", a)
    ds = tmp_path / "ds"
    stoker.pack(tmp_path / "old", ds, "--shard-size", "4096")
    assert len(shard_files(ds)) == 6
    before = {p.name: p.read_bytes() for p in ds.iterdir()}

    r = stoker("pack", "--from", "npy", tmp_path / "new", "-o", ds)
    assert r.returncode == 2
    assert "--force" in r.stderr
    assert str(ds) in r.stderr
    # The old dataset is untouched, byte for byte, and still reads.
    assert {p.name: p.read_bytes() for p in ds.iterdir()} == before
    stoker.ok("verify", ds)
    assert stoker.inspect(ds).records == 6
    for k, a in enumerate(old):
        assert_same(stoker.cat(ds, k).array(), a)

    stoker.pack(tmp_path / "new", ds, "--force")
    info = stoker.inspect(ds)
    assert info.records == 2
    assert info.fields == [("x", "f32", "[3]", "none")]
    for k, a in enumerate(new):
        assert_same(stoker.cat(ds, k).array(), a)
    # None of the old shards is left behind (the new ones take names of
    # their own, so that the old dataset stayed whole until the new one was).
    assert len(shard_files(ds)) == 1
    stoker.ok("verify", ds)


def test_leftovers_of_an_interrupted_pack_need_force(stoker, tmp_path):
    a = save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    ds = tmp_path / "ds"
    ds.mkdir()
    # What a pack killed early leaves: a shard that begins with the magic
    # (a file of other contents is a user's, and is not removed: see
    # test_py_hostile.py).
    (ds / "shard-000000.stk").write_bytes(b"STKSHARD" + b"half a shard")
    r = stoker("pack", "--from", "npy", a, "-o", ds)
    assert r.returncode == 2
    assert "--force" in r.stderr
    stoker.pack(a, ds, "--force")
    stoker.ok("verify", ds)


# ---- datasets that are not there ----

@pytest.mark.parametrize("args", [["inspect"], ["verify"], ["cat", "{ds}", "0"], ["merge"]],
                         ids=["inspect", "verify", "cat", "merge"])
def test_missing_dataset(stoker, tmp_path, args):
    ds = tmp_path / "no_such_dataset"
    argv = [a.format(ds=ds) for a in args] if len(args) > 1 else [args[0], ds]
    r = stoker(*argv)
    assert r.returncode == 2
    assert "no_such_dataset" in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("cmd", ["inspect", "verify"])
def test_empty_directory_is_not_a_dataset(stoker, tmp_path, cmd):
    r = stoker(cmd, tmp_path)
    assert r.returncode == 2
    assert "not a stoker dataset" in r.stderr


def test_inspect_accepts_the_manifest_path(stoker, tmp_path):
    a = save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    ds = tmp_path / "ds"
    stoker.pack(a, ds)
    assert stoker.inspect(ds / "manifest.json").records == 1


# ---- cat ----

def test_cat_record_out_of_range(stoker, tmp_path):
    for k in range(3):
        save(tmp_path / "in" / f"{k}.npy", np.arange(4, dtype=np.float32))
    ds = tmp_path / "ds"
    stoker.pack(tmp_path / "in", ds)
    stoker.ok("cat", ds, 2)
    for rec in ("3", "1000", "18446744073709551615"):
        r = stoker("cat", ds, rec)
        assert r.returncode == 2
        assert f"record {rec} is out of range" in r.stderr
        assert "3 records" in r.stderr
        assert r.stdout == ""


@pytest.mark.parametrize("rec", ["-1", "x", "1.5", "", "99999999999999999999999"])
def test_cat_record_not_a_number(stoker, tmp_path, rec):
    a = save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    ds = tmp_path / "ds"
    stoker.pack(a, ds)
    r = stoker("cat", ds, rec)
    assert r.returncode == 2
    assert "--help" in r.stderr


# ---- command lines ----

@pytest.mark.parametrize("cmd", ["pack", "merge", "inspect", "verify", "cat"])
def test_unknown_option(stoker, tmp_path, cmd):
    r = stoker(cmd, "--no-such-option", tmp_path)
    assert r.returncode == 2
    assert "--no-such-option" in r.stderr
    assert f"stoker {cmd} --help" in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize(
    "args, says",
    [
        (["pack"], "--from"),
        (["pack", "--from", "npy", "x.npy"], "-o"),
        (["pack", "--from", "npy", "-o", "ds"], "no input"),
        (["pack", "--from", "npy", "x.npy", "-o"], "-o needs a value"),
        (["pack", "--from", "npy", "x.npy", "-o", "ds", "--field"], "--field needs a value"),
        (["pack", "--from", "csv", "x.csv", "-o", "ds"], "csv"),
        (["pack", "--from", "npy", "x.npy", "-o", "ds", "--align", "x"], "--align"),
        (["merge"], "DATASET"),
        (["merge", "a", "b"], "one DATASET"),
        (["inspect"], "DATASET"),
        (["verify"], "DATASET"),
        (["verify", "ds", "--threads"], "--threads needs a value"),
        (["verify", "ds", "--threads", "many"], "--threads"),
        (["cat"], "DATASET and RECORD"),
        (["cat", "ds"], "DATASET and RECORD"),
        (["cat", "ds", "0", "1"], "unexpected argument"),
        (["cat", "ds", "0", "--limit"], "--limit needs a value"),
        (["cat", "ds", "0", "--limit", "ten"], "--limit"),
        (["cat", "ds", "0", "--field"], "--field needs a value"),
    ],
)
def test_usage_errors(stoker, tmp_path, args, says):
    save(tmp_path / "x.npy", np.arange(3, dtype=np.float32))
    r = stoker(*args, cwd=tmp_path)
    assert r.returncode == 2
    assert says in r.stderr
    assert f"stoker {args[0]} --help" in r.stderr
    assert r.stdout == ""
    assert not (tmp_path / "ds").exists()


def test_no_command_and_unknown_command(stoker):
    r = stoker()
    assert r.returncode == 2
    assert "Usage" in r.stderr and "--help" in r.stderr
    r = stoker("frobnicate")
    assert r.returncode == 2
    assert "frobnicate" in r.stderr
    assert "--help" in r.stderr
