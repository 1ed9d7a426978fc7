"""A pack killed part way must never leave something that opens as a dataset
but is not one: the directory either opens complete (and verifies) or reads
as incomplete."""

import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from stkcli import assert_same, save

DELAYS = [0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.2, 0.3]


def stoker_files(ds):
    """The files of ds that make it a dataset or an incomplete one (the
    names docs/FORMAT.md lists)."""
    if not ds.exists():
        return []
    return [
        p.name for p in ds.iterdir()
        if p.name == "manifest.json" or p.name.startswith(".packing")
        or p.name.endswith(".stk") or (p.name.startswith("part-") and p.name.endswith(".json"))
    ]


def make_input(tmp_path, kind):
    """A sizable input and the pack options for it."""
    if kind == "rows":
        # Two million small records: the pack spends its time appending.
        f = save(tmp_path / "rows.npy", np.arange(2_000_000 * 4, dtype=np.float32).reshape(-1, 4))
        return [f], ["--split-axis0", "--shard-size", "4M"], 2_000_000
    # 96 files of 1 MiB: the pack spends its time copying and rolling shards.
    src = tmp_path / "files"
    for k in range(96):
        save(src / f"f{k:03d}.npy", np.full(256 * 1024, k, np.float32))
    return [src], ["--shard-size", "3M"], 96


def kill_after(stoker, delay, inputs, ds, opts):
    """Starts a pack, SIGKILLs it after `delay` seconds.  Returns True when the
    pack had already finished by then (nothing was interrupted)."""
    p = subprocess.Popen(
        [str(stoker.exe), "pack", "--from", "npy", *map(str, inputs), "-o", str(ds), "-q", *opts],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    time.sleep(delay)
    finished = p.poll() is not None
    if not finished:
        p.send_signal(signal.SIGKILL)
    _, err = p.communicate(timeout=300)
    if finished:
        assert p.returncode == 0, err
    else:
        # It may have finished between poll() and the signal.
        assert p.returncode in (0, -signal.SIGKILL), (p.returncode, err)
        finished = p.returncode == 0
    return finished


def check_state(stoker, ds, finished, allowed_records):
    """Returns "complete" or "incomplete" after checking that the state is
    one of the two."""
    r = stoker("inspect", ds)
    if r.returncode == 0:
        # It opens: then it is whole.
        v = stoker("verify", ds)
        assert v.returncode == 0, v.stderr
        n = stoker.inspect(ds).records
        assert n in allowed_records
        return "complete"
    assert not finished, f"a finished pack does not open: {r.stderr}"
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    if stoker_files(ds):
        assert "incomplete" in r.stderr, r.stderr
        v = stoker("verify", ds)
        assert v.returncode == 2, v.stderr
        assert "incomplete" in v.stderr
        c = stoker("cat", ds, 0)
        assert c.returncode == 2 and "incomplete" in c.stderr
    else:
        # Killed before it wrote anything: there is no dataset at all.
        assert "No such file" in r.stderr or "not a stoker dataset" in r.stderr, r.stderr
    return "incomplete"


@pytest.mark.parametrize("kind", ["rows", "files"])
def test_killed_pack_is_complete_or_incomplete(stoker, tmp_path, kind):
    inputs, opts, nrec = make_input(tmp_path, kind)
    seen = {}
    last_incomplete = None
    for delay in DELAYS:
        ds = tmp_path / f"ds-{delay}"
        finished = kill_after(stoker, delay, inputs, ds, opts)
        state = check_state(stoker, ds, finished, {nrec})
        seen[delay] = state
        if state == "incomplete" and stoker_files(ds):
            if last_incomplete is not None:
                shutil.rmtree(last_incomplete)
            last_incomplete = ds
        else:
            shutil.rmtree(ds, ignore_errors=True)  # the inputs are large
    if last_incomplete is not None:
        # What is left needs --force to be packed over, and then packs fine.
        tiny = save(tmp_path / "tiny.npy", np.arange(3, dtype=np.float32))
        r = stoker("pack", "--from", "npy", tiny, "-o", last_incomplete)
        assert r.returncode == 2
        assert "--force" in r.stderr
        stoker.pack(tiny, last_incomplete, "--force")
        stoker.ok("verify", last_incomplete)
        assert_same(stoker.cat(last_incomplete, 0).array(), np.arange(3, dtype=np.float32))
    print(f"{kind}: states by kill delay: {seen}")


def test_killed_forced_repack_never_mixes_old_and_new(stoker, tmp_path):
    # Replacing a dataset with --force: killed part way, the directory holds
    # either the old dataset whole, the new one whole, or reads incomplete.
    inputs, opts, nrec = make_input(tmp_path, "rows")
    old = [np.full((5, 4), -k, np.float32) for k in range(3)]
    for k, a in enumerate(old):
        save(tmp_path / "old" / f"{k}.npy", a)
    for delay in DELAYS:
        ds = tmp_path / f"ds-{delay}"
        stoker.pack(tmp_path / "old", ds, "--split-axis0")
        finished = kill_after(stoker, delay, inputs, ds, [*opts, "--force"])
        state = check_state(stoker, ds, finished, {15, nrec})
        if state == "complete" and stoker.inspect(ds).records == 15:
            rows = np.concatenate(old)
            for k in (0, 7, 14):
                assert_same(stoker.cat(ds, k).array(), rows[k])
        shutil.rmtree(ds)  # the inputs are large
