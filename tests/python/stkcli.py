"""Helpers shared by the tests of the `stoker` command line (see conftest.py
for the `stoker` fixture that hands out a `Stoker`)."""

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]

# Every command runs under this limit so that a hang fails the test instead of
# stalling the suite; it is a safety net, not a timing assertion.
RUN_TIMEOUT_S = 300

# stoker's dtype names and the numpy dtype that holds the same values.
STK_TO_NP = {
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
}


def stored(arr):
    """What stoker stores for a numpy array: bool becomes u8, the rest stays."""
    arr = np.asarray(arr)
    return arr.astype(np.uint8) if arr.dtype == np.bool_ else arr


def assert_same(got, want):
    """Exact comparison of a record read back with the array that was packed:
    same dtype, same shape, same values (NaN equals NaN)."""
    want = stored(want)
    assert got.dtype == want.dtype, f"dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    if want.dtype.kind == "f":
        assert np.array_equal(got, want, equal_nan=True), f"{got!r} != {want!r}"
    else:
        assert np.array_equal(got, want), f"{got!r} != {want!r}"


@dataclass
class CatRecord:
    """One record as `stoker cat --limit 0` printed it."""

    index: int
    field: str
    dtype: str  # stoker's name: f32, u8, ...
    shape: tuple
    tokens: list  # the printed values, as text
    text: str = ""

    def array(self):
        npdt = STK_TO_NP[self.dtype]
        if np.dtype(npdt).kind == "f":
            vals = [float(t) for t in self.tokens]
        else:
            vals = [int(t) for t in self.tokens]
        return np.array(vals, dtype=npdt).reshape(self.shape)


@dataclass
class Inspect:
    """The parts of `stoker inspect` output the tests look at."""

    text: str
    records: int
    shards: int
    fields: list  # (name, dtype, shape, codec), shape as printed: "[*, 3]"
    shard_rows: list = field(default_factory=list)  # (file, first, records, bytes)
    more: int = 0  # "... N more (--all lists them)"


def parse_inspect(text):
    m = re.search(r"^records\s+(\d+)$", text, re.M)
    assert m, f"no records line in:\n{text}"
    records = int(m.group(1))
    # An in-place index lists its files where a dataset lists its shards.
    m = re.search(r"^(?:shards|files)\s+(\d+),", text, re.M)
    assert m, f"no shards line in:\n{text}"
    shards = int(m.group(1))
    lines = text.splitlines()
    fields, rows, more = [], [], 0
    i = next(k for k, ln in enumerate(lines) if ln.startswith("fields"))
    nfields = int(lines[i].split()[1])
    assert lines[i + 1].split() == ["name", "dtype", "shape", "codec"], text
    for ln in lines[i + 2 : i + 2 + nfields]:
        fm = re.match(r"^\s+(\S+)\s+(\S+)\s+(\[.*?\])\s+(\S+)$", ln)
        assert fm, f"bad field line {ln!r}"
        fields.append(fm.groups())
    for ln in lines[i + 2 + nfields :]:
        sm = re.match(r"^\s+(\S+\.stk)\s+(\d+)\s+(\d+)\s+(\d+)$", ln)
        if sm:
            rows.append((sm.group(1), int(sm.group(2)), int(sm.group(3)), int(sm.group(4))))
        mm = re.match(r"^\s+\.\.\. (\d+) more \(--all lists them\)$", ln)
        if mm:
            more = int(mm.group(1))
    return Inspect(text, records, shards, fields, rows, more)


def parse_cat(text):
    """Parses `stoker cat` output of one field, printed with --limit 0."""
    lines = text.splitlines()
    m = re.match(r"^record (\d+)$", lines[0])
    assert m, f"bad cat output:\n{text}"
    h = re.match(r"^(\S+): (\S+) \(([0-9, ]*)\)$", lines[1])
    assert h, f"bad cat field line {lines[1]!r}"
    shape = tuple(int(s) for s in h.group(3).split(",") if s.strip())
    tokens = []
    for ln in lines[2:]:
        assert ln.startswith("  ") or ln == "", f"unexpected line {ln!r}"
        assert "..." not in ln and "shown" not in ln, "cat output was cut short"
        tokens.extend(ln.split())
    return CatRecord(int(m.group(1)), h.group(1), h.group(2), shape, tokens, text)


class Stoker:
    def __init__(self, exe):
        self.exe = Path(exe)

    def __call__(self, *args, timeout=RUN_TIMEOUT_S, cwd=None):
        return run_cmd([self.exe, *args], timeout=timeout, cwd=cwd)

    run = __call__

    def ok(self, *args):
        r = self(*args)
        assert r.returncode == 0, (
            f"stoker {' '.join(map(str, args))} exited {r.returncode}\n"
            f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        )
        return r

    def popen(self, *args):
        return subprocess.Popen(
            [str(self.exe), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def pack(self, inputs, out, *opts):
        if isinstance(inputs, (str, os.PathLike)):
            inputs = [inputs]
        return self.ok("pack", "--from", "npy", *inputs, "-o", out, "-q", *opts)

    def inspect(self, ds, *opts):
        return parse_inspect(self.ok("inspect", ds, *opts).stdout)

    def cat(self, ds, rec, *opts):
        return parse_cat(self.ok("cat", ds, rec, "--limit", "0", *opts).stdout)

    def all_records(self, ds):
        n = self.inspect(ds).records
        return [self.cat(ds, i) for i in range(n)]


def run_cmd(argv, timeout=RUN_TIMEOUT_S, cwd=None):
    """Runs a command with its output captured; returns the CompletedProcess."""
    return subprocess.run(
        [str(a) for a in argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def shard_files(ds):
    """The shard files in a dataset directory, sorted by name."""
    return sorted(p.name for p in Path(ds).iterdir() if p.name.endswith(".stk"))


def save(path, arr):
    """numpy.save to `path` (parents created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, arr, allow_pickle=False)
    assert path.exists()
    return path
