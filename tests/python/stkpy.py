"""Helpers shared by the tests of the `stoker` Python package (test_py_*.py):
datasets made with stoker.write, the expected sample of a window id, and
ways of draining a loader into plain NumPy copies."""

import numpy as np

import stoker

ORDERS = ["sequential", "random", "block"]

# Every subprocess runs under this limit so that a hang fails the test instead
# of stalling the suite; it is a safety net, not a timing assertion.
PROC_TIMEOUT_S = 120


def write_ids(path, n, **extra):
    """A dataset of n records with an int64 field `id` equal to the record
    number (plus the given extra fields, dict-of-arrays style)."""
    source = {"id": np.arange(n, dtype=np.int64)}
    source.update(extra)
    assert stoker.write(path, source) == n
    return path


def ragged_series(n_records, seed=0, lengths=None, features=3):
    """Per-record dicts of a ragged time series `x` [rows, features] (f32),
    a ragged int64 `t` [rows] (the row's global number, so every row of the
    dataset is unique) and a per-record scalar `rec` (int64)."""
    rng = np.random.default_rng(seed)
    if lengths is None:
        lengths = rng.integers(1, 40, size=n_records)
    recs, base = [], 0
    for i, n in enumerate(lengths):
        n = int(n)
        recs.append({
            "x": rng.standard_normal((n, features)).astype(np.float32),
            "t": np.arange(base, base + n, dtype=np.int64),
            "rec": np.int64(i),
        })
        base += n
    return recs


def window_index(lengths, window, stride):
    """[(record, start)] in window-id order: windows are numbered record by
    record over the starts t = 0, stride, ... with t + window <= rows."""
    out = []
    for r, n in enumerate(lengths):
        t = 0
        while t + window <= n:
            out.append((r, t))
            t += stride
    return out


def as_numpy(batch):
    """A batch (dict of numpy arrays, torch tensors or stoker Arrays) as a
    dict of numpy copies that do not pin the batch buffer."""
    out = {}
    for k, v in batch.items():
        if hasattr(v, "detach"):
            v = v.detach().numpy()
        out[k] = np.array(v, copy=True)
    return out


def drain(loader, limit=None):
    """Takes batches from `loader` (one epoch, or `limit` batches) and returns
    [(sample ids, numpy copy of the batch)]."""
    out = []
    while limit is None or len(out) < limit:
        b = loader.next()
        if b is None:
            break
        out.append((loader.sample_ids(), as_numpy(b)))
        del b
    return out


def ids_of(batches, field="id"):
    """The concatenated values of `field` over [(ids, batch)] or [batch]."""
    parts = [b[1][field] if isinstance(b, tuple) else np.asarray(b[field]) for b in batches]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def read_line(proc, timeout=PROC_TIMEOUT_S):
    """The next line of proc's stdout (a text pipe), or "" if none comes
    within `timeout` seconds (a child that hangs before it speaks must not
    hang the test)."""
    import select

    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if ready else ""
