"""close() from any thread at any time: while another thread is in next()
(waiting, or as its batch arrives), from a signal handler during next()'s
wait, and together with the other calls.  The iterating thread returns or
raises "closed" promptly, batches it holds stay valid, nothing hangs or
crashes (the test runs under the sanitized build too: make py-asan)."""
import random
import signal
import threading
import time

import numpy as np
import pytest

import stoker

pytestmark = pytest.mark.usefixtures("no_dist_env")


@pytest.fixture(scope="module")
def ragged(tmp_path_factory):
    path = tmp_path_factory.mktemp("threads") / "r.stk"
    rng = np.random.default_rng(3)
    recs = [{"id": np.int64(i), "v": np.full(int(rng.integers(1, 40)), i, np.int32)}
            for i in range(400)]
    stoker.write(path, recs, ragged=["v"])
    return path


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    """Records of 1 MiB, read by one thread: next() waits."""
    path = tmp_path_factory.mktemp("threads") / "big.stk"
    n = 48
    stoker.write(path, {"id": np.arange(n, dtype=np.int64),
                        "v": np.zeros((n, 1 << 18), np.float32)})
    return path


def _check(batch):
    ids = batch["id"].tolist()
    off = batch["v_offsets"].tolist()
    for j, i in enumerate(ids):
        assert (batch["v"][off[j]:off[j + 1]] == i).all()


def test_close_while_another_thread_iterates(ragged):
    rng = random.Random(7)
    outcomes = {"ended": 0, "closed": 0}
    for trial in range(200):
        ld = stoker.Loader(ragged, 4, shuffle="random", threads=2, seed=trial)
        held, errors = [], []

        def run():
            try:
                for _ in range(3):           # epochs, so that close lands mid-way
                    for b in ld:
                        held.append(b)
                        held[:] = held[-3:]
                outcomes["ended"] += 1
            except stoker.InvalidArgument as e:
                assert "closed" in str(e)
                outcomes["closed"] += 1
            except BaseException as e:   # noqa: BLE001  (reported below)
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(rng.uniform(0, 0.004))
        ld.close()
        t.join(10)
        assert not t.is_alive(), f"trial {trial}: next() still running 10 s after close()"
        assert not errors, errors
        assert ld.closed
        for b in held:                   # batches handed out stay valid
            _check(b)
        with pytest.raises(stoker.InvalidArgument, match="closed"):
            ld.next()
    assert outcomes["closed"] > 0


def test_close_interrupts_a_wait_promptly(slow):
    ld = stoker.Loader(slow, 2, shuffle="random", threads=1, prefetch=2, warm_up=False)
    got, errors = [], []

    def run():
        try:
            for b in ld:
                got.append(int(b["id"][0]))
                time.sleep(0.001)
        except stoker.InvalidArgument as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.02)
    t0 = time.monotonic()
    ld.close()
    took = time.monotonic() - t0
    t.join(10)
    assert not t.is_alive()
    assert took < 5, took
    assert len(errors) == 1 and "closed" in str(errors[0]) or not errors


def test_close_from_a_signal_handler_during_next(slow):
    ld = stoker.Loader(slow, 2, shuffle="random", threads=1, prefetch=2, warm_up=False)
    old = signal.signal(signal.SIGALRM, lambda s, f: ld.close())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.01)
        with pytest.raises(stoker.InvalidArgument, match="closed"):
            while True:
                time.sleep(0.0)
                if ld.next() is None:
                    ld.set_epoch(ld.epoch + 1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert ld.closed


def test_every_call_from_other_threads(ragged):
    """Threads calling next, set_epoch, state_dict, stats, counts and
    close at random: each call returns or raises InvalidArgument."""
    for trial in range(40):
        ld = stoker.Loader(ragged, 8, shuffle="random", threads=2, seed=trial)
        rng = random.Random(trial)
        errors = []

        def worker(k):
            r = random.Random(trial * 10 + k)
            try:
                for _ in range(60):
                    op = r.choice(["next", "next", "next", "epoch", "state", "stats", "counts"])
                    try:
                        if op == "next":
                            b = ld.next()
                            if b is not None:
                                _check(b)
                        elif op == "epoch":
                            ld.set_epoch(r.randrange(3))
                        elif op == "state":
                            ld.state_dict()
                        elif op == "stats":
                            ld.stats()
                        else:
                            ld.counts()
                    except stoker.InvalidArgument as e:
                        if "closed" not in str(e) and "already in a call" not in str(e):
                            raise
            except BaseException as e:   # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
        for t in ts:
            t.start()
        time.sleep(rng.uniform(0, 0.01))
        ld.close()
        for t in ts:
            t.join(20)
            assert not t.is_alive()
        assert not errors, errors


@pytest.mark.parametrize("kind", ["mixture", "torch"])
def test_close_from_another_thread_mixture_and_torch_dataset(ragged, kind):
    import stoker.torch
    rng = random.Random(11)
    for trial in range(60):
        if kind == "mixture":
            it = stoker.Loader([stoker.Source(ragged, 2.0), stoker.Source(ragged, 1.0)], 4,
                               seed=trial, threads=2)
        else:
            it = stoker.torch.Dataset(ragged, 4, shuffle="random", seed=trial, threads=2)
        errors, held = [], []

        def run():
            try:
                for _ in range(3):
                    for b in it:
                        held.append(b)
                        held[:] = held[-2:]
            except stoker.InvalidArgument as e:
                if "closed" not in str(e):
                    errors.append(e)
            except BaseException as e:   # noqa: BLE001
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(rng.uniform(0, 0.004))
        it.close()
        t.join(10)
        assert not t.is_alive()
        assert not errors, errors
        for b in held:
            if kind == "torch":
                b = {k: v.numpy() for k, v in b.items()}
            _check(b)
