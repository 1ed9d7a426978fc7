"""Shared fixtures for the tests of the `stoker` command line.

The binary is <STOKER_BUILD>/stoker; STOKER_BUILD defaults to "build" and a
relative value is taken relative to the repository root (not the current
directory), so `STOKER_BUILD=build-py python -m pytest tests/python` works
from anywhere.

The `stoker` fixture is a `Stoker`: call it like the program,
`stoker("inspect", ds)`, and get the `subprocess.CompletedProcess` back
(stdout and stderr captured as text).  It also has a few helpers that the
tests share: `ok()` (run and insist on exit status 0), `pack()`, `inspect()`
(parsed), `cat()` (parsed; `.array()` gives the values as numpy) and
`all_records()`.
"""

import os
from pathlib import Path

import pytest

# DataLoader workers start by fork by default.  Under AddressSanitizer
# (make py-asan) a fork taken while another thread of the parent holds the
# sanitizer's allocator lock (a multiprocessing queue's feeder thread, say)
# leaves the child deadlocked at its first malloc; ASan, unlike glibc's
# malloc, does not take its locks around fork.  That run sets this variable
# to start workers from a clean server process instead.
if os.environ.get("STOKER_TEST_START_METHOD"):
    import multiprocessing
    multiprocessing.set_start_method(os.environ["STOKER_TEST_START_METHOD"], force=True)

from stkcli import REPO_ROOT, Stoker

# `make test` samples the long randomized loops (the kill loops) with a seed
# of its own each run; `make test-full` (STOKER_TEST_FULL=1, which CI runs
# too) runs every case.  The seed is printed in the header: STOKER_TEST_SEED
# replays a run's choices.
FULL = os.environ.get("STOKER_TEST_FULL", "") not in ("", "0")
SEED = int(os.environ.get("STOKER_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
os.environ["STOKER_TEST_SEED"] = str(SEED)  # (pytest-xdist's workers, started later, inherit it)


def _seed_line():
    return (f"stoker: {'every case (STOKER_TEST_FULL=1)' if FULL else 'sampled cases'}, "
            f"STOKER_TEST_SEED={SEED}")


def pytest_report_header(config):
    return _seed_line()


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(_seed_line())  # (also under -q, where no header is shown)


def cases(full, sampled):
    """How many cases of a randomized loop to run: `full` under
    STOKER_TEST_FULL=1, else `sampled`."""
    return full if FULL else sampled


def stoker_exe():
    build = Path(os.environ.get("STOKER_BUILD", "build"))
    if not build.is_absolute():
        build = REPO_ROOT / build
    return build / "stoker"


@pytest.fixture(scope="session")
def stoker():
    exe = stoker_exe()
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        pytest.fail(
            f"the stoker binary is not at {exe}; build it first "
            f"(make build BUILD=...) and set STOKER_BUILD to the build directory"
        )
    return Stoker(exe)


# ---- fixtures of the tests of the Python package (test_py_*.py) ----------

@pytest.fixture
def no_dist_env(monkeypatch):
    """No launcher's variables: a Loader's rank and world size default to 0/1."""
    from stoker._ranks import VARIABLES
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ids_ds(tmp_path):
    """A dataset of 240 records: `id` (int64, the record number) and `x`
    (float32 [5, 3], equal to id * 100 + the element's index), and the
    source arrays as (path, dict)."""
    import numpy as np
    import stoker

    n = 240
    src = {
        "id": np.arange(n, dtype=np.int64),
        "x": (np.arange(n, dtype=np.float32)[:, None, None] * 100
              + np.arange(15, dtype=np.float32).reshape(5, 3)),
    }
    path = tmp_path / "ids.stk"
    assert stoker.write(path, src) == n
    return path, src
