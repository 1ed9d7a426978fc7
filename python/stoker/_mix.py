"""Mixtures: several sources (datasets or in-place indexes, local or remote)
read as one stream, each at its weight (or an exact count per epoch).

A Mixture is a Loader over stk_loader_open_mixture (src/mix/mixer.c): its
batches are filled in C, in the background, by the mixture's workers, which
read each source's samples straight into the batch through that source's
own loader (homogeneous batches of sources whose fields differ are the
sources' own, handed out as they are).

How it is built (docs/ARCHITECTURE.md, "Mixtures"): each source is read by
a Loader of its own (its own fields, window, order and epochs, opened with
the mixture's rank, world size and streams S), and the epoch is a sequence
of rounds.  In a round every rank takes one sample (``homogeneous=False``)
or one whole batch (``homogeneous=True``) from the same source; which
source round q of epoch e belongs to is stk_mix's closed form of (seed, e,
q).  A round of a source is S of its samples (S batches), consecutive in
its own order, so that rank r, reading lanes r, r + W, ... of every round,
reads a source exactly as that source's own Loader deals it to rank r, and
which of a source's places each position holds is arithmetic.  A source's rounds continue from one mixture epoch to
the next, through its own epochs (each used whole but for fewer than one
round's samples at its end), so every sample of a source's epoch comes once.

The state is (seed, epoch, position, streams), as a Loader's: where each
source stands is computed from it (stk_mix_counts), so a run resumes
exactly, with any world size that divides the state's streams.
"""
from __future__ import annotations

import inspect
import os
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

from . import _stoker
from ._errors import InvalidArgument, StokerError
from ._loader import Loader, _check_int, _device_index, _loader_args, _share_args
from ._types import PathLike

__all__ = ["Source", "Mixture", "open_mixture"]

_U64 = (1 << 64) - 1
_MASK63 = (1 << 63) - 1

# Options of a source's own Loader that a Source may set.
_SOURCE_OPTIONS = ("fields", "window", "stride", "valid_field", "valid", "period", "order_by",
                   "calendar", "shuffle", "seed", "block_bytes", "block_samples", "block_group",
                   "root", "cache_dir", "cache_budget", "max_open_files", "decode")
# Options of the mixture handed to every source's Loader.
_SHARED_OPTIONS = ("backend", "direct", "queue_depth", "verify", "on_error", "max_skips",
                   "warm_up")


class Source:
    """One source of a mixture.

    Args:
        path: A dataset directory, an in-place index, or an ``s3://`` /
            ``https://`` dataset.
        weight: Its share of the mixture (relative to the others'); default
            1. Ignored where counts are given.
        count: Samples it gives each mixture epoch instead of a weight (give
            every source a count, or none). Above the source's epoch, it
            cycles into its next epoch.
        names: ``{field: name}``: the names its fields take in the
            mixture's batches, so that sources that call a field
            differently fill one array.
        **options: Options of its own Loader: fields, window, stride,
            valid_field, valid, period, order_by, calendar, shuffle
            (default: the mixture's), seed
            (default: one derived from the mixture's seed and the source's
            place), block_bytes, block_samples, block_group, root,
            cache_dir, cache_budget, max_open_files, decode (its media
            fields decoded by its loader's threads; every source must
            decode a field to the same shape).
    """

    def __init__(self, path: PathLike, weight: Optional[float] = None,
                 count: Optional[int] = None, *, names: Optional[Mapping[str, str]] = None,
                 **options: Any):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"a source's path must be a str or os.PathLike, not "
                            f"{type(path).__name__}")
        self.path = os.fspath(path)
        if weight is not None and count is not None:
            raise InvalidArgument(f"source {self.path}: give a weight or a count, not both")
        if weight is not None:
            try:
                weight = float(weight)
            except (TypeError, ValueError):
                raise TypeError(f"source {self.path}: weight must be a number") from None
            if not (weight > 0 and weight != float("inf")):
                raise InvalidArgument(f"source {self.path}: weight must be a positive number, "
                                      f"not {weight!r}")
        self.weight = 1.0 if weight is None else weight
        self.count = None if count is None else _check_int("count", count, 1)
        self.names = dict(names or {})
        for k, v in self.names.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"source {self.path}: names maps field names to names (str)")
        unknown = set(options) - set(_SOURCE_OPTIONS)
        if unknown:
            raise TypeError(f"source {self.path}: unknown option(s) {sorted(unknown)} "
                            f"(a source takes {list(_SOURCE_OPTIONS)})")
        self.options = options

    @classmethod
    def of(cls, spec: Any) -> "Source":
        """A Source from a path, a dict of Source's arguments, or a Source."""
        if isinstance(spec, Source):
            return spec
        if isinstance(spec, (str, os.PathLike)):
            return cls(spec)
        if isinstance(spec, Mapping):
            spec = dict(spec)
            if "path" not in spec:
                raise InvalidArgument(f"a source needs a path: {spec!r}")
            return cls(**spec)
        raise TypeError(f"a source is a path, a dict or a stoker.Source, not "
                        f"{type(spec).__name__}")

    def __repr__(self) -> str:
        what = f"count={self.count}" if self.count is not None else f"weight={self.weight:g}"
        return f"stoker.Source({self.path!r}, {what})"


def _source_seed(seed: int, i: int) -> int:
    """Source i's order seed, derived from the mixture's (splitmix64)."""
    z = (seed + 0x9E3779B97F4A7C15 * (i + 1)) & _U64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
    return z ^ (z >> 31)


def load_description(path: PathLike) -> Dict[str, Any]:
    """A mixture description (a JSON file): ``{"sources": [{"path": ...,
    "weight": ...}, ...], "exhaust": ..., "homogeneous": ..., "seed": ...}``;
    relative source paths are taken from the file's directory."""
    import json
    with open(path) as f:
        d = json.load(f)
    if not isinstance(d, dict) or not isinstance(d.get("sources"), list):
        raise InvalidArgument(f"{os.fspath(path)}: a mixture description is a JSON object with "
                              f"a list of sources")
    base = os.path.dirname(os.path.abspath(os.fspath(path)))
    srcs = []
    for s in d["sources"]:
        s = {"path": s} if isinstance(s, str) else dict(s)
        p = s.get("path")
        if isinstance(p, str) and "://" not in p and not os.path.isabs(p):
            s["path"] = os.path.join(base, p)
        srcs.append(s)
    d["sources"] = srcs
    return d


_STK_ESCHEMA = -1008


def _args(path, batch_size, **options):
    """A Loader's extension arguments for these options (checked)."""
    bound = inspect.signature(Loader.__init__).bind(None, path, batch_size, **options)
    bound.apply_defaults()
    del bound.arguments["self"]
    bound.arguments.pop("strings", None)  # (how batches look, as in _count)
    return _loader_args(**bound.arguments, resolve=False).c


class Mixture(Loader):
    """Batches drawn from several sources at their weights, for one rank: a
    Loader (every method of one) whose batches a C mixture fills in the
    background from the sources' own loaders.

    Made by ``stoker.Loader([source, ...], batch_size, ...)``. Which source
    a position holds, and which of its samples, is a closed-form function of
    (seed, epoch, position) (no generator is replayed), so the state is a
    Loader's and resume is exact, also into a world size that divides the
    state's streams (a state of other streams reopens the sources with
    them).

    Args:
        sources: Paths, dicts of ``stoker.Source`` arguments, or Sources.
        batch_size: Samples per batch.
        exhaust: What ends an epoch when sources run out at their weights:
            ``"stop"`` (the first to run out; the others go on from there
            next epoch), ``"cycle"`` (the last; the others cycle into their
            next epochs) or ``"all"`` (every source gives its whole epoch:
            drawn at their weights until one runs out, then the rest).
        homogeneous: Every batch from one source, so the sources' fields
            may differ (each batch then is the source's own batch, handed
            over as it is); default: batches mix sources.
        seed: The mixture's seed (the sources' orders derive theirs from it
            unless a Source gives its own).
        epoch: The first epoch.
        shuffle: The sources' order unless a source sets its own.
        rank, world_size, streams: As for a Loader; a round is ``streams``
            samples (batches), and world_size must divide streams.
        split: (index, count): this process takes the rank's batches index,
            index + count, ... (a DataLoader worker's share, which
            stoker.torch.Dataset sets).  Refused where a source cannot be
            read straight into the mixture's batches (a remote one, block
            order over data read from files, ``on_error="skip"``).
        drop_last: Drop a last, partial batch.
        source_field: The batch key that says which source (its index in
            ``sources``) each sample came from; None leaves it out.
        output: ``"numpy"`` (the default without a device), ``"torch"``
            (the default with one) or ``"dlpack"``.
        device: None (batches in host memory), or ``"cuda"``, ``"cuda:N"``
            or N: the mixture's batches are copied to that GPU as a
            Loader's are (page-locked buffers, stoker's own stream), with
            ``source_field`` on the GPU too (``output="torch"``; with
            ``"dlpack"`` it stays in host memory).  Homogeneous batches of
            sources whose fields differ (the sources' own) are refused.
        gpu_slots: Device batch buffers; hold at most ``gpu_slots - 1``.
        threads: The mixture's worker threads; 0 (default): those one
            loader would have (one per CPU, at most 8).  Where a source
            cannot be read straight into the mixture's batches (a remote
            one, block order over data read from files, ``on_error="skip"``),
            every source's loader reads ahead in threads of its own: these,
            shared out by the sources' shares of the rounds, at least one
            each.
        prefetch: Batch buffers of the mixture's ring (0: as a loader's).
        memory_budget: In all; each source's loader gets its part.
        backend, direct, queue_depth, verify, on_error, max_skips,
            warm_up: Handed to every source's loader.

    Raises:
        InvalidArgument: A source too small for one round, counts for some
            sources only, fields that differ between sources (without
            ``homogeneous``), a world size that does not divide streams.
    """

    def __init__(self, sources: Sequence[Any], batch_size: int, *, exhaust: str = "stop",
                 homogeneous: bool = False, seed: int = 0, epoch: int = 0,
                 shuffle: str = "block", rank: Optional[int] = None,
                 world_size: Optional[int] = None, streams: Optional[int] = None,
                 split: Optional[tuple] = None,
                 drop_last: bool = False, source_field: Optional[str] = "source",
                 output: Optional[str] = None, threads: int = 0, prefetch: int = 0,
                 memory_budget: int = 1 << 30, device: Any = None, gpu_slots: int = 3,
                 **shared: Any):
        unknown = set(shared) - set(_SHARED_OPTIONS)
        if unknown:
            raise TypeError(f"a mixture does not take {sorted(unknown)}")
        if isinstance(sources, (str, os.PathLike, Mapping)) or not isinstance(sources, Sequence):
            raise TypeError("sources must be a list of paths, dicts or stoker.Source")
        self.sources = [Source.of(s) for s in sources]
        if not self.sources:
            raise InvalidArgument("a mixture needs at least one source")
        if exhaust not in ("stop", "cycle", "all"):
            raise InvalidArgument(f"exhaust must be 'stop', 'cycle' or 'all', not {exhaust!r}")
        counted = [s.count is not None for s in self.sources]
        if any(counted) and not all(counted):
            i = counted.index(False)
            raise InvalidArgument(f"counts are given for some sources and not for source {i} "
                                  f"({self.sources[i].path}): give every source a count, or none")
        self.batch_size = _check_int("batch_size", batch_size, 1, high=(1 << 32) - 1)
        self.exhaust = exhaust
        self.homogeneous = bool(homogeneous)
        self.seed = _check_int("seed", seed)
        self.rank, self.world_size, self.split, self.rank_source = _share_args(
            rank, world_size, split)
        self._share_given = None if rank is not None and world_size is not None else (
            rank, world_size)
        self.streams = self.world_size if streams is None else _check_int("streams", streams, 1)
        if self.streams % self.world_size:
            raise InvalidArgument(f"a mixture's streams ({self.streams}) must be a multiple of "
                                  f"world_size ({self.world_size})")
        dev = _device_index(device)
        if output is None:
            output = "torch" if dev >= 0 else "numpy"
        if output not in ("numpy", "torch", "dlpack"):
            raise InvalidArgument(f"a mixture's output is 'numpy', 'torch' or 'dlpack', not "
                                  f"{output!r}")
        if dev >= 0 and output == "numpy":
            raise InvalidArgument("output='numpy' cannot hold GPU memory; with a device use "
                                  "output='torch' or 'dlpack'")
        self._device_args = dict(device=None if dev < 0 else dev,
                                 gpu_slots=_check_int("gpu_slots", gpu_slots, 2))
        if output == "torch":
            import torch  # noqa: F401
        if source_field is not None and not isinstance(source_field, str):
            raise TypeError("source_field must be a str or None")
        self._source_field = source_field
        self._shuffle = shuffle
        self._opts = dict(drop_last=bool(drop_last), threads=_check_int("threads", threads),
                          prefetch=_check_int("prefetch", prefetch),
                          memory_budget=_check_int("memory_budget", memory_budget, 1), **shared)
        self._epoch = _check_int("epoch", epoch)
        self._c = None
        self._open(self.streams)
        if source_field is not None and source_field in self._c.field_names:
            self.close()
            raise InvalidArgument(f"the sources have a field named {source_field!r}: choose "
                                  f"another source_field")
        self._output = output
        self._path = "+".join(s.path for s in self.sources)
        self._pid = os.getpid()
        self.device = None if dev < 0 else f"cuda:{dev}"
        self._skip_mode = shared.get("on_error") == "skip"
        self._skipped = 0
        self._started = False
        self._exhausted = False
        self._last_ids = None
        self._last_sources: Optional[bytes] = None  # (the last batch's, a copy)
        self._counts: Optional[Dict[str, Any]] = None

    def _source_args(self, i: int, s: Source, streams: int, epoch: int) -> tuple:
        opts = dict(s.options)
        opts.setdefault("shuffle", self._shuffle)
        seed = opts.pop("seed", None)
        seed = _source_seed(self.seed, i) if seed is None else _check_int("seed", seed)
        # The mixture's device and buffers travel with every source's
        # arguments; the first source's are the mixture's own (the sources'
        # loaders stay in host memory).
        on_gpu = self._device_args["device"] is not None
        return _args(s.path, self.batch_size, seed=seed, rank=self.rank,
                     world_size=self.world_size, streams=streams, epoch=epoch, split=self.split,
                     output="dlpack" if on_gpu else "numpy", **opts, **self._opts,
                     **self._device_args)

    def _open(self, streams: int):
        """(Re)opens the C mixture with `streams`."""
        if self._c is not None:
            self._c.close()
            self._c = None
        specs = [(self._source_args(i, s, streams, self._epoch),
                  1.0 if s.count is not None else s.weight, s.count or 0, s.names or None)
                 for i, s in enumerate(self.sources)]
        try:
            self._c = _stoker.open_mixture(specs, self.exhaust, self.homogeneous, self.seed)
        except StokerError as e:
            if e.code == _STK_ESCHEMA:
                raise InvalidArgument(
                    f"{e.message}; the sources give different fields: select and rename them "
                    f"to match (Source fields= and names=), or use homogeneous=True") from None
            raise
        self.streams = streams
        self._counts = None

    def __repr__(self) -> str:
        return (f"<stoker.Mixture of {len(self.sources)} sources, batch_size="
                f"{self.batch_size}, exhaust={self.exhaust!r}, homogeneous="
                f"{self.homogeneous}, rank={self.rank}, world_size={self.world_size}, "
                f"rank_source={self.rank_source!r}, epoch={self._epoch}>")

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resumes where ``state_dict()`` was taken: a state of another
        world size that divides its streams (which stay the state's for the
        rest of the run), or another batch size (mixed batches)."""
        if not isinstance(state, dict):
            raise TypeError("state must be a dict from state_dict()")
        streams = _check_int("state's streams", state.get("streams", 1), 1)
        if streams % self.world_size:
            raise InvalidArgument(f"the state's streams ({streams}) are not a multiple of "
                                  f"world_size {self.world_size}: a mixture resumes into a "
                                  f"world size that divides them")
        if streams != self.streams:
            self._open(streams)
        super().load_state_dict(state)

    def epoch_counts(self) -> Dict[str, Any]:
        """What an epoch holds: samples in all, each source's, and this
        rank's batches."""
        if self._counts is None:
            from ._loader import _count
            unit = self.streams * (self.batch_size if self.homogeneous else 1)
            specs = []
            for i, s in enumerate(self.sources):
                opts = dict(s.options)
                opts.setdefault("shuffle", self._shuffle)
                opts.pop("seed", None)
                n = _count(s.path, self.batch_size, **opts)["epoch_samples"]
                specs.append((n // unit, 1.0 if s.count is not None else s.weight,
                              (s.count or 0) // unit))
            m = _stoker.Mix(specs, self.exhaust, self.seed)
            self._counts = {"epoch_samples": m.rounds() * unit,
                            "source_samples": [r * unit for r in m.source_rounds()]}
        return dict(self._counts, rank_batches=len(self))

    def sources_of_last(self) -> Optional[np.ndarray]:
        """The source of each sample of the last batch (indexes into
        ``sources``), or None before the first."""
        if self._last_sources is None:
            return None
        return np.frombuffer(self._last_sources, dtype=np.int32).copy()


def open_mixture(sources: Sequence[Any], batch_size: int, **options: Any) -> Mixture:
    """stoker.Loader([sources...], ...)."""
    return Mixture(sources, batch_size, **options)
