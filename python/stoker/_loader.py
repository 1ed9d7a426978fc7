"""stoker.Loader: a dataset's batches for one rank, from the C loader; the
checks of its arguments (in Python, so that messages name the option) and
the counts of a loader without opening it."""
from __future__ import annotations

import inspect
import os
from typing import (TYPE_CHECKING, Any, Dict, Iterator, Literal, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union, overload)

import numpy as np

from . import _media, _ranks, _stoker
from ._errors import InvalidArgument
from ._types import Batch, PathLike

if TYPE_CHECKING:
    from ._mix import Source

# The names of option values and the defaults come from libstoker (its
# tables and stk_loader_options_init), so that the command line and Python
# agree by construction; Python adds only its own spellings (None, True,
# False, "not_nan").
_ORDERS = _stoker.option_names("shuffle")
_BACKENDS = {**_stoker.option_names("backend"), "uring": _stoker.option_value("backend", "uring")}
_VALID = {None: _stoker.option_value("valid", "all"), **_stoker.option_names("valid"),
          "not_nan": _stoker.option_value("valid", "notnan")}
_OUTPUTS = ("numpy", "torch", "dlpack")
_ON_ERROR = _stoker.option_names("on_error")
_WARM_UP = {**_stoker.option_names("warm_up"), True: _stoker.option_value("warm_up", "on"),
            False: _stoker.option_value("warm_up", "off")}
_D = _stoker.loader_defaults()

_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1
_I32 = (1 << 31) - 1


def _check_int(name, value, low=0, none_ok=False, high=_U64):
    # high: the C option's range (the extension's argument parsing would
    # otherwise wrap a larger value around silently: 2**32 + 5 became 5).
    if value is None and none_ok:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < low:
        raise InvalidArgument(f"{name} must be at least {low}, not {value}")
    if value > high:
        raise InvalidArgument(f"{name} must be at most {high}, not {value}")
    return int(value)


def gpu_status() -> Tuple[int, str]:
    """The CUDA devices stoker can use, and why none when there are none.

    Returns:
        ``(count, reason)``: reason is ``""`` when count > 0.
    """
    return _stoker.gpu_count()


def gpu_count() -> int:
    """The number of CUDA devices stoker can use.

    Returns:
        0 without a CUDA build of stoker, an NVIDIA driver or a device
        (``gpu_status()`` says which).
    """
    return _stoker.gpu_count()[0]


def _device_index(device, resolve=True):
    """-1 for the host, else the CUDA ordinal of `device` ("cuda", "cuda:N",
    N or a torch.device).  resolve=False leaves CUDA alone: "cuda" is then 0
    rather than torch's current device."""
    if device is None:
        return -1
    if isinstance(device, bool):
        raise TypeError("device must be None, 'cpu', 'cuda', 'cuda:N' or an int")
    if isinstance(device, int):
        if device < 0:
            raise InvalidArgument(f"device must be a CUDA ordinal >= 0, not {device}")
        return device
    text = str(device)
    if text == "cpu":
        return -1
    if text == "cuda":
        if not resolve:
            return 0
        try:
            import torch
            if torch.cuda.is_available():
                return torch.cuda.current_device()
        except ImportError:
            pass
        return 0
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise InvalidArgument(f"device must be None, 'cpu', 'cuda', 'cuda:N' or an int, not {device!r}")


def _check_choice(name, value, choices):
    if value not in choices:
        raise InvalidArgument(f"{name} must be one of {sorted(k for k in choices if k)}, "
                              f"not {value!r}")
    return choices[value]


# -- a Loader's arguments ---------------------------------------------------
#
# Checked in Python (the messages name the option), then handed to the
# extension positionally, in the order of python/stoker/_ext/options.c.  The
# same arguments give _count() a loader's counts without opening one.

class _LoaderArgs(NamedTuple):
    c: tuple                  # the extension's arguments
    output: str
    device: int               # CUDA ordinal; -1: host memory
    skip: bool                # on_error="skip"
    batch_size: int
    rank: int
    world_size: int
    split: Tuple[int, int]
    epoch: int
    streams: int              # the order's streams (world_size unless given)
    rank_source: str          # where rank and world_size came from (_ranks)


def _space_args(fields, window, stride, valid_field, valid):
    if fields is not None:
        if isinstance(fields, str):
            fields = [fields]
        fields = list(fields)
        for f in fields:
            if not isinstance(f, str):
                raise TypeError(f"fields must hold str names, not {type(f).__name__}")
    window = _check_int("window", window, 1, none_ok=True)
    stride = _check_int("stride", stride, 1)
    if valid_field is not None and not isinstance(valid_field, str):
        raise TypeError("valid_field must be a field name (str)")
    if isinstance(valid, Mapping):
        if valid_field is not None:
            raise InvalidArgument("valid_field goes with a rule name (valid='notnan'); a dict "
                                  "of rules names its fields itself")
        return fields, window or 0, stride, None, 0
    if valid not in _VALID_LEGACY:
        raise InvalidArgument(f"valid must be a dict {{field: rule}} or one of "
                              f"{sorted(k for k in _VALID_LEGACY if k)}, not {valid!r}")
    valid_code = _VALID[valid]
    if valid_field is not None and valid_code == 0:
        raise InvalidArgument("valid_field needs valid='mask' or valid='notnan'")
    if valid_field is None and valid_code != 0:
        raise InvalidArgument(f"valid={valid!r} needs valid_field, or give a dict "
                              f"{{field: {valid!r}}}")
    return fields, window or 0, stride, valid_field, valid_code


# -- validity rules, periods and calendars ----------------------------------
#
# Each becomes a (field, test, last, lo, hi) tuple of stk_valid_rule: `last`
# rows tested at the window's end (0: the whole window).

# valid_field's rules (the last row only, as they always were).
_VALID_LEGACY = (None, "all", "mask", "notnan", "not_nan")
_RULE_TESTS = ("mask", "notnan", "finite", "some")
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _rule(field, spec):
    """One entry of valid={field: spec}: "notnan" (the whole window),
    "notnan_last" (its last row) or ("notnan", n) (its last n rows)."""
    if not isinstance(field, str):
        raise TypeError(f"valid: field names are str, not {type(field).__name__}")
    last = 0
    if isinstance(spec, tuple) and len(spec) == 2:
        spec, last = spec
        last = _check_int(f"valid[{field!r}] rows", last, 1)
    elif isinstance(spec, str) and spec.endswith("_last"):
        spec, last = spec[:-5], 1
    if spec == "not_nan":
        spec = "notnan"
    if spec not in _RULE_TESTS:
        raise InvalidArgument(
            f"valid[{field!r}] must be one of {list(_RULE_TESTS)} (the whole window), the same "
            f"with '_last' (its last row) or (rule, n) (its last n rows), not {spec!r}")
    return (field, _stoker.option_value("valid", spec), last, 0, 0)


def _time_type(path, order_by, root, cache_dir):
    """The logical type stoker.write recorded for field `order_by`
    ("timestamp[ns]", "date32", ...), or None."""
    c = _stoker.Loader(os.fspath(path), 1, fields=[order_by], threads=1, prefetch=2,
                       warm_up=_WARM_UP["off"], verify=False,
                       root=None if root is None else os.fspath(root),
                       cache_dir=None if cache_dir is None else os.fspath(cache_dir))
    try:
        return c.field_types.get(order_by)
    finally:
        c.close()


def _time_unit(t):
    """The NumPy unit of a time type, or None."""
    if t is None:
        return None
    if t == "date32":
        return "D"
    if t == "date64":
        return "ms"
    if t.startswith(("timestamp[", "duration[")):
        return t[t.find("[") + 1:].split("]")[0].split(",")[0].strip()
    return None


def _plain_int(v):
    # (np.timedelta64 and np.datetime64 are np.integer subclasses: not plain.)
    return isinstance(v, (int, np.integer)) and not isinstance(
        v, (bool, np.timedelta64, np.datetime64))


def _time_value(v, unit, what, end=False):
    """A period's bound (or a calendar's step) in the field's stored
    integers. An end given to the day (a date, "2008-09-30") takes in the
    whole day, as NeuralHydrology's periods do."""
    if _plain_int(v):
        return int(v)
    if unit is None:
        raise InvalidArgument(
            f"{what}: {v!r} is not an integer, and order_by's field has no time type to "
            "convert it with (a dataset written by stoker.write records one for dates and "
            "timestamps); give the field's own integer values")
    if what == "calendar":
        if isinstance(v, str):
            import pandas as pd
            v = pd.Timedelta(v)
        d = np.timedelta64(v.to_timedelta64() if hasattr(v, "to_timedelta64") else v)
        return int(d / np.timedelta64(1, unit))
    d = np.datetime64(v.to_datetime64() if hasattr(v, "to_datetime64") else v)
    if end and np.datetime_data(d.dtype)[0] in ("D", "W", "M", "Y"):
        d = np.datetime64(d, "D") + np.timedelta64(1, "D")
        return int(d.astype(f"datetime64[{unit}]").astype(np.int64)) - 1
    return int(d.astype(f"datetime64[{unit}]").astype(np.int64))


def _valid_rules(valid, period, order_by, calendar, path, root, cache_dir):
    """The rules of valid={...}, period= and calendar=, as the extension
    takes them (None: none)."""
    rules = []
    if isinstance(valid, Mapping):
        # (A list gives a field several rules: ["finite", "some_last"].)
        rules = [_rule(k, r) for k, v in valid.items()
                 for r in (v if isinstance(v, list) else [v])]
    if order_by is not None and not isinstance(order_by, str):
        raise TypeError("order_by must be a field name (str)")
    if (period is not None or calendar) and order_by is None:
        raise InvalidArgument("period and calendar need order_by, the time field "
                              "(stoker.write's order_by column, 'date')")
    unit = None
    # A period of several pieces: [(start, end), (start, end), ...].
    pieces = period
    if period is not None and not (isinstance(period, list) and period and
                                   all(isinstance(p, (tuple, list)) for p in period)):
        pieces = [period]
    if pieces is not None:
        for p in pieces:
            if not isinstance(p, (tuple, list)) or len(p) != 2:
                raise TypeError("period must be a pair (start, end), either None (open), or a "
                                "list of pairs")
    needs_type = (pieces is not None and any(
        b is not None and not _plain_int(b) for p in pieces for b in p)) or \
        (calendar is not None and calendar is not True and calendar is not False and
         not _plain_int(calendar))
    if needs_type:
        unit = _time_unit(_time_type(path, order_by, root, cache_dir))
    if pieces is not None:
        spans = []
        for p in pieces:
            lo = _I64_MIN if p[0] is None else _time_value(p[0], unit, "period")
            hi = _I64_MAX if p[1] is None else _time_value(p[1], unit, "period", end=True)
            if lo > hi:
                raise InvalidArgument(f"period: {p[0]!r} is after {p[1]!r}")
            spans.append([lo, hi])
        spans.sort()
        merged = [spans[0]]
        for lo, hi in spans[1:]:
            if lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        # From the first start to the last end, less the gaps between pieces.
        rules.append((order_by, _stoker.option_value("valid", "range"), 1, merged[0][0],
                      merged[-1][1]))
        for (_, a_hi), (b_lo, _) in zip(merged, merged[1:]):
            rules.append((order_by, _stoker.option_value("valid", "outside"), 1, a_hi + 1,
                          b_lo - 1))
    if calendar is not None and calendar is not False:
        step = 0 if calendar is True else _time_value(calendar, unit, "calendar")
        if step <= 0 and calendar is not True:
            raise InvalidArgument(f"calendar: the step must be positive, not {calendar!r}")
        rules.append((order_by, _stoker.option_value("valid", "step"), 0, step, 0))
    return rules or None


def neuralhydrology_rules(inputs: Union[str, Sequence[str]], targets: Union[str, Sequence[str]],
                          predict_last_n: int = 1,
                          evolving: Union[None, str, Sequence[str]] = None) -> Dict[str, Any]:
    """NeuralHydrology's rules for a training sample, as ``valid=`` takes
    them (its ``_validate_samples``): no NaN in any input over the whole
    window, at least one target not NaN in the last ``predict_last_n``
    rows, and no NaN in the evolving attributes at the last row. With
    ``period=`` and ``calendar=True`` (NeuralHydrology fills gaps in time
    with NaN, which its input rule then refuses) a Loader keeps the samples
    its Dataset keeps. Its warm-up is ``seq_length - predict_last_n`` steps,
    so with ``predict_last_n`` above 1 its first sample ends
    ``predict_last_n - 1`` steps after the period's start: start the
    ``period`` there.
    """
    def names(v):
        return [] if v is None else [v] if isinstance(v, str) else list(v)
    rules: Dict[str, Any] = {f: "notnan" for f in names(inputs)}
    for f in names(targets):
        rules[f] = ("some", _check_int("predict_last_n", predict_last_n, 1))
    for f in names(evolving):
        rules[f] = "notnan_last"
    return rules


def _order_args(shuffle, seed, epoch, block_bytes, block_samples, block_group):
    return (_check_choice("shuffle", shuffle, _ORDERS), _check_int("seed", seed),
            _check_int("epoch", epoch), _check_int("block_bytes", block_bytes, 1),
            _check_int("block_samples", block_samples),
            _check_int("block_group", block_group, 1, high=_U32))


def _share_args(rank, world_size, split):
    """(rank, world_size, (split index, split count), source); rank and
    world_size not given are found as _ranks.resolve says (the process
    group, then the launchers' variables), and source names where."""
    if world_size is not None:
        world_size = _check_int("world_size", world_size, 1, high=_U32)
    if rank is not None:
        rank = _check_int("rank", rank, high=_U32)
    rank, world_size, source = _ranks.resolve(rank, world_size)
    world_size = _check_int("world_size", world_size, 1, high=_U32)
    rank = _check_int("rank", rank, high=_U32)
    if rank >= world_size:
        raise InvalidArgument(f"rank {rank} must be below world_size {world_size}")
    if split is None:
        split = (0, 1)
    if not isinstance(split, tuple) or len(split) != 2:
        raise TypeError("split must be a tuple (index, count)")
    split_count = _check_int("split count", split[1], 1, high=_U32)
    split_index = _check_int("split index", split[0], high=_U32)
    if split_index >= split_count:
        raise InvalidArgument(f"split index {split_index} must be below its count {split_count}")
    return rank, world_size, (split_index, split_count), source


def _reading_args(backend, threads, prefetch, queue_depth, memory_budget, on_error, max_skips):
    return (_check_choice("backend", backend, _BACKENDS),
            _check_int("threads", threads, high=_I32), _check_int("prefetch", prefetch, high=_U32),
            _check_int("queue_depth", queue_depth, 1, high=_U32),
            _check_int("memory_budget", memory_budget, 1),
            _check_choice("on_error", on_error, _ON_ERROR), _check_int("max_skips", max_skips, 1))


def _device_args(device, warm_up, output, gpu_slots, resident_budget, resolve):
    """(device ordinal or -1, warm-up code, output, gpu_slots, resident_budget)."""
    dev = _device_index(device, resolve)
    if not isinstance(warm_up, (str, bool)) or warm_up not in _WARM_UP:
        raise InvalidArgument(f"warm_up must be 'auto', True or False, not {warm_up!r}")
    if output is None:
        output = "torch" if dev >= 0 else "numpy"
    if output not in _OUTPUTS:
        raise InvalidArgument(f"output must be one of {_OUTPUTS}, not {output!r}")
    if dev >= 0 and output == "numpy":
        raise InvalidArgument("output='numpy' cannot hold GPU memory; with a device use "
                              "output='torch' or 'dlpack'")
    gpu_slots = _check_int("gpu_slots", gpu_slots, 2, high=_U32)
    resident_budget = _check_int("resident_budget", resident_budget)
    return dev, _WARM_UP[warm_up], output, gpu_slots, resident_budget


def _loader_args(*, path, batch_size, fields, window, stride, valid_field, valid, shuffle, seed,
                 epoch, block_bytes, block_samples, block_group, rank, world_size, pad,
                 drop_last, backend, direct, threads, prefetch, queue_depth, memory_budget,
                 verify, on_error, max_skips, output, max_open_files, device, gpu_slots,
                 resident_budget, warm_up, split, root, cache_dir=None, cache_budget=None,
                 streams=None, period=None, order_by=None, calendar=False,
                 remote_timeout=None, decode=None, resolve=True) -> _LoaderArgs:
    """Every argument of Loader checked; resolve=False (counting) neither
    asks torch for the current CUDA device nor imports torch."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    batch_size = _check_int("batch_size", batch_size, 1, high=_U32)
    space = _space_args(fields, window, stride, valid_field, valid)
    rules = _valid_rules(valid, period, order_by, calendar, path, root, cache_dir)
    order = _order_args(shuffle, seed, epoch, block_bytes, block_samples, block_group)
    rank, world_size, split, rank_source = _share_args(rank, world_size, split)
    streams = world_size if streams is None else _check_int("streams", streams, 1, high=_U32)
    backend, threads, prefetch, queue_depth, memory_budget, on_error, max_skips = _reading_args(
        backend, threads, prefetch, queue_depth, memory_budget, on_error, max_skips)
    dev, warm_up, output, gpu_slots, resident_budget = _device_args(
        device, warm_up, output, gpu_slots, resident_budget, resolve)
    if output == "torch" and resolve:
        import torch  # noqa: F401  (fail early, not at the first batch)
    c = (os.fspath(path), batch_size, *space, *order, rank, world_size, bool(pad),
         bool(drop_last), backend, bool(direct), threads, prefetch, queue_depth, memory_budget,
         bool(verify), on_error, max_skips,
         _check_int("max_open_files", max_open_files, high=_U32), dev, gpu_slots,
         resident_budget, warm_up, split[0], split[1], None if root is None else os.fspath(root),
         None if cache_dir is None else os.fspath(cache_dir),
         _U64 if cache_budget is None else _check_int("cache_budget", cache_budget, high=_U64),
         streams, rules, _remote_timeout(remote_timeout), _media.decode_specs(decode))
    return _LoaderArgs(c, output, dev, on_error == 1, batch_size, rank, world_size, split,
                       order[2], streams, rank_source)


def _remote_timeout(value) -> float:
    """remote_timeout= as the C option: seconds > 0 (at most an hour), or
    0 for the default (``$STOKER_REMOTE_TIMEOUT``, else 30)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"remote_timeout must be a number of seconds, not {type(value).__name__}")
    if not 0 < value <= 3600:
        raise InvalidArgument(f"remote_timeout must be in (0, 3600] seconds, not {value}")
    return float(value)


def _count(path: PathLike, batch_size: int, **options: Any) -> Dict[str, int]:
    """What a Loader(path, batch_size, **options) would count, without
    opening one (no thread starts, no buffer is allocated): a dict of
    epoch_samples, rank_samples and rank_batches."""
    bound = inspect.signature(Loader.__init__).bind(None, path, batch_size, **options)
    bound.apply_defaults()
    del bound.arguments["self"]
    del bound.arguments["strings"]  # (how batches look: no count depends on it)
    return _stoker.count(*_loader_args(**bound.arguments, resolve=False).c)


_STRINGS = ("list", "numpy", "arrow")


def strings(batch: Mapping[str, Any], field: str, *,
            kind: Literal["list", "numpy", "arrow"] = "list", binary: bool = False) -> Any:
    """The strings of a ragged field of a batch: ``batch[field]`` (its bytes
    back to back, uint8) cut at ``batch[field + "_offsets"]`` (int64,
    batch size + 1), as torch and DLPack output deliver string fields (and
    as any ragged uint8 field is stored).

    Args:
        batch: A batch of any output (numpy, torch on any device, dlpack).
        field: The field's name.
        kind: ``"list"`` (a list of str), ``"numpy"`` (a NumPy array of
            ``StringDType``, NumPy 2) or ``"arrow"`` (a ``pyarrow``
            large_string array over a copy of the bytes).
        binary: Give bytes rather than str (``kind="numpy"``: an object
            array; ``"arrow"``: large_binary).

    Raises:
        InvalidArgument: No such field or offsets in the batch, or an
            unknown kind.
        UnicodeDecodeError: Bytes that are not UTF-8 (pass ``binary=True``).
    """
    if kind not in _STRINGS:
        raise InvalidArgument(f"kind must be one of {_STRINGS}, not {kind!r}")
    if field not in batch or field + "_offsets" not in batch:
        have = sorted(k for k in batch if k + "_offsets" in batch)
        raise InvalidArgument(
            f"the batch has no ragged field {field!r} (a {field!r} with {field + '_offsets'!r})"
            + (f"; its ragged fields are {have}" if have else "; it has none")
            + (f" ({field!r} is already a {type(batch[field]).__name__})"
               if field in batch and not have else ""))
    out = {field: _host_numpy(batch[field]).view(np.uint8).reshape(-1),
           field + "_offsets": _host_numpy(batch[field + "_offsets"]).astype(np.int64,
                                                                             copy=False)}
    if kind == "numpy" and not binary and not hasattr(getattr(np, "dtypes", None),
                                                       "StringDType"):
        raise InvalidArgument(f"kind='numpy' needs NumPy 2 (StringDType); this is NumPy "
                              f"{np.__version__}: use kind='list' or 'arrow'")
    _present(out, field, "binary" if binary else "string", kind)
    return out[field]


def _host_numpy(v: Any) -> np.ndarray:
    """A NumPy view (or, from a GPU, a copy) of an array of any output."""
    if isinstance(v, np.ndarray):
        return v
    if hasattr(v, "detach") and hasattr(v, "cpu"):             # torch
        return v.detach().cpu().numpy()
    return np.from_dlpack(v) if hasattr(v, "__dlpack__") else np.asarray(v)


def _present(out, name, t, strings):
    """Field `name` of a numpy batch as its logical type `t` says, in place:
    strings and binaries as `strings` asks (their offsets taken in), dates,
    timestamps, durations and times as datetime64 / timedelta64 of their
    unit; a type this version does not know stays as stored."""
    a = out[name]
    if t in ("string", "binary"):
        off = out.pop(name + "_offsets")
        if strings == "arrow":
            import pyarrow as pa
            out[name] = pa.Array.from_buffers(
                pa.large_string() if t == "string" else pa.large_binary(), len(off) - 1,
                [None, pa.py_buffer(off), pa.py_buffer(a)])
            return
        buf, o = a.tobytes(), off.tolist()
        vals = [buf[o[i]:o[i + 1]] for i in range(len(o) - 1)]
        if t == "string":
            vals = [v.decode() for v in vals]
        if strings == "numpy":
            if t == "string":
                vals = np.array(vals, dtype=np.dtypes.StringDType())
            else:
                arr = np.empty(len(vals), dtype=object)
                arr[:] = vals
                vals = arr
        out[name] = vals
        return
    unit = t[t.find("[") + 1:].split("]")[0].split(",")[0] if "[" in t else None
    if t.startswith("timestamp[") and a.dtype == np.int64:
        out[name] = a.view(f"datetime64[{unit}]")
    elif t == "date32" and a.dtype == np.int32:
        out[name] = a.astype("datetime64[D]")
    elif t == "date64" and a.dtype == np.int64:
        out[name] = a.view("datetime64[ms]")
    elif t.startswith(("duration[", "time64[")) and a.dtype == np.int64:
        out[name] = a.view(f"timedelta64[{unit}]")
    elif t.startswith("time32[") and a.dtype == np.int32:
        out[name] = a.astype(f"timedelta64[{unit}]")


class Loader:
    """Batches of a stoker dataset for one rank of a training job.

    Opening a loader opens the dataset and starts the loader's threads, which
    read ahead in the background. Iterating gives one epoch of batches:
    dicts mapping each field's name to an array of ``batch_size`` samples
    (fewer in a last partial batch). Iterating again runs the next epoch, as
    a DataLoader does; ``set_epoch`` picks one. Use it as a context manager,
    or call ``close()``, to stop the threads.

    The options are those of the C loader (``stk_loader_options`` in
    stoker.h), keyword-only, with the same defaults.

    Args:
        path: A dataset directory, or an in-place index written by
            ``stoker.index`` / ``stoker index``; both take the same options.
        batch_size: Samples per batch.
        fields: Names of the fields to load (default: all).
        window: Rows per window over the time fields (the selected fields
            with a ragged first dimension, or a fixed one of at least
            ``window`` rows); a sample is then a window. Default: a sample is
            a whole record.
        stride: Rows between window starts.
        valid_field: With ``valid`` a rule name, the field whose row at a
            window's last row decides whether the window is a sample.
        valid: Which windows are samples (default: every window). With
            ``valid_field``: ``"mask"`` (that field's last row is nonzero)
            or ``"notnan"`` (it has no NaN). Or a dict of rules, all of
            which a window must pass, one per field (any field with the
            time axis's rows, loaded or not): ``"notnan"`` (no NaN in any
            element of any row of the window), ``"finite"`` (no NaN or
            infinity), ``"mask"`` (no zero) or ``"some"`` (at least one
            element not NaN) over the whole window; the same name with
            ``"_last"`` (``"notnan_last"``) tests the window's last row
            only, and ``(name, n)`` its last n rows; a list gives a field
            several rules. A multi-column field's
            row fails ``"notnan"`` when any of its elements is NaN, and
            ``"some"`` only when all are. ``neuralhydrology_rules(...)``
            gives NeuralHydrology's set: ``{"x": "notnan", "y": ("some",
            predict_last_n)}``. Rules are counted at open, in one pass
            over each rule's field (O(rows), not O(windows x window)).
        period: ``(start, end)``, with ``order_by``: only windows whose
            last row's time lies in [start, end] (either may be None);
            rows before ``start`` serve as warm-up, as NeuralHydrology's
            train/validation/test periods do. A list of pairs is a period
            of several pieces (NeuralHydrology's lists of start and end
            dates). Dates, strings
            (``"1999-10-01"``) and datetime64 are converted to the unit
            stoker.write recorded for the field (an end given to the day
            takes in the whole day); ints are taken as the stored values.
        order_by: The time field (stoker.write's ``order_by`` column,
            ``"date"``) that ``period`` and ``calendar`` read.
        calendar: True: only windows whose rows follow each other at the
            series' step (the smallest step between consecutive rows in
            the dataset), so that a window never spans a gap in time; or
            the step itself (``"1D"``, a timedelta, or an int of stored
            units).
        shuffle: The epoch's order: ``"block"`` (blocks of consecutive
            samples in random order, taken ``block_group`` at a time and
            shuffled within each group), ``"random"`` (a uniform permutation)
            or ``"sequential"``. torch's DataLoader and DistributedSampler
            take a bool instead; stoker has three orders, and its default is
            ``"block"`` because it reads the data in large pieces (far faster
            than ``"random"`` from a disk), not because exactly-once delivery
            needs it: every order is a permutation of the epoch's samples.
        seed: The order's seed.
        epoch: The first epoch.
        block_bytes: Block order: bytes read per block (4 MiB).
        block_samples: Block order: samples per block (0: from block_bytes).
        block_group: Block order: blocks per group.
        rank: This rank. Default: found, never guessed: from an
            initialised ``torch.distributed`` group, else the launcher's
            variables (torchrun's and Accelerate's ``RANK`` /
            ``WORLD_SIZE``; Lightning's ``LOCAL_RANK`` / ``NODE_RANK``;
            Slurm tasks; Open MPI; MPICH's PMI; ``jax.distributed``), else 0
            of 1. A world size above one with no rank, or two sources of
            one world naming different ranks, raise; ``info()`` and repr
            say which source decided (``rank_source``). Checked again at
            the first batch, so a loader opened before
            ``init_process_group`` under another share raises rather than
            read the wrong one.
        world_size: Ranks in the job (default: found with the rank). Rank r
            takes positions r, r + world_size, ... of the epoch's order.
        pad: Give every rank ceil(N / world_size) samples by wrapping around
            to the order's start. The default, False, departs from
            DistributedSampler (which pads): the last N mod world_size samples
            of the epoch's order are left out of it instead, so that no
            sample comes twice in an epoch. Exactly-once delivery needs it; a
            padded epoch repeats up to world_size - 1 samples.
        streams: The streams the epoch's order is made of (default:
            world_size). Position p of the order is sample p // streams of
            stream p % streams, and each stream is a slice of the data (of
            its blocks, in a new order every epoch), so that with one
            stream per rank a rank reads, and from an object store
            fetches, only its share. 1 gives the order that does not
            depend on the world size (every rank then reads from every
            block). The state keeps the epoch's streams: a run resumed
            with another world size finishes the epoch in the same order.
        split: ``(k, n)``: yield only batches k, k + n, k + 2n, ... of this
            rank's stream, whole; n consumers taking one batch each in turn
            see the rank's stream itself (``stoker.torch`` uses it for
            DataLoader workers). Default: all.
        drop_last: Drop a last, partial batch.
        backend: ``"auto"``, ``"uring"``, ``"pool"`` or ``"mmap"``.
        direct: Read with O_DIRECT.
        threads: Worker threads, at most 64 (0: one per CPU, at most 8, or
            at most 64 when ``decode=`` decodes media). With fewer
            than the CPUs, the consumer spins briefly for a batch being
            filled rather than sleep (where batches fill in under 200 us;
            ``STOKER_SPIN=0`` in the environment turns it off).
        prefetch: Batch buffers in the ring (0: from the memory budget, 2 to
            8).
        queue_depth: io_uring entries per worker.
        memory_budget: Bytes for batch buffers, block groups and staging
            (1 GiB; never more than half of what memory and the process's
            cgroup have room for).
        verify: Check what a batch reads against the dataset's checksums; a
            damaged byte raises StokerError naming the shard file and the
            record.
        on_error: ``"raise"``, or ``"skip"``: a sample that fails its
            checksum is replaced by the next good one of the order (of its
            group, in block order), so every rank keeps the same batch count;
            each replacement is counted in ``stats()["skipped"]`` and named in
            a RuntimeWarning.
        max_skips: With ``"skip"``, this many failures in a row raise.
        output: ``"numpy"`` (the default without a device), ``"torch"`` (the
            default with one) or ``"dlpack"``.
        strings: How numpy output delivers string and binary fields (Arrow
            string and binary columns, str and bytes values): ``"list"``
            (the default: a list of str, or of bytes), ``"numpy"`` (a NumPy
            array of ``StringDType``; binaries an object array of bytes) or
            ``"arrow"`` (a ``pyarrow`` large_string / large_binary array
            over the batch's bytes). Torch and DLPack output keep them as
            ragged fields: ``name`` (uint8, the strings' UTF-8 bytes back to
            back) and ``name_offsets`` (int64, batch_size + 1). Dates,
            timestamps, durations and times come as NumPy ``datetime64`` /
            ``timedelta64`` of their unit through numpy output (timestamps
            in UTC; the time zone is in the dataset's manifest), as int64
            (date32 and time32: int32) through torch.
        max_open_files: Descriptors kept open; past it (an in-place index of
            many small files) files are opened on demand and cached (0: from
            the process's limit).
        device: None (batches in host memory), or ``"cuda"``, ``"cuda:N"``
            or N: batches on that GPU. stoker page-locks its batch buffers and
            copies each batch to the GPU on its own CUDA stream; tensors
            arrive through DLPack with the stream rules kept
            (``torch.from_dlpack`` makes the current stream wait for the
            copy, and a device buffer is refilled only after the work queued
            on that stream when the batch was dropped is done). Hold at most
            ``gpu_slots - 1`` batches.
        gpu_slots: Device batch buffers.
        resident_budget: Bytes of GPU memory the selected fields may take to
            be uploaded once at open and assembled on the GPU (0: never).
        warm_up: ``"auto"``, True or False: bring a dataset that is not in
            the page cache into it with large sequential reads, on a thread
            of its own, while the first epoch is served from it. ``"auto"``
            does it when the data fits in 3/4 of the memory the page cache may
            still take (MemAvailable and any cgroup memory.max) and the
            loader reads through the mapping (the ``"auto"`` backend then
            picks ``"mmap"``); True whenever the data is not in memory.
        root: For an in-place index: the directory its files may lie under
            (default: the index's own directory). An index names files by
            path, so one handed over from elsewhere could name any file the
            process can read; an index written away from its files
            (``stoker.index("/data", "~/data.idx")``) is opened with
            ``root="/data"``, which says that you trust it. A file outside is
            refused, naming it (StokerError, code STK_EOUTSIDE = -1015).
        cache_dir: For a remote dataset (``s3://bucket/prefix`` or
            ``https://host/path``): the local cache it is read through
            (default: ``$STOKER_CACHE_DIR``, else ``$XDG_CACHE_HOME/stoker``,
            else ``~/.cache/stoker``). Opening fetches the manifest and each
            shard's header and index; the records arrive as the loader reads
            them (in its planned order, ahead of need), each block checked.
            S3 credentials, region and endpoint come from the AWS variables
            and files, as for the AWS CLI. See ``remote_stats()``.
        cache_budget: Bytes of disk the dataset's cache may take (default:
            ``$STOKER_CACHE_BUDGET``, else the free space less 5%). It may
            be smaller than the dataset: blocks are evicted as others
            arrive, those the node's readers will use least soon first,
            never one a reader is between fetching and reading; processes
            of one node share the budget. A loader whose threads may hold
            more at once than the budget (a batch of records, or a block
            group, each) is refused. 0 streams: nothing is kept but what is
            being read.
        remote_timeout: For a remote dataset: the deadline of every request,
            in seconds (default: ``$STOKER_REMOTE_TIMEOUT``, else 30). A
            request ends within it, counted from when it was sent or from
            the last byte of its object that came: failures that may pass
            (5xx, 408, 429, resets, stalls) are retried within it, and one
            still failing then raises ``Timeout``. What no retry can cure
            raises at once, naming it, each as its own type: a changed
            object ``DataChanged``; a redirect loop ``RedirectLoop``, TLS
            ``TLSError``, a host that does not resolve ``HostNotFound``, a
            4xx ``HTTPError`` (or ``NotFound``, ``AccessDenied``), a wrong
            Content-Range ``BadRange``: the five are ``RemoteError``s.
        decode: Media fields the loader's threads decode into the batch:
            ``{"image": stoker.DecodeImage(224, flip=True)}`` delivers an
            image field (JPEG, PNG, WebP) as uint8 [batch, 224, 224, 3]
            with random-resized crops; ``{"audio":
            stoker.DecodeAudio(64000, sample_rate=16000,
            random_offset=True)}`` an audio field (FLAC, MP3, Vorbis,
            Opus) as float32 [batch, 64000, 1]. Crops, flips and window
            starts are functions of (seed, epoch, record): the same with
            any thread count, and after a resume. A record that does not
            decode raises ``MediaError`` naming its file and record.

    Given a list of sources instead of a path (paths, dicts of
    ``stoker.Source`` arguments, or Sources), it makes a ``stoker.Mixture``
    that draws from them at their weights; see that class for its options.

    Ragged fields (record mode) come as ``name`` (the rows concatenated) and
    ``name_offsets`` (int64, batch_size + 1).

    Raises:
        InvalidArgument: An option out of its range or that does not fit the
            dataset (the message names it).
        NotFound: No dataset at ``path``.
        AccessDenied: An object store refused the credentials (HTTP 403).
        StokerError: A dataset that cannot be read (damaged, truncated).
        TypeError: An argument of the wrong type.
    """

    # (A mixture's: the batch key of each sample's source; stoker.Mixture.)
    _source_field: Optional[str] = None
    _share_given: Optional[Tuple[Optional[int], Optional[int]]] = None

    def __new__(cls, path: Any = None, *args: Any, **kwargs: Any):
        # A list of sources makes a mixture (stoker.Mixture, python/stoker/_mix.py).
        if cls is Loader and isinstance(path, (list, tuple)):
            from ._mix import open_mixture
            return open_mixture(path, *args, **kwargs)
        return super().__new__(cls)

    # Fields with a logical type (stk_field.type) that numpy output turns
    # into strings, datetimes or durations: {name: type}; None until the
    # first batch asks the extension (a mixture, which opens its loader
    # later, included).
    _types: Optional[Dict[str, str]] = None
    _strings = "list"
    _held: Any = None  # (the last batch's arrays during the hand-over: _convert)

    @overload
    def __init__(self, path: PathLike, batch_size: int, *,
                 fields: Optional[Union[str, Sequence[str]]] = None,
                 window: Optional[int] = None, stride: int = _D["stride"],
                 valid_field: Optional[str] = None,
                 valid: Union[None, Literal["mask", "notnan", "not_nan", "all"],
                              Mapping[str, Any]] = None,
                 period: Optional[Tuple[Any, Any]] = None, order_by: Optional[str] = None,
                 calendar: Any = False,
                 shuffle: Literal["sequential", "random", "block"] = _D["shuffle"],
                 seed: int = _D["seed"], epoch: int = _D["epoch"],
                 block_bytes: int = _D["block_bytes"], block_samples: int = _D["block_samples"],
                 block_group: int = _D["block_group"], rank: Optional[int] = None,
                 world_size: Optional[int] = None, pad: bool = _D["pad"],
                 drop_last: bool = _D["drop_last"],
                 backend: Literal["auto", "uring", "io_uring", "pool", "mmap"] = _D["backend"],
                 direct: bool = _D["direct"], threads: int = _D["threads"],
                 prefetch: int = _D["prefetch"], queue_depth: int = _D["queue_depth"],
                 memory_budget: int = _D["memory_budget"], verify: bool = _D["verify"],
                 on_error: Literal["raise", "skip"] = _D["on_error"],
                 max_skips: int = _D["max_skips"],
                 output: Optional[Literal["numpy", "torch", "dlpack"]] = None,
                 max_open_files: int = _D["max_open_files"], device: Any = None,
                 gpu_slots: int = 3,
                 resident_budget: int = 0,
                 warm_up: Union[bool, Literal["auto", "on", "off"]] = _D["warm_up"],
                 split: Optional[Tuple[int, int]] = None, root: Optional[PathLike] = None,
                 cache_dir: Optional[PathLike] = None, cache_budget: Optional[int] = None,
                 streams: Optional[int] = None,
                 strings: Literal["list", "numpy", "arrow"] = "list",
                 remote_timeout: Optional[float] = None,
                 decode: Optional[Mapping[str, _media.Decode]] = None) -> None: ...

    # A list of sources makes a mixture (__new__ above): its options are
    # stoker.Mixture's.
    @overload
    def __init__(self, path: Sequence[Union[Source, PathLike, Mapping[str, Any]]],
                 batch_size: int, *, exhaust: Literal["stop", "cycle", "all"] = "stop",
                 homogeneous: bool = False, seed: int = 0, epoch: int = 0,
                 shuffle: Literal["sequential", "random", "block"] = "block",
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 streams: Optional[int] = None, split: Optional[Tuple[int, int]] = None,
                 drop_last: bool = False, source_field: Optional[str] = "source",
                 output: Optional[Literal["numpy", "torch", "dlpack"]] = None,
                 threads: int = 0, prefetch: int = 0, memory_budget: int = 1 << 30,
                 device: Any = None, gpu_slots: int = 3,
                 backend: Literal["auto", "uring", "io_uring", "pool", "mmap"] = ...,
                 direct: bool = ..., queue_depth: int = ..., verify: bool = ...,
                 on_error: Literal["raise", "skip"] = ..., max_skips: int = ...,
                 warm_up: Union[bool, Literal["auto", "on", "off"]] = ...) -> None: ...

    # The mixture's form never reaches this: __new__ makes a Mixture, and
    # Python runs Mixture.__init__ on it.
    def __init__(self, path: PathLike, batch_size: int, *,  # type: ignore[misc]
                 fields: Optional[Union[str, Sequence[str]]] = None,
                 window: Optional[int] = None, stride: int = _D["stride"],
                 valid_field: Optional[str] = None,
                 valid: Union[None, Literal["mask", "notnan", "not_nan", "all"],
                              Mapping[str, Any]] = None,
                 period: Optional[Tuple[Any, Any]] = None, order_by: Optional[str] = None,
                 calendar: Any = False,
                 shuffle: Literal["sequential", "random", "block"] = _D["shuffle"],
                 seed: int = _D["seed"], epoch: int = _D["epoch"],
                 block_bytes: int = _D["block_bytes"], block_samples: int = _D["block_samples"],
                 block_group: int = _D["block_group"], rank: Optional[int] = None,
                 world_size: Optional[int] = None, pad: bool = _D["pad"],
                 drop_last: bool = _D["drop_last"],
                 backend: Literal["auto", "uring", "io_uring", "pool", "mmap"] = _D["backend"],
                 direct: bool = _D["direct"], threads: int = _D["threads"],
                 prefetch: int = _D["prefetch"], queue_depth: int = _D["queue_depth"],
                 memory_budget: int = _D["memory_budget"], verify: bool = _D["verify"],
                 on_error: Literal["raise", "skip"] = _D["on_error"],
                 max_skips: int = _D["max_skips"],
                 output: Optional[Literal["numpy", "torch", "dlpack"]] = None,
                 max_open_files: int = _D["max_open_files"], device: Any = None,
                 gpu_slots: int = 3,
                 resident_budget: int = 0,
                 warm_up: Union[bool, Literal["auto", "on", "off"]] = _D["warm_up"],
                 split: Optional[Tuple[int, int]] = None, root: Optional[PathLike] = None,
                 cache_dir: Optional[PathLike] = None, cache_budget: Optional[int] = None,
                 streams: Optional[int] = None,
                 strings: Literal["list", "numpy", "arrow"] = "list",
                 remote_timeout: Optional[float] = None,
                 decode: Optional[Mapping[str, _media.Decode]] = None):
        a = _loader_args(path=path, batch_size=batch_size, fields=fields, window=window,
                         stride=stride, valid_field=valid_field, valid=valid, period=period,
                         order_by=order_by, calendar=calendar, shuffle=shuffle,
                         seed=seed, epoch=epoch, block_bytes=block_bytes,
                         block_samples=block_samples, block_group=block_group, rank=rank,
                         world_size=world_size, pad=pad, drop_last=drop_last, backend=backend,
                         direct=direct, threads=threads, prefetch=prefetch,
                         queue_depth=queue_depth, memory_budget=memory_budget, verify=verify,
                         on_error=on_error, max_skips=max_skips, output=output,
                         max_open_files=max_open_files, device=device, gpu_slots=gpu_slots,
                         resident_budget=resident_budget, warm_up=warm_up, split=split,
                         root=root, cache_dir=cache_dir, cache_budget=cache_budget,
                         streams=streams, remote_timeout=remote_timeout, decode=decode)
        if strings not in _STRINGS:
            raise InvalidArgument(f"strings must be one of {_STRINGS}, not {strings!r}")
        if strings == "numpy" and not hasattr(getattr(np, "dtypes", None), "StringDType"):
            raise InvalidArgument(f"strings='numpy' needs NumPy 2 (StringDType); this is NumPy "
                                  f"{np.__version__}: use strings='list' or 'arrow'")
        self._output = a.output
        self._c = _stoker.Loader(*a.c)
        self._path = a.c[0]
        self._shuffle = shuffle
        self._pid = os.getpid()
        self.device: Optional[str] = None if a.device < 0 else f"cuda:{a.device}"
        self._skip_mode = a.skip
        self._skipped = 0
        self.batch_size: int = a.batch_size
        self.rank: int = a.rank
        self.world_size: int = a.world_size
        self.split: Tuple[int, int] = a.split
        self.streams: int = a.streams
        self.rank_source: str = a.rank_source
        # Rank and world size as given (None: found); checked again at the
        # first batch (_check_share).
        self._share_given: Optional[Tuple[Optional[int], Optional[int]]] = (
            None if rank is not None and world_size is not None else (rank, world_size))
        self._epoch = a.epoch
        self._started = False     # a batch of the current epoch was taken
        self._exhausted = False   # the current epoch ended
        self._last_ids: Optional[bytes] = None  # (the last batch's, a copy)
        self._strings = strings
        self._types = self._c.field_types

    def __repr__(self) -> str:
        parts = [f"path={self._path!r}", f"batch_size={self.batch_size}",
                 f"shuffle={self._shuffle!r}", f"rank={self.rank}",
                 f"world_size={self.world_size}", f"rank_source={self.rank_source!r}"]
        if self.split != (0, 1):
            parts.append(f"split={self.split}")
        if self.device is not None:
            parts.append(f"device={self.device!r}")
        if self.closed:
            parts.append("closed")
        elif self._pid == os.getpid():
            parts.append(f"len={len(self)}")
        else:
            parts.append("opened in another process")
        return f"<stoker.Loader {' '.join(parts)}>"

    # -- iteration --------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        # Iterating again after an epoch ended starts the next one, as a
        # DataLoader does; set_epoch() chooses one explicitly.
        if self._exhausted:
            self.set_epoch(self._epoch + 1)
        while True:
            # The hand-over (see next()): the batch stays pending until this
            # frame holds it; the attribute store that ends it, the yield and
            # the caller's for-loop store are no points where a signal
            # handler runs, so Ctrl-C either puts the batch back or finds it
            # delivered.
            try:
                batch = self._take()
                if batch is None:
                    return
                self._c.pending = False
                self._held = None
            except BaseException:
                self._c.unget_last()
                raise
            yield batch
            # Drop this frame's reference before asking for the next batch:
            # a batch the caller let go of must not keep its buffer held.
            batch = None

    def _warn_skips(self):
        n, why = self._c.last_skip()
        if n > self._skipped:
            import warnings
            warnings.warn(f"stoker: replaced {n - self._skipped} damaged sample(s) "
                          f"(on_error='skip'); the last: {why}", RuntimeWarning, stacklevel=3)
            self._skipped = n

    def _convert(self, arrays):
        if self._skip_mode:
            self._warn_skips()
        output = self._output
        if output == "numpy":
            # (A bfloat16 field's buffer format is "H": it arrives as the
            # raw 16-bit words, uint16.)
            out = {k: np.asarray(v) for k, v in arrays.items()}
            if self._types is None:
                self._types = dict(getattr(self._c, "field_types", None) or {})
            for name, t in self._types.items():
                if name in out:
                    _present(out, name, t, self._strings)
            # A batch of strings only may hold no view of the C batch: it is
            # kept here until the hand-over ends (next(), __iter__), or its
            # release would read as a batch dropped by an interrupt and put
            # it back.
            self._held = arrays
            return out
        if output == "dlpack":
            return arrays
        import torch
        if self.device is None:
            # Host memory: the capsule straight to torch, which skips the
            # protocol's device and stream queries (1.7 us a field down to
            # 0.8 with torch 2.13; the capsule holds the batch as the
            # protocol's would).
            return {k: torch.from_dlpack(v.__dlpack__()) for k, v in arrays.items()}
        return {k: torch.from_dlpack(v) for k, v in arrays.items()}

    def next(self) -> Optional[Batch]:
        """Waits for the next batch of the epoch.

        The wait releases the GIL and is interrupted by Ctrl-C. A batch is
        delivered once this call returns it: an exception before (Ctrl-C
        landing as the batch arrives, a failed conversion) puts it back, so
        that the next call gives it and a state saved in the handler does
        not count it. (``for batch in loader`` carries that to the loop's
        own variable; a Ctrl-C that lands in the caller's frame between
        this call's return and its assignment is the caller's.)

        Returns:
            The batch, or None at the end of the epoch (and again until
            ``set_epoch`` or iterating anew).

        Raises:
            StokerError: A read or checksum failure, naming the shard file
                and the record; the loader gives the same error from then on.
        """
        try:
            out = self._take()
            if out is not None:
                self._c.pending = False
                self._held = None
        except BaseException:
            self._c.unget_last()
            raise
        return out

    def _take(self) -> Optional[Batch]:
        """next() without the end of the hand-over: the batch returned is
        still pending (self._c.pending), put back if it is dropped."""
        if self._share_given is not None:
            self._check_share()
        item = None
        try:
            item = self._c.next_batch()
            if item is None:
                self._exhausted = True
                return None
            # The ids come as a copy (bytes): a view would keep the whole
            # batch buffer held after the caller dropped the batch, so that
            # holding one batch while asking for the next could exhaust the
            # ring (-EBUSY) at prefetch=2.  NumPy sees them only when asked
            # (sample_ids), not every batch.
            ids = item[1]
            arrays = item[0]
            srcs = field = None
            if len(item) > 2:  # a mixture's batch: each sample's source
                srcs = item[3]  # (a copy, as the ids)
                field = self._source_field
            if field is not None:
                if field in arrays:  # (homogeneous: a source's own fields)
                    src = int(np.frombuffer(srcs, np.int32, count=1)[0]) if srcs else 0
                    raise InvalidArgument(
                        f"source {src} has a field named {field!r}, the mixture's "
                        f"source_field: choose another source_field (or None)")
                if self.device is None:
                    # A field of the batch like the others (a view of its
                    # buffer).
                    arrays[field] = item[2]
            out = self._convert(arrays)
            if field is not None and self.device is not None:
                # Beside the batch's fields, on its device: the sources are
                # in host memory (a small copy on the current stream).
                if self._output == "torch":
                    import torch
                    out[field] = torch.from_dlpack(item[2].__dlpack__()).to(self.device)
                else:
                    out[field] = item[2]
        except BaseException:
            # Interrupted (Ctrl-C) after the batch was taken but before the
            # caller had it: put it back, so that the next call gives it and
            # a state saved now does not count it as delivered.
            self._c.unget_last()
            raise
        self._started = True
        self._last_ids = ids
        if srcs is not None:
            self._last_sources = srcs
        return out

    def _check_share(self) -> None:
        """At the first batch: the rank and world size found at open must
        still be this process's.  A loader opened before
        ``torch.distributed.init_process_group`` (with the group's rank
        and size given to it, not in the environment) took rank 0 of 1;
        reading on would give every process the whole epoch.  stoker.torch
        .Dataset opens its loader at the first iteration, after the group
        is up, and never meets this."""
        rank, world = self._share_given
        self._share_given = None
        now = _ranks.resolve(rank, world)
        if (now.rank, now.world_size) != (self.rank, self.world_size):
            raise InvalidArgument(
                f"this loader was opened as rank {self.rank} of {self.world_size} "
                f"({self.rank_source}), but {now.source} now says rank {now.rank} of "
                f"{now.world_size}: open it after torch.distributed.init_process_group, pass "
                f"rank= and world_size=, or use stoker.torch.Dataset, which opens its loader "
                f"at the first iteration")

    def info(self) -> Dict[str, Any]:
        """What this loader is: path, batch_size, shuffle, rank, world_size,
        rank_source (where the rank and world size came from: "arguments",
        "torch.distributed", "RANK/WORLD_SIZE", Slurm, MPI, ...), streams,
        split, epoch, device, fields and len (batches an epoch gives this
        rank)."""
        return {"path": self._path, "batch_size": self.batch_size, "shuffle": self._shuffle,
                "rank": self.rank, "world_size": self.world_size,
                "rank_source": self.rank_source, "streams": self.streams, "split": self.split,
                "epoch": self._epoch, "device": self.device, "fields": self.fields,
                "len": len(self) if not self.closed and self._pid == os.getpid() else None}

    def sample_ids(self) -> Optional[np.ndarray]:
        """The global sample ids of the last batch returned.

        Returns:
            A uint64 NumPy array (record ids, or window ids numbered record
            by record), or None before the first batch.
        """
        if self._last_ids is None:
            return None
        return np.frombuffer(self._last_ids, dtype=np.uint64).copy()

    def __len__(self) -> int:
        """The number of batches an epoch gives this rank (and split)."""
        return self._c.counts()["rank_batches"]

    # -- epochs and state -------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch`` from its beginning (as
        DistributedSampler.set_epoch does, but at once).

        Batches still held stay valid; batches read ahead for the old epoch
        are discarded.
        """
        epoch = _check_int("epoch", epoch)
        self._c.set_epoch(epoch)
        self._epoch = epoch
        self._exhausted = False
        self._started = False

    def fetch_epoch(self, *, progress: Optional[bool] = None) -> int:
        """A remote dataset: fetches into the cache now, with many ranges in
        flight, every byte this rank's batches read from here to the end of
        the epoch (after ``load_state_dict``, the rest of the restored
        epoch; once an epoch ended, the next one), so that none of them
        waits for the network. What a resumed or restarted run does before
        its first batch; ``stoker cache warm --epoch`` does it for a node's
        ranks ahead of a run. Nothing to do for a local dataset.

        Args:
            progress: Show the bytes fetched so far and the rate on stderr
                (tqdm's bar, or a line redrawn in place), read from the
                counters of ``remote_stats()`` while the fetch runs. None:
                on a terminal or in a notebook only; False: never; True:
                always.

        Returns:
            The bytes asked for (blocks already cached are not fetched
            again; ``remote_stats()`` says what went over the network).

        Raises:
            InvalidArgument: Under a cache budget smaller than the dataset
                (the loader's read-ahead works within the budget instead).
        """
        from . import _progress
        if self._exhausted:
            self.set_epoch(self._epoch + 1)
        st = self._c.remote_stats() if _progress.wanted(progress) else None
        if st is None:  # (progress off, or a local dataset: nothing to fetch)
            return self._c.fetch_epoch()
        base = st["bytes_fetched"]

        def fetched():
            return self._c.remote_stats()["bytes_fetched"] - base, 0

        with _progress.Poll(_progress.bar("fetch", None, "bytes", progress), fetched):
            return self._c.fetch_epoch()

    @property
    def epoch(self) -> int:
        """The epoch being delivered (or next, once this one ended)."""
        return self._epoch

    def state_dict(self) -> Dict[str, int]:
        """The resume state (the torchdata StatefulDataLoader protocol).

        Returns:
            A dict of seed, epoch, position (global samples consumed by all
            ranks), fingerprint (what the order depends on) and streams
            (those of the epoch's order), plus ``stoker_state_version``.
            After an epoch ended, the start of the next one.
        """
        st = self._c.save()
        if self._exhausted:
            # The epoch ended: resume at the start of the next one, whose
            # order has this loader's streams.
            st = dict(st, epoch=st["epoch"] + 1, position=0, streams=self.streams)
        st["stoker_state_version"] = 1
        return st

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resumes where ``state_dict()`` was taken, with any world size or
        batch size.

        Raises:
            InvalidArgument: A state from another dataset or order
                (fingerprint), or one missing its keys.
            TypeError: ``state`` is not a dict.
        """
        if not isinstance(state, dict):
            raise TypeError("state must be a dict from state_dict()")
        missing = {"seed", "epoch", "position", "fingerprint"} - set(state)
        if missing:
            raise InvalidArgument(f"state is missing {sorted(missing)}")
        # (A state from before streams existed had one: the order that did
        # not depend on the world size.)
        streams = _check_int("state's streams", state.get("streams", 1), 1, high=_U64)
        self._c.restore(int(state["seed"]), int(state["epoch"]), int(state["position"]),
                        int(state["fingerprint"]), streams)
        self._epoch = int(state["epoch"])
        self._exhausted = False
        self._started = False

    # -- the rest -----------------------------------------------------------

    def stats(self) -> Dict[str, Any]:
        """Per-stage counters since open or ``reset_stats()``.

        Returns:
            A dict: plan, io, assemble, verify, wait (the consumer's data
            stall), warm_up and decode (media fields: samples decoded, their
            encoded bytes, the time, a part of assemble's), each
            ``{"count", "bytes", "seconds"}``; and
            batches, samples, elapsed, ready_mean, ring_slots, threads,
            groups_loaded, max_inflight, backend, skipped, warm_up_bytes,
            warm_up_done.
        """
        return self._c.stats()

    def remote_stats(self) -> Optional[Dict[str, Any]]:
        """What reading a remote dataset has fetched so far; None for a local
        one.

        Returns:
            A dict: requests (retries included), retries, bytes_fetched (body
            bytes received), bytes_cached (shard bytes the cache already
            held), network_seconds (wall time waiting on the network); and
            under a cache budget smaller than the dataset, cache_budget (None
            otherwise), cache_peak (the largest disk use of the dataset's
            cache this process measured) and bytes_evicted.
        """
        return self._c.remote_stats()

    def reset_stats(self) -> None:
        """Zeroes the counters of ``stats()``."""
        self._c.stats_reset()

    @property
    def fields(self) -> Tuple[str, ...]:
        """The names of the fields each batch holds (without the
        ``_offsets`` of ragged ones)."""
        return self._c.field_names

    @property
    def backend(self) -> str:
        """The I/O backend in use (``"auto"`` resolved)."""
        return self._c.counts()["backend"]

    def counts(self) -> Dict[str, Any]:
        """Sample and batch counts.

        Returns:
            A dict: epoch_samples (all ranks), rank_samples, rank_batches,
            backend, device (-1: host), resident and resident_bytes (the
            dataset uploaded to the GPU).
        """
        return self._c.counts()

    # -- tracing ------------------------------------------------------------

    def trace_start(self, max_spans: int = 0) -> None:
        """Records what each of the loader's threads does.

        Batches with plan, verify, read and assemble nested inside, and the
        consumer's waits (stoker.h says more). Starting again discards what
        was recorded.

        Args:
            max_spans: Spans kept per thread (0: 65536).
        """
        self._c.trace_start(_check_int("max_spans", max_spans, high=_U32))

    def trace_stop(self) -> None:
        """Stops recording; what was recorded stays for ``trace_write``."""
        self._c.trace_stop()

    def trace_span(self, name: str, t0_ns: int, t1_ns: int) -> None:
        """Adds a span (a training step, say) to the consumer's timeline.

        Args:
            name: The span's name.
            t0_ns, t1_ns: Its start and end, from ``time.monotonic_ns()``.
        """
        self._c.trace_span(str(name), int(t0_ns), int(t1_ns))

    def trace_write(self, path: PathLike) -> None:
        """Writes the spans recorded since ``trace_start`` as a Chrome trace
        (JSON) that ui.perfetto.dev and chrome://tracing open."""
        self._c.trace_write(os.fspath(path))

    def close(self) -> None:
        """Stops the loader's threads. Batches still referenced stay valid;
        their memory is freed when the last goes."""
        self._c.close()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._c.closed

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        self.close()
        return False


# help(Loader) and inspect.signature(Loader) show __init__'s parameters, not
# the catch-all of __new__ (which is there to turn a list of sources into a
# mixture).
Loader.__signature__ = inspect.signature(Loader.__init__).replace(  # type: ignore[attr-defined]
    parameters=list(inspect.signature(Loader.__init__).parameters.values())[1:])
