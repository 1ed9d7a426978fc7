"""A property test of the Loader's options and the writer's record checks:
random values, the edges of every range among them, each run in a child
process so that a crash or a hang is caught and named.  Every case either
delivers every sample of an epoch exactly once (bounded by a batch limit)
or raises a clean error (StokerError, TypeError, OverflowError).  `make
fuzz` runs many more cases (STOKER_FUZZ_CASES)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import stoker

CASES = int(os.environ.get("STOKER_FUZZ_CASES", "48"))
EDGES = [0, 1, 2, 3, 7, 255, 4096, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**62,
         2**63 - 1, 2**63, 2**64 - 1]

CHILD = r"""
import json, sys, numpy as np, stoker
path, cases = sys.argv[1], json.loads(sys.stdin.read())
n_rec = 120
for i, kw in enumerate(cases):
    print("case", i, flush=True)
    try:
        with stoker.Loader(path, **kw) as ld:
            for epoch in range(2):
                seen = []
                for k, b in enumerate(ld):
                    ids = b["id"][:, 0] if b["id"].ndim == 2 else b["id"]
                    seen += [int(x) for x in np.asarray(ids).ravel()]
                    if k >= 40:
                        break
                else:
                    # A whole epoch: no sample twice (windows: ids of starts).
                    if not kw.get("pad") and kw.get("window") is None:
                        assert len(seen) == len(set(seen)), ("a sample twice", kw)
        print("ok", flush=True)
    except (stoker.StokerError, TypeError, OverflowError) as e:
        print("refused", type(e).__name__, str(e)[:100], flush=True)
print("done", flush=True)
"""


def random_case(rng):
    def pick(lo=0, edge=0.3):
        return int(rng.choice(EDGES)) if rng.random() < edge else int(rng.integers(lo, 64))
    kw = {"batch_size": pick(1, 0.1)}
    for k in ("block_bytes", "block_samples", "block_group", "prefetch", "queue_depth",
              "memory_budget", "threads", "seed", "epoch", "stride", "max_skips",
              "max_open_files"):
        if rng.random() < 0.25:
            kw[k] = pick()
    if rng.random() < 0.3:
        kw["window"] = pick(1)
    if rng.random() < 0.3:
        w = max(pick(1), 1) if rng.random() < 0.5 else int(rng.integers(1, 5))
        kw["world_size"] = w
        kw["rank"] = int(rng.integers(0, 5))
    if rng.random() < 0.2:
        c = int(rng.integers(1, 5))
        kw["split"] = [int(rng.integers(0, 5)), c]
    kw["shuffle"] = str(rng.choice(["sequential", "random", "block"]))
    kw["backend"] = str(rng.choice(["auto", "pool", "mmap", "uring"]))
    kw["pad"] = bool(rng.random() < 0.3)
    kw["drop_last"] = bool(rng.random() < 0.3)
    return kw


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    d = tmp_path_factory.mktemp("fz")
    recs = [{"id": np.arange(n, dtype=np.int64) + 1000 * i,
             "x": np.full((n, 2), i, np.float32)}
            for i, n in enumerate([5, 30, 17, 64, 9, 40] * 20)]
    stoker.write(d / "s.stk", recs)
    return d / "s.stk"


def run_cases(path, cases):
    # Lists go as lists (JSON), tuples where the API wants one.
    code = CHILD.replace('stoker.Loader(path, **kw)',
                         'stoker.Loader(path, **{k: (tuple(v) if k == "split" else v) '
                         'for k, v in kw.items()})')
    r = subprocess.run([sys.executable, "-c", code, str(path)], input=json.dumps(cases),
                       capture_output=True, text=True, timeout=600)
    last = [ln for ln in r.stdout.splitlines() if ln.startswith("case ")]
    at = int(last[-1].split()[1]) if last else -1
    assert r.returncode == 0 and r.stdout.rstrip().endswith("done"), (
        f"case {at} {cases[at] if at >= 0 else ''} ended the process "
        f"(rc {r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def test_loader_options_never_crash_or_hang(series):
    rng = np.random.default_rng(int(os.environ.get("STOKER_FUZZ_SEED", "7")))
    cases = [random_case(rng) for _ in range(CASES)]
    out = run_cases(series, cases)
    assert out.count("ok") + out.count("refused") >= CASES


def test_record_checks_never_crash_and_never_store_a_mismatch(tmp_path):
    """Random later records against the first: written and read back equal,
    or refused naming the record; never a crash or other values."""
    rng = np.random.default_rng(int(os.environ.get("STOKER_FUZZ_SEED", "7")))
    dtypes = [np.float32, np.float64, np.int16, np.uint8, np.int64]
    for case in range(max(CASES // 4, 6)):
        first = rng.standard_normal((int(rng.integers(1, 6)), 3)).astype(
            dtypes[case % len(dtypes)])
        recs = [first]
        for _ in range(4):
            shape = (int(rng.integers(0, 7)),) + tuple(int(rng.integers(1, 5)) for _ in
                                                       range(int(rng.integers(0, 3))))
            dt = dtypes[int(rng.integers(0, len(dtypes)))] if rng.random() < 0.3 else first.dtype
            if rng.random() < 0.6:
                shape = (shape[0],) + first.shape[1:]
            recs.append(rng.standard_normal(shape).astype(dt))
        path = tmp_path / f"w{case}"
        try:
            stoker.write(path, ({"x": r} for r in recs), ragged=["x"])
        except ValueError as e:
            assert "record" in str(e) and "'x'" in str(e)
            continue
        with stoker.Loader(path, batch_size=1, shuffle="sequential") as ld:
            got = [np.array(b["x"]) for b in ld]
        assert len(got) == len(recs)
        for g, r in zip(got, recs):
            np.testing.assert_array_equal(g, r)
