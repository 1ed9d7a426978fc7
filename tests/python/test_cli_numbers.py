"""Numeric options refuse what they cannot hold: a value one past the
range of what the option sets, a negative, junk and a number past 64 bits
are usage errors (exit 2) that name the option, never a value cut down to
fit.  The largest value each option holds gets past the parser, and is run
where that is cheap.  An option that wants a value and has none is a usage
error too."""

import numpy as np
import pytest

from stkcli import save

U32 = 2**32 - 1
U64 = 2**64 - 1
INT = 2**31 - 1

# The numeric options of `stoker read` (and of doctor, which takes them
# all): (option, smallest, largest).
READ_NUMBERS = [
    ("--batch", 1, U32),
    ("--window", 0, U64),
    ("--stride", 0, U64),
    ("--block-group", 0, U32),
    ("--seed", 0, U64),
    ("--epoch", 0, U64),
    ("--epochs", 0, U64),
    ("--rank", 0, U32),
    ("--world-size", 0, U32),
    ("--streams", 1, U32),
    ("--threads", 0, INT),
    ("--prefetch", 0, U32),
    ("--max-batches", 0, U64),
]
READ_SIZES = ["--block-bytes", "--budget"]

# What is left out of the option itself: the rest of a valid command line
# with DATASET standing for the dataset's path.
OTHER_NUMBERS = [
    (["verify", "DATASET"], "--threads", 0, 256),
    (["cat", "DATASET", "0"], "--limit", 0, U64),
    (["pack", "--from", "npy", "A", "-o", "OUT"], "--align", 0, 4096),
]

# An unknown option after the one tested: reaching it shows that the
# parser took the value, without running anything.
SENTINEL = "--no-such-option"


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    import stoker as stk

    tmp = tmp_path_factory.mktemp("numbers")
    ds = tmp / "ds"
    stk.write(ds, {"x": np.arange(40 * 3, dtype=np.float32).reshape(40, 3)})
    a = save(tmp / "a.npy", np.arange(12, dtype=np.float32).reshape(3, 4))
    return {"DATASET": ds, "A": a, "OUT": tmp / "out", "tmp": tmp}


def line(paths, args):
    """`args` with DATASET, A and OUT replaced by their paths."""
    return [paths.get(a, a) for a in args]


def refused(r, opt, says=None):
    assert r.returncode == 2, r.stderr
    assert opt in r.stderr, r.stderr
    assert "--help" in r.stderr, r.stderr
    assert r.stdout == ""
    if says:
        assert says in r.stderr, r.stderr


def parsed(r):
    """The value was taken: the parser went on to the sentinel."""
    assert r.returncode == 2, r.stderr
    assert f"unknown option '{SENTINEL}'" in r.stderr, r.stderr


def _numeric_cases():
    for cmd in ("read", "doctor"):
        for opt, lo, hi in READ_NUMBERS:
            yield pytest.param([cmd, "DATASET"], opt, lo, hi, id=f"{cmd}{opt}")
    for args, opt, lo, hi in OTHER_NUMBERS:
        yield pytest.param(args, opt, lo, hi, id=f"{args[0]}{opt}")


NUMERIC_CASES = list(_numeric_cases())


@pytest.mark.parametrize("args, opt, lo, hi", NUMERIC_CASES)
def test_one_past_the_largest_is_refused(stoker, paths, args, opt, lo, hi):
    r = stoker(*line(paths, args), opt, str(hi + 1))
    refused(r, opt, f"{opt}: {hi + 1} is not in {lo}..{hi}")
    assert not paths["OUT"].exists()


@pytest.mark.parametrize("args, opt, lo, hi", NUMERIC_CASES)
def test_past_64_bits_is_refused(stoker, paths, args, opt, lo, hi):
    big = "99999999999999999999999"
    refused(stoker(*line(paths, args), opt, big), opt, f"{big} is not in {lo}..{hi}")


@pytest.mark.parametrize("args, opt, lo, hi", NUMERIC_CASES)
@pytest.mark.parametrize("junk", ["-1", "12x", "", "+5", " 5", "1.5", "0x10", "1e3"])
def test_negative_and_junk_are_refused(stoker, paths, args, opt, lo, hi, junk):
    refused(stoker(*line(paths, args), opt, junk), opt, f"'{junk}'")


# Where 0 is valid, below it is a negative: junk, above.
@pytest.mark.parametrize("args, opt, lo, hi", [c for c in NUMERIC_CASES if c.values[2] > 0])
def test_below_the_smallest_is_refused(stoker, paths, args, opt, lo, hi):
    refused(stoker(*line(paths, args), opt, str(lo - 1)), opt, f"{lo - 1} is not in {lo}..{hi}")


@pytest.mark.parametrize("args, opt, lo, hi", NUMERIC_CASES)
def test_the_largest_and_smallest_are_taken(stoker, paths, args, opt, lo, hi):
    for v in (hi, lo):
        parsed(stoker(*line(paths, args), opt, str(v), SENTINEL))


@pytest.mark.parametrize("cmd", ["read", "doctor"])
@pytest.mark.parametrize("opt", READ_SIZES)
def test_sizes(stoker, paths, cmd, opt):
    ds = paths["DATASET"]
    for v in ("18446744073709551616", "16777216T", "16777216TiB", "99999999999999999999999"):
        refused(stoker(cmd, ds, opt, v), opt, f"{v} is not in 0..{U64}")
    for v in ("-1", "-1K", "12x", "", "1.5.5", "K", "4iB", " 5"):
        refused(stoker(cmd, ds, opt, v), opt, f"'{v}'")
    for v in (str(U64), "16777215T", "16777215.5T", "1.5K", "4MiB", "4MB", "0"):
        parsed(stoker(cmd, ds, opt, v, SENTINEL))


def test_read_runs_with_the_largest_values(stoker, paths):
    ds = paths["DATASET"]
    big = [("--seed", U64), ("--epoch", U64), ("--max-batches", U64), ("--stride", U64),
           ("--block-group", U32), ("--block-bytes", U64), ("--budget", U64)]
    for opt, v in big:
        r = stoker.ok("read", ds, opt, str(v), "--max-batches", "1")
        assert "read 32 samples in 1 batches" in r.stdout, (opt, r.stdout)
    r = stoker.ok("read", ds, "--max-batches", str(U64))
    assert "read 40 samples in 2 batches" in r.stdout
    # The last rank of the most ranks gets nothing of 40 samples.
    r = stoker.ok("read", ds, "--rank", str(U32 - 1), "--world-size", str(U32))
    assert "read 0 samples" in r.stdout
    # The library refuses what makes no sense for it, in its own words.
    for opt, v, says in [("--threads", INT, "threads"), ("--batch", U32, "memory_budget"),
                         ("--window", U64, "window")]:
        r = stoker("read", ds, opt, str(v))
        assert r.returncode == 2
        assert says in r.stderr and "stoker read:" not in r.stderr, r.stderr


def test_doctor_runs_max_batches(stoker, paths):
    r = stoker.ok("doctor", paths["DATASET"], "--max-batches", "1", "--batch", "4")
    assert "verdict" in r.stdout


@pytest.mark.parametrize("bad", ["-1", "12x", "", "inf", "nan", "1e400", "-0.5"])
def test_doctor_step_ms_is_refused(stoker, paths, bad):
    r = stoker("doctor", paths["DATASET"], "--step-ms", bad)
    refused(r, "--step-ms", f"'{bad}'")


def test_verify_and_cat_run_with_the_largest_values(stoker, paths):
    ds = paths["DATASET"]
    stoker.ok("verify", ds, "-q", "--threads", "256")
    r = stoker.ok("cat", ds, "7", "--limit", str(U64))
    assert "21 22 23" in r.stdout and "shown" not in r.stdout
    r = stoker("cat", ds, str(U64))
    assert r.returncode == 2 and "out of range" in r.stderr


def test_pack_align_and_shard_size(stoker, paths):
    pack = ["pack", "--from", "npy", paths["A"], "-o", paths["OUT"], "-q", "--force"]
    stoker.ok(*pack, "--align", "4096", "--shard-size", str(U64))
    stoker.ok("verify", paths["OUT"], "-q")
    for v in ("18446744073709551616", "16777216T"):
        refused(stoker(*pack, "--shard-size", v), "--shard-size", f"{v} is not in 0..{U64}")
    for v in ("-1", "12x", "", "1.5.5"):
        refused(stoker(*pack, "--shard-size", v), "--shard-size", f"'{v}'")


@pytest.mark.parametrize(
    "part, says",
    [
        (f"0/{U32 + 1}", f"--part: {U32 + 1} is not in 1..{U32}"),
        (f"{U32}/{U32}", f"--part: {U32} is not in 0..{U32 - 1}"),
        (f"{U32 + 1}/3", f"--part: {U32 + 1} is not in 0..2"),
        ("0/0", f"--part: 0 is not in 1..{U32}"),
        ("0/99999999999999999999999", "is not in 1.."),
        ("-1/3", "'-1'"),
        ("1/-3", "'-3'"),
        ("1/3x", "'3x'"),
        ("1", "'1'"),
    ],
)
def test_pack_part_is_refused(stoker, paths, part, says):
    out = paths["tmp"] / "parts"
    r = stoker("pack", "--from", "npy", paths["A"], "-o", out, "--part", part)
    refused(r, "--part", says)
    assert not out.exists()


def test_pack_part_largest(stoker, paths):
    pack = ["pack", "--from", "npy", paths["A"], "-q", "--part"]
    parsed(stoker(*pack, f"{U32 - 1}/{U32}", "-o", paths["tmp"] / "p1", SENTINEL))
    # The library takes fewer parts, and says so in its own words.
    r = stoker(*pack, f"{U32 - 1}/{U32}", "-o", paths["tmp"] / "p2")
    assert r.returncode == 2
    assert "parts are numbered" in r.stderr and "stoker pack:" not in r.stderr, r.stderr


def test_pack_compress_level(stoker, paths):
    pack = ["pack", "--from", "npy", paths["A"], "-o", paths["tmp"] / "z", "-q", "--force"]
    refused(stoker(*pack, "--compress", f"zstd:{INT + 1}"), "--compress",
            f"{INT + 1} is not in 0..{INT}")
    refused(stoker(*pack, "--compress", "zstd:99999999999999999999999"), "--compress")
    for bad in ("zstd:-1", "zstd:3x", "zstd:+3"):
        refused(stoker(*pack, "--compress", bad), "--compress", bad)
    # The largest int reaches the library, which says what levels zstd has.
    r = stoker(*pack, "--compress", f"zstd:{INT}")
    assert r.returncode == 2 and "codec level" in r.stderr, r.stderr
    stoker.ok(*pack, "--compress", "zstd:22")


# Every option that takes a value, given none (last on the line).
NEEDS_VALUE = (
    [("pack", o) for o in ["--from", "-o", "--output", "--field", "--compress", "--shard-size",
                           "--align", "--part"]]
    + [("index", o) for o in ["-o", "--output", "--from", "--dataset", "--field", "--ext"]]
    + [("inspect", "--root"), ("verify", "--threads"), ("verify", "--root")]
    + [("cat", o) for o in ["--field", "--limit", "--root"]]
    + [(c, o) for c in ("read", "doctor") for o in
       [o for o, _, _ in READ_NUMBERS] + READ_SIZES +
       ["--valid-field", "--valid", "--shuffle", "--fields", "--backend", "--root", "--warm-up",
        "--trace"]]
    + [("doctor", "--step-ms")]
)


@pytest.mark.parametrize("cmd, opt", NEEDS_VALUE)
def test_option_without_its_value(stoker, paths, cmd, opt):
    lead = {"pack": ["--from", "npy", paths["A"]] if opt != "--from" else [paths["A"]],
            "index": [paths["A"]], "cat": [paths["DATASET"], "0"]}.get(cmd, [paths["DATASET"]])
    r = stoker(cmd, *lead, opt)
    refused(r, opt, f"{opt} needs ")


def test_fields_past_what_read_holds_are_refused(stoker, tmp_path):
    """--fields with more names than read can hold is a usage error, never
    a silent cut to the first ones."""
    names = ",".join(f"f{i}" for i in range(65))
    p = stoker("read", str(tmp_path), "--fields", names)
    assert p.returncode == 2 and "--fields: more than 64 names" in p.stderr, p.stderr
