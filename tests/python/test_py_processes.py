"""stoker.Loader across processes: ranks from torchrun's environment, a loader
carried into a forked child, and Ctrl-C while a loader runs."""

import json
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import stoker
from stkpy import PROC_TIMEOUT_S, read_line

pytestmark = pytest.mark.usefixtures("no_dist_env")

N = 120

RANK_SCRIPT = """
    import json, sys
    import numpy as np
    import stoker
    ld = stoker.Loader(sys.argv[1], batch_size=7, shuffle="random", seed=3)
    ids = []
    for b in ld:
        ids += b["id"].tolist()
    print(json.dumps({"rank": ld.rank, "world": ld.world_size, "ids": ids}))
"""


@pytest.fixture
def small_ds(tmp_path):
    path = tmp_path / "small.stk"
    stoker.write(path, {"id": np.arange(N, dtype=np.int64),
                        "x": np.arange(N * 2, dtype=np.float32).reshape(N, 2)})
    return path


def test_ranks_from_the_environment_in_subprocesses(small_ds):
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(RANK_SCRIPT), str(small_ds)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, RANK=str(r), WORLD_SIZE="2"))
        for r in range(2)
    ]
    shares = []
    try:
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=PROC_TIMEOUT_S)
            assert p.returncode == 0, err
            res = json.loads(out)
            assert (res["rank"], res["world"]) == (r, 2)
            shares.append(res["ids"])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    a, b = shares
    assert len(a) == len(b) == N // 2
    assert len(set(a)) == len(a) and len(set(b)) == len(b)
    assert set(a).isdisjoint(b)
    assert sorted(a + b) == list(range(N))


def test_ranks_from_the_environment_in_process(small_ds, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with stoker.Loader(small_ds, batch_size=8, shuffle="sequential") as ld:
        assert (ld.rank, ld.world_size) == (2, 3)
        ids = np.concatenate([b["id"].copy() for b in ld])
    # A stream per rank: in sequential order, rank r of W reads the r-th of
    # W equal slices of the dataset (N // W samples each; the first N % W
    # slices one longer, their last sample left for equal counts).
    q, rem = divmod(N, 3)
    start = 2 * q + min(2, rem)
    assert ids.tolist() == list(range(start, start + N // 3))
    # One stream: interleaved, rank r takes positions r, r + W, ...
    with stoker.Loader(small_ds, batch_size=8, shuffle="sequential", streams=1) as ld:
        ids = np.concatenate([b["id"].copy() for b in ld])
    assert ids.tolist() == list(range(2, N, 3))
    # Explicit arguments win over the environment.
    with stoker.Loader(small_ds, batch_size=8, rank=0, world_size=1) as ld:
        assert (ld.rank, ld.world_size) == (0, 1)
        assert ld.counts()["rank_samples"] == N
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        stoker.Loader(small_ds, batch_size=8)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match="rank"):
        stoker.Loader(small_ds, batch_size=8)


def test_pad_gives_every_rank_the_same_count(tmp_path):
    path = tmp_path / "odd.stk"
    stoker.write(path, {"id": np.arange(101, dtype=np.int64)})
    got = []
    for r in range(4):
        with stoker.Loader(path, batch_size=10, rank=r, world_size=4, pad=True) as ld:
            assert ld.counts()["rank_samples"] == 26
            got.append(np.concatenate([b["id"].copy() for b in ld]).tolist())
    assert {len(g) for g in got} == {26}
    assert set(sum(got, [])) == set(range(101))
    got = []
    for r in range(4):
        with stoker.Loader(path, batch_size=10, rank=r, world_size=4) as ld:
            got += np.concatenate([b["id"].copy() for b in ld]).tolist()
    assert len(got) == len(set(got)) == 100


# ---- fork -----------------------------------------------------------------

def _child_uses_parent_loader(ld, path, q):
    try:
        ld.next()
        q.put(("no error", ""))
    except BaseException as e:  # noqa: BLE001 (reported to the parent)
        q.put((type(e).__name__, str(e)))
    try:
        with stoker.Loader(path, batch_size=8, shuffle="sequential") as own:
            ids = []
            for b in own:
                ids += b["id"].tolist()
        q.put(("ok", ids))
    except BaseException as e:  # noqa: BLE001
        q.put((type(e).__name__, str(e)))
    ld.close()  # forgets the parent's threads, touches nothing
    q.put(("closed", ld.closed))


def test_loader_used_after_fork_raises(small_ds):
    ctx = multiprocessing.get_context("fork")
    ld = stoker.Loader(small_ds, batch_size=8, shuffle="sequential", prefetch=2)
    held = ld.next()
    q = ctx.Queue()
    p = ctx.Process(target=_child_uses_parent_loader, args=(ld, small_ds, q))
    p.start()
    try:
        kind, msg = q.get(timeout=PROC_TIMEOUT_S)
        own = q.get(timeout=PROC_TIMEOUT_S)
        closed = q.get(timeout=PROC_TIMEOUT_S)
    finally:
        p.join(timeout=PROC_TIMEOUT_S)
        if p.is_alive():
            p.kill()
    assert p.exitcode == 0
    assert kind == "RuntimeError", msg
    assert "another process" in msg and "fork" in msg
    assert own == ("ok", list(range(N)))
    assert closed == ("closed", True)
    # The parent's loader is untouched by the child.
    np.testing.assert_array_equal(held["id"], np.arange(8))
    assert not ld.closed
    np.testing.assert_array_equal(ld.next()["id"], np.arange(8, 16))
    ld.close()


def test_loader_used_after_os_fork_raises(small_ds):
    ld = stoker.Loader(small_ds, batch_size=8, prefetch=2)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one byte and leave at once
        code = 3
        try:
            ld.next()
            code = 1
        except RuntimeError as e:
            code = 0 if "fork" in str(e) else 2
        except BaseException:  # noqa: BLE001
            code = 4
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], PROC_TIMEOUT_S)
        code = os.read(r, 1) if ready else b"hung"
    finally:
        os.close(r)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert code == bytes([0])
    assert ld.next() is not None
    ld.close()


# ---- Ctrl-C -----------------------------------------------------------------

# A child started from a shell's background job inherits SIGINT ignored;
# Ctrl-C at a terminal reaches a Python whose handler raises KeyboardInterrupt.
# The scripts install that handler so the test does not depend on its parent.
INTERRUPT_SCRIPT = """
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import stoker
    ld = stoker.Loader(sys.argv[1], batch_size=4, shuffle=sys.argv[2], prefetch=2)
    first = True
    while True:  # epochs without end
        for b in ld:
            if first:
                print("ready", flush=True)
                first = False
"""


@pytest.mark.parametrize("order", ["random", "block"])
def test_ctrl_c_interrupts_a_running_loader(small_ds, order):
    p = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(INTERRUPT_SCRIPT), str(small_ds), order],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert read_line(p).strip() == "ready"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=PROC_TIMEOUT_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode != 0
    assert "KeyboardInterrupt" in err


CLOSE_SCRIPT = """
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import stoker
    ld = stoker.Loader(sys.argv[1], batch_size=1, prefetch=2, backend="pool", threads=1)
    try:
        print("ready", flush=True)  # inside: Ctrl-C may come at once
        while True:
            for b in ld:
                pass
    except KeyboardInterrupt:
        ld.close()
        print("interrupted", flush=True)
        raise
"""


def test_ctrl_c_then_close(small_ds):
    p = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CLOSE_SCRIPT), str(small_ds)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert read_line(p).strip() == "ready"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=PROC_TIMEOUT_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert "interrupted" in out
    assert "KeyboardInterrupt" in err
    assert p.returncode != 0
