"""stoker.stats: the statistics a model's inputs and targets are normalised
with (count, mean, standard deviation, minimum, maximum and NaN count per
element of a field's rows, NaN left out), over the whole dataset or per
record, optionally over a period of a time field.  Over the whole dataset
they are those its writer gathered as it packed, read from the manifest;
otherwise (and for a dataset packed without them) they are computed through
a sequential Loader of whole records."""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from . import _stoker
from ._errors import InvalidArgument, StokerError
from ._loader import _I64_MAX, _I64_MIN, Loader, _time_unit, _time_value
from ._types import PathLike


class _Moments:
    """Count, mean and sum of squared deviations per element, NaN left
    out, merged batch by batch (Chan et al.'s pairwise update, in float64,
    so that a long series loses no precision); the NaN count, minimum and
    maximum beside them."""

    def __init__(self, shape):
        self.n = np.zeros(shape, np.float64)
        self.mean = np.zeros(shape, np.float64)
        self.m2 = np.zeros(shape, np.float64)
        self.nan = np.zeros(shape, np.int64)
        self.lo = np.full(shape, np.inf)
        self.hi = np.full(shape, -np.inf)

    def add(self, rows):
        v = rows.astype(np.float64, copy=False)
        ok = ~np.isnan(v)
        self.nan = self.nan + (~ok).sum(axis=0)
        if len(v):
            self.lo = np.minimum(self.lo, np.where(ok, v, np.inf).min(axis=0))
            self.hi = np.maximum(self.hi, np.where(ok, v, -np.inf).max(axis=0))
        n = ok.sum(axis=0).astype(np.float64)
        s = np.where(ok, v, 0.0).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, s / np.maximum(n, 1), 0.0)
            m2 = np.where(ok, (v - mean) ** 2, 0.0).sum(axis=0)
            tot = self.n + n
            delta = mean - self.mean
            self.mean = np.where(tot > 0, self.mean + delta * n / np.maximum(tot, 1), 0.0)
            self.m2 = self.m2 + m2 + delta ** 2 * self.n * n / np.maximum(tot, 1)
        self.n = tot

    def result(self, ddof):
        return _result(self.n, self.mean, self.m2, ddof)

    def extremes(self):
        return (np.where(self.n > 0, self.lo, np.nan), np.where(self.n > 0, self.hi, np.nan))


def _result(n, mean, m2, ddof):
    """Mean and std (NaN where there are no values, or too few for ddof)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, mean, np.nan)
        std = np.sqrt(np.where(n > ddof, m2 / (n - ddof), np.nan))
    return mean, std


_FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")


def _stored(path, fields, ddof, root, cache_dir):
    """The statistics the writer gathered, as stats() returns them, or None
    where the dataset lacks them for a field asked for (or cannot be opened
    here: the Loader then says why)."""
    try:
        schema, got = _stoker.field_stats(
            os.fspath(path), None if root is None else os.fspath(root),
            None if cache_dir is None else os.fspath(cache_dir))
    except (StokerError, TypeError, ValueError):
        return None
    shapes = {name: shape for name, _, shape, _ in schema}
    # Times and dates are read as datetime64, which has no statistics.
    times = {name for name, _, _, kind in schema
             if kind and kind.startswith(("timestamp", "date", "duration", "time"))}
    if fields is None:
        want = [name for name, dtype, _, _ in schema if dtype in _FLOAT_DTYPES]
    else:
        want = list(fields)
    if not want or any(f not in got or f in times for f in want):
        return None
    out: Dict[str, Dict[str, np.ndarray]] = {}
    for f in want:
        g = got[f]
        shape = tuple(shapes[f])

        def arr(key, dtype):
            return np.asarray(g[key], dtype).reshape(shape)
        n = arr("count", np.float64)
        mean, std = _result(n, arr("mean", np.float64), arr("m2", np.float64), ddof)
        out[f] = {"mean": mean, "std": std, "count": arr("count", np.int64),
                  "min": arr("min", np.float64), "max": arr("max", np.float64),
                  "nan_count": arr("nan_count", np.int64)}
    return out


def stats(path: PathLike, fields: Optional[Union[str, Sequence[str]]] = None, *,
          by_group: bool = False, period: Optional[Tuple[Any, Any]] = None,
          order_by: Optional[str] = None, ddof: int = 0, root: Optional[PathLike] = None,
          cache_dir: Optional[PathLike] = None) -> Dict[str, Dict[str, np.ndarray]]:
    """Mean and standard deviation of each element of a field's rows, NaN
    left out, for normalising a model's inputs and targets.

    Over the whole dataset (no ``by_group``, ``period`` or ``order_by``)
    they are those the writer gathered as it packed (every stoker writer
    does, for each numeric field whose rows have at most 1024 elements),
    returned without reading a record; a dataset packed without them (by
    an older stoker, an in-place index) is read through, as with the
    options above.

    Args:
        path: A dataset (as Loader takes it).
        fields: Numeric fields, integers included (default: every float
            field; with a period, every one with rows).
        by_group: Also per record (a basin's own target std, which
            NeuralHydrology's NSE loss weighs by): ``record_mean``,
            ``record_std`` and ``record_count`` of shape [records, ...],
            NaN for a record with no value (or too few for ``ddof``).
        period: ``(start, end)`` with ``order_by``: only the rows whose
            time lies in it, given as Loader's ``period`` takes it.
            NeuralHydrology's scaler counts its inputs' warm-up rows too
            (``seq_length - predict_last_n`` before the start) and its
            targets from the start: ask once for each.
        order_by: The time field ``period`` reads.
        ddof: Delta degrees of freedom of the std: 0 (the default) as
            NeuralHydrology's scaler (xarray) and ``np.nanstd``, 1 as
            pandas.

    Returns:
        ``{field: {"mean", "std", "count", "min", "max", "nan_count"}}``,
        arrays of a row's shape (a scalar for a field of one value a row;
        mean, std, min and max NaN where there is no value), and the
        ``record_`` arrays with ``by_group``.

    Raises:
        InvalidArgument: An unknown or non-numeric field (bytes, strings),
            or a period without ``order_by``.
    """
    if isinstance(fields, str):
        fields = [fields]
    if (period is None) != (order_by is None) and period is not None:
        raise InvalidArgument("period needs order_by, the time field it reads")
    ddof = int(ddof)
    if not by_group and period is None and order_by is None:
        stored = _stored(path, fields, ddof, root, cache_dir)
        if stored is not None:
            return stored
    want = None if fields is None else list(fields)
    read = None if want is None else list(dict.fromkeys(want + ([order_by] if period else [])))
    with Loader(path, 64, fields=read, shuffle="sequential", output="numpy", threads=1,
                root=root, cache_dir=cache_dir) as ld:
        names = [n for n in ld.fields if not n.endswith("_offsets")]
        if want is None:
            want = [n for n in names if n != order_by]
        lo, hi = _I64_MIN, _I64_MAX
        if period is not None:
            if order_by not in names:
                raise InvalidArgument(f"order_by: '{order_by}' is not a field of {path}")
            unit = _time_unit(ld._c.field_types.get(order_by))
            if period[0] is not None:
                lo = _time_value(period[0], unit, "period")
            if period[1] is not None:
                hi = _time_value(period[1], unit, "period", end=True)
        acc: Dict[str, _Moments] = {}
        per: Dict[str, list] = {f: [] for f in want}
        for b in ld:
            keep = None
            if period is not None:
                t = b[order_by]
                t = t.view(np.int64) if t.dtype.kind == "M" else t.astype(np.int64)
                keep = (t.reshape(len(t), -1)[:, 0] >= lo) & (t.reshape(len(t), -1)[:, 0] <= hi)
                toff = b.get(order_by + "_offsets")
            if fields is None:  # every float field (with rows, under a period)
                want = [f for f in want if isinstance(b.get(f), np.ndarray) and
                        b[f].dtype.kind == "f" and (period is None or f + "_offsets" in b)]
                per = {f: per.get(f, []) for f in want}
            for f in want:
                v = b.get(f)
                if v is None:
                    raise InvalidArgument(f"fields: '{f}' is not a field of {path}")
                if not isinstance(v, np.ndarray) or v.dtype.kind not in "fiub":
                    raise InvalidArgument(f"fields: '{f}' is not a numeric field; statistics "
                                          "need one")
                off = b.get(f + "_offsets")
                if off is None:  # a value per record: each record one row
                    off = np.arange(len(v) + 1)
                    if keep is not None:
                        raise InvalidArgument(f"fields: '{f}' has no rows for a period to "
                                              "select")
                elif keep is not None and not np.array_equal(off, toff):
                    raise InvalidArgument(f"fields: '{f}' has rows other than order_by's")
                if keep is not None:
                    v = np.where(keep.reshape((-1,) + (1,) * (v.ndim - 1)), v, np.nan)
                if f not in acc:
                    acc[f] = _Moments(v.shape[1:])
                acc[f].add(v)
                if by_group:
                    for i in range(len(off) - 1):
                        m = _Moments(v.shape[1:])
                        m.add(v[off[i]:off[i + 1]])
                        per[f].append(m)
    out: Dict[str, Dict[str, np.ndarray]] = {}
    for f in want:
        if f not in acc:
            raise InvalidArgument(f"fields: '{f}' has no records in {os.fspath(path)}")
        mean, std = acc[f].result(ddof)
        lo, hi = acc[f].extremes()
        out[f] = {"mean": mean, "std": std, "count": acc[f].n.astype(np.int64),
                  "min": lo, "max": hi, "nan_count": acc[f].nan}
        if by_group:
            res = [m.result(ddof) for m in per[f]]
            out[f]["record_mean"] = np.stack([r[0] for r in res])
            out[f]["record_std"] = np.stack([r[1] for r in res])
            out[f]["record_count"] = np.stack([m.n for m in per[f]]).astype(np.int64)
    return out
