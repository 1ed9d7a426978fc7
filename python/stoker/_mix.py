"""Mixtures: several sources (datasets or in-place indexes, local or remote)
read as one stream, each at its weight (or an exact count per epoch).

A Mixture is a Loader over stk_loader_open_mixture (src/mix/mixer.c): its
batches are filled in C, in the background, from the sources' own loaders.
_Composed does the same in Python for the one case the C mixture cannot
hold (homogeneous batches of sources whose fields differ).

How it is built (docs/ARCHITECTURE.md, "Mixtures"): each source is read by
a Loader of its own (its own fields, window, order and epochs, opened with
the mixture's rank, world size and streams S), and the epoch is a sequence
of rounds.  In a round every rank takes one sample (``homogeneous=False``)
or one whole batch (``homogeneous=True``) from the same source; which
source round q of epoch e belongs to is stk_mix's closed form of (seed, e,
q).  A round of a source is S of its samples (S batches), consecutive in
its own order, so that rank r, reading lanes r, r + W, ... of every round,
reads a source exactly as that source's own Loader deals it to rank r: the
source loaders run ahead in their threads and the mixture takes their
samples in sequence.  A source's rounds continue from one mixture epoch to
the next, through its own epochs (each used whole but for fewer than one
round's samples at its end), so every sample of a source's epoch comes once.

The state is (seed, epoch, position, streams), as a Loader's: where each
source stands is computed from it (stk_mix_counts), so a run resumes
exactly, with any world size that divides the state's streams.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _stoker
import inspect

from ._errors import InvalidArgument, StokerError
from ._loader import Loader, _check_int, _loader_args, _share_args
from ._types import Batch, PathLike

__all__ = ["Source", "Mixture", "open_mixture"]

_U64 = (1 << 64) - 1
_MASK63 = (1 << 63) - 1

# Options of a source's own Loader that a Source may set.
_SOURCE_OPTIONS = ("fields", "window", "stride", "valid_field", "valid", "shuffle", "seed",
                   "block_bytes", "block_samples", "block_group", "root", "cache_dir",
                   "cache_budget", "max_open_files")
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
            valid_field, valid, shuffle (default: the mixture's), seed
            (default: one derived from the mixture's seed and the source's
            place), block_bytes, block_samples, block_group, root,
            cache_dir, cache_budget, max_open_files.
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


class _Feed:
    """Where the mixture stands in one source: its loader, its epoch, what
    this rank still takes of that epoch, and the batch being taken from."""

    def __init__(self, loader: Loader, units: int, unit: int, world: int):
        self.ld = loader
        self.units = units          # rounds one epoch of the source gives
        self.unit = unit            # samples per round (all ranks)
        self.world = world
        self.epoch = 0
        self.left = 0               # this rank's samples left in the source's epoch
        self.batch: Optional[Dict[str, Any]] = None
        self.ids: Optional[np.ndarray] = None
        self.at = 0                 # next sample of `batch`
        self.n = 0                  # samples in `batch`

    def seek(self, seed: int, fingerprint: int, rounds: int, partial: int, streams: int):
        """Puts the source `rounds` rounds (and `partial` samples) from its
        first epoch's start."""
        self.epoch, r = divmod(rounds, self.units)
        pos = r * self.unit + partial
        self.ld.load_state_dict({"seed": seed, "epoch": self.epoch, "position": pos,
                                 "fingerprint": fingerprint, "streams": streams})
        self.left = (self.units * self.unit - pos) // self.world
        self.batch = None
        self.at = self.n = 0

    def _next_epoch(self):
        self.epoch += 1
        self.ld.set_epoch(self.epoch)
        self.left = self.units * self.unit // self.world
        self.batch = None
        self.at = self.n = 0

    def _fetch(self):
        if self.left == 0:
            self._next_epoch()
        b = self.ld.next()
        if b is None:
            raise RuntimeError(f"stoker: source {self.ld._path} ended its epoch before the "
                               f"mixture's share of it (a bug)")
        self.batch, self.ids = b, self.ld.sample_ids()
        self.at, self.n = 0, len(self.ids)

    def take(self, k: int) -> List[Tuple[Dict[str, Any], np.ndarray, int, int]]:
        """The next k samples of this rank's share: (batch, ids, a, b) pieces."""
        out = []
        while k:
            if self.batch is None or self.at == self.n:
                self._fetch()
            m = min(k, self.n - self.at, self.left)
            out.append((self.batch, self.ids, self.at, self.at + m))
            self.at += m
            self.left -= m
            k -= m
            if self.left == 0:
                self.batch = None  # the rest of the source's epoch is not ours
        return out

    def take_batch(self, size: int) -> Tuple[Dict[str, Any], np.ndarray]:
        self.batch = None
        if self.left == 0:
            self._next_epoch()
        self._fetch()
        if self.n != size:
            raise RuntimeError(f"stoker: source {self.ld._path} gave a batch of {self.n}, "
                               f"not {size} (a bug)")
        self.left -= size
        b, ids = self.batch, self.ids
        self.batch = None
        return b, ids


class _Composed:
    """A mixture composed in Python from the sources' Loaders: what
    ``homogeneous=True`` uses when the sources' fields differ (each batch is
    then a source's own batch, handed over as it is, which one layout of
    the C mixture cannot hold).  Same options and behaviour as Mixture.

    Batches drawn from several sources at their weights, for one rank.

    Made by ``stoker.Loader([source, ...], batch_size, ...)``. The order is a
    closed-form function of (seed, epoch, position): which source a position
    holds, and which of its samples, is computed directly (no generator is
    replayed), so the state is that of a Loader and resume is exact, also
    into another world size that divides the state's streams.

    Args:
        sources: Paths, dicts of ``stoker.Source`` arguments, or Sources.
        batch_size: Samples per batch.
        exhaust: What ends an epoch when sources run out at their weights:
            ``"stop"`` (the first to run out; the others go on from there
            next epoch), ``"cycle"`` (the last; the others cycle into their
            next epochs) or ``"all"`` (every source gives its whole epoch:
            drawn at their weights until one runs out, then the rest).
        homogeneous: Every batch from one source (needed where the sources'
            fields differ); default: batches mix sources.
        seed: The mixture's seed (the sources' orders derive theirs from it
            unless given).
        epoch: The first epoch.
        shuffle: The sources' order unless a source sets its own.
        rank, world_size, streams: As for a Loader; a round is ``streams``
            samples (batches), and world_size must divide streams.
        drop_last: Drop a last, partial batch.
        source_field: The batch key that says which source (its index in
            ``sources``) each sample came from; None leaves it out.
        output: ``"numpy"`` or ``"torch"``.
        threads: Worker threads of each source's loader (0: one per CPU, at
            most 8): a loader whose ring is full sleeps, so the busiest
            source has them all.
        prefetch, memory_budget: In all: each source's loader gets its
            part of the memory budget.
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
                 drop_last: bool = False, source_field: Optional[str] = "source",
                 output: Optional[str] = None, threads: int = 0, prefetch: int = 0,
                 memory_budget: int = 1 << 30, **shared: Any):
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
        self.rank, self.world_size, self.split = _share_args(rank, world_size, None)
        self.streams = self.world_size if streams is None else _check_int("streams", streams, 1)
        if self.streams % self.world_size:
            raise InvalidArgument(f"a mixture's streams ({self.streams}) must be a multiple of "
                                  f"world_size ({self.world_size})")
        self.drop_last = bool(drop_last)
        if output is None:
            output = "numpy"
        if output not in ("numpy", "torch"):
            raise InvalidArgument(f"a mixture's output is 'numpy' or 'torch', not {output!r}")
        self._output = output
        if output == "torch":
            import torch  # noqa: F401
        if source_field is not None and not isinstance(source_field, str):
            raise TypeError("source_field must be a str or None")
        self.source_field = source_field
        self._shuffle = shuffle
        self._shared = shared
        k = len(self.sources)
        threads = _check_int("threads", threads)
        if threads == 0:
            threads = min(os.cpu_count() or 1, 8)
        # Every source's loader gets them all: the sources are drawn
        # unevenly, and a source's loader that is ahead waits (its ring
        # full) while the busiest one needs every core.
        self._threads = threads
        self._prefetch = prefetch
        self._memory = max(1 << 20, _check_int("memory_budget", memory_budget, 1) // k)
        self._feeds: List[_Feed] = []
        self._seeds: List[int] = []
        self._fps: List[int] = []
        self._last_sources: Optional[np.ndarray] = None
        self._last_ids: Optional[np.ndarray] = None
        self._checked = False
        try:
            self._configure(self.streams)
            self._start(_check_int("epoch", epoch), 0)
        except BaseException:
            self.close()
            raise

    # -- opening ------------------------------------------------------------

    @property
    def _unit(self) -> int:
        """Samples (all ranks) in a round."""
        return self.streams * (self.batch_size if self.homogeneous else 1)

    def _configure(self, streams: int):
        """(Re)opens the sources' loaders for `streams` and makes the
        schedule."""
        for f in self._feeds:
            f.ld.close()
        self._feeds, self._seeds, self._fps = [], [], []
        self.streams = streams
        unit = self._unit
        specs = []
        for i, s in enumerate(self.sources):
            opts = dict(s.options)
            opts.setdefault("shuffle", self._shuffle)
            seed = opts.pop("seed", None)
            seed = _source_seed(self.seed, i) if seed is None else _check_int("seed", seed)
            ld = Loader(s.path, self.batch_size, seed=seed, rank=self.rank,
                        world_size=self.world_size, streams=streams, pad=False,
                        drop_last=False, threads=self._threads, prefetch=self._prefetch,
                        memory_budget=self._memory, output="numpy", **opts, **self._shared)
            n = ld.counts()["epoch_samples"]
            units = n // unit
            if units == 0:
                ld.close()
                raise InvalidArgument(
                    f"source {i} ({s.path}) has {n} samples, fewer than one round of the "
                    f"mixture takes ({unit}: streams"
                    f"{' x batch_size' if self.homogeneous else ''})")
            rounds = 0
            if s.count is not None:
                if s.count % unit:
                    ld.close()
                    raise InvalidArgument(
                        f"source {i} ({s.path}): count {s.count} must be a multiple of a "
                        f"round's {unit} samples (streams"
                        f"{' x batch_size' if self.homogeneous else ''})")
                rounds = s.count // unit
            self._feeds.append(_Feed(ld, units, unit, self.world_size))
            self._seeds.append(seed)
            self._fps.append(int(ld.state_dict()["fingerprint"]))
            specs.append((units, s.weight, rounds))
        self._mix = _stoker.Mix(specs, self.exhaust, self.seed)
        self._rounds = self._mix.rounds()
        self._source_rounds = self._mix.source_rounds()
        h = hashlib.sha256(repr((self._fps, [(s.weight, s.count) for s in self.sources],
                                 self.exhaust, self.homogeneous,
                                 self.batch_size if self.homogeneous else 0,
                                 [sorted(s.names.items()) for s in self.sources])).encode())
        self._fingerprint = int.from_bytes(h.digest()[:8], "little") & _MASK63

    def _start(self, epoch: int, position: int):
        """Puts every source where (epoch, position) of the mixture has it."""
        unit, W = self._unit, self.world_size
        if position % W or (self.homogeneous and position % (self.batch_size * W)):
            raise InvalidArgument(
                f"position {position} is not at a batch edge of world_size {W}: a mixture "
                f"resumes from a state saved by a run of a world size that this one divides")
        total = self._rounds * unit
        if position > total:
            raise InvalidArgument(f"position {position} is past the epoch's {total} samples")
        q, off = divmod(position, unit)
        counts = self._mix.counts(epoch, q)
        here = -1
        if off:
            here = int(np.frombuffer(self._mix.fill(epoch, q, 1), np.uint32)[0])
        for i, f in enumerate(self._feeds):
            f.seek(self._seeds[i], self._fps[i], epoch * self._source_rounds[i] + counts[i],
                   off if i == here else 0, self.streams)
        self._epoch = epoch
        self._position = position
        self._taken = 0          # this rank's samples since (epoch, position)
        self._rank_samples = (total - position) // W
        self._exhausted = False

    # -- batches ------------------------------------------------------------

    def __len__(self) -> int:
        """Batches this rank gets in the current epoch (from its start, or
        from where it was restored)."""
        n = self._rank_samples
        if self.homogeneous or self.drop_last:
            return n // self.batch_size
        return -(-n // self.batch_size)

    def __iter__(self):
        if self._exhausted:
            self.set_epoch(self._epoch + 1)
        while True:
            b = self.next()
            if b is None:
                return
            yield b
            b = None

    def next(self) -> Optional[Batch]:
        """The next batch of this rank, or None at the end of the epoch."""
        B = self.batch_size
        left = self._rank_samples - self._taken
        if left <= 0 or (left < B and (self.drop_last or self.homogeneous)):
            self._exhausted = True
            return None
        n = min(B, left)
        W, r, unit = self.world_size, self.rank, self._unit
        p0 = self._position + self._taken * W + r
        if self.homogeneous:
            q = p0 // unit
            i = int(np.frombuffer(self._mix.fill(self._epoch, q, 1), np.uint32)[0])
            b, ids = self._feeds[i].take_batch(B)
            out = self._rename(i, b)
            src = np.full(n, i, np.int32)
        else:
            pos = p0 + np.arange(n, dtype=np.uint64) * np.uint64(W)
            rounds = pos // np.uint64(unit)
            q0 = int(rounds[0])
            sched = np.frombuffer(self._mix.fill(self._epoch, q0, int(rounds[-1]) - q0 + 1),
                                  np.uint32)
            src = sched[(rounds - np.uint64(q0)).astype(np.intp)].astype(np.int32)
            out, ids = self._assemble(src, n)
        self._taken += n
        self._last_sources = src
        self._last_ids = ids
        if self.source_field is not None:
            out[self.source_field] = src
        if self._output == "torch":
            import torch
            out = {k: torch.from_numpy(v) for k, v in out.items()}
        return out

    def _rename(self, i: int, b: Dict[str, Any]) -> Dict[str, Any]:
        names = self.sources[i].names
        if not names:
            out = dict(b)
        else:
            out = {}
            for k, v in b.items():
                if k.endswith("_offsets") and k[:-8] in b:
                    out[names.get(k[:-8], k[:-8]) + "_offsets"] = v
                else:
                    out[names.get(k, k)] = v
        if self.source_field is not None and self.source_field in out:
            raise InvalidArgument(f"source {i} ({self.sources[i].path}) has a field named "
                                  f"{self.source_field!r}: choose another source_field")
        return out

    def _assemble(self, src: np.ndarray, n: int):
        pieces = {}
        for i in np.unique(src):
            i = int(i)
            rows = np.flatnonzero(src == i)
            pieces[i] = (rows, [(self._rename(i, b), ids, a, z)
                                for b, ids, a, z in self._feeds[i].take(len(rows))])
        ids = np.empty(n, np.uint64)
        for rows, parts in pieces.values():
            at = 0
            for _, pid, a, z in parts:
                ids[rows[at:at + z - a]] = pid[a:z]
                at += z - a
        first = next(iter(pieces.values()))[1][0][0]
        if not self._checked:
            self._check_fields(pieces)
        if len(pieces) == 1 and len(first_parts := next(iter(pieces.values()))[1]) == 1:
            # One piece of one source: its arrays as they are (no copy).
            b, _, a, z = first_parts[0]
            return self._slice(b, a, z), ids
        out = {}
        for k, v in first.items():
            if k.endswith("_offsets") and k[:-8] in first:
                continue
            if k + "_offsets" in first:
                out[k], out[k + "_offsets"] = self._ragged(k, pieces, n)
                continue
            arr = np.empty((n,) + v.shape[1:], v.dtype)
            for rows, parts in pieces.values():
                at = 0
                for b, _, a, z in parts:
                    arr[rows[at:at + z - a]] = b[k][a:z]
                    at += z - a
            out[k] = arr
        return out, ids

    @staticmethod
    def _slice(b, a, z):
        out = {}
        for k, v in b.items():
            if k.endswith("_offsets") and k[:-8] in b:
                continue
            if k + "_offsets" in b:
                offs = b[k + "_offsets"]
                out[k] = v[offs[a]:offs[z]]
                out[k + "_offsets"] = offs[a:z + 1] - offs[a]
            else:
                out[k] = v[a:z]
        return out

    @staticmethod
    def _ragged(k, pieces, n):
        lens = np.empty(n, np.int64)
        first = None
        for rows, parts in pieces.values():
            at = 0
            for b, _, a, z in parts:
                offs = b[k + "_offsets"]
                lens[rows[at:at + z - a]] = offs[a + 1:z + 1] - offs[a:z]
                at += z - a
                first = b[k] if first is None else first
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        data = np.empty((int(offsets[-1]),) + first.shape[1:], first.dtype)
        for rows, parts in pieces.values():
            at = 0
            for b, _, a, z in parts:
                offs = b[k + "_offsets"]
                m = z - a
                lo, hi = int(offs[a]), int(offs[z])
                if hi > lo:
                    shift = offsets[rows[at:at + m]] - offs[a:z]
                    dst = np.arange(lo, hi, dtype=np.int64) + np.repeat(shift, offs[a + 1:z + 1]
                                                                        - offs[a:z])
                    data[dst] = b[k][lo:hi]
                at += m
        return data, offsets

    def _check_fields(self, pieces):
        """Sources whose batches meet must name the same fields with the
        same types and shapes (past the batch axis)."""
        ref_i, ref = None, None
        for i, (_, parts) in pieces.items():
            b = parts[0][0]
            sig = {k: (str(v.dtype), v.shape[1:]) for k, v in b.items()}
            if ref is None:
                ref_i, ref = i, sig
            elif sig != ref:
                raise InvalidArgument(
                    f"sources {ref_i} ({self.sources[ref_i].path}) and {i} "
                    f"({self.sources[i].path}) give different fields "
                    f"({sorted(ref.items())} vs {sorted(sig.items())}): select and rename "
                    f"them to match (Source fields= and names=), or use homogeneous=True")
        if len(pieces) == len(self._feeds):
            self._checked = True

    def sources_of_last(self) -> Optional[np.ndarray]:
        """The source of each sample of the last batch (indexes into
        ``sources``), or None before the first."""
        return None if self._last_sources is None else self._last_sources.copy()

    def sample_ids(self) -> Optional[np.ndarray]:
        """The last batch's sample ids, each within its own source."""
        return None if self._last_ids is None else self._last_ids.copy()

    # -- epochs and state ---------------------------------------------------

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Starts mixture epoch ``epoch`` from its beginning."""
        self._start(_check_int("epoch", epoch), 0)

    def epoch_counts(self) -> Dict[str, Any]:
        """What an epoch holds: samples in all, and each source's."""
        unit = self._unit
        return {"epoch_samples": self._rounds * unit,
                "source_samples": [r * unit for r in self._source_rounds],
                "rank_batches": len(self)}

    def state_dict(self) -> Dict[str, int]:
        """The resume state: seed, epoch, position (samples all ranks
        consumed), streams and fingerprint, as a Loader's."""
        if self._exhausted:
            ep, pos = self._epoch + 1, 0
        else:
            ep, pos = self._epoch, self._position + self._taken * self.world_size
        return {"seed": self.seed, "epoch": ep, "position": pos, "streams": self.streams,
                "fingerprint": self._fingerprint, "stoker_state_version": 1, "mixture": 1}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resumes where ``state_dict()`` was taken (any world size that
        divides the state's streams; the streams stay the state's)."""
        if not isinstance(state, dict):
            raise TypeError("state must be a dict from state_dict()")
        missing = {"seed", "epoch", "position", "fingerprint", "streams"} - set(state)
        if missing:
            raise InvalidArgument(f"state is missing {sorted(missing)}")
        if int(state["seed"]) != self.seed:
            raise InvalidArgument(f"the state's seed {state['seed']} is not this mixture's "
                                  f"{self.seed}")
        streams = _check_int("state's streams", state["streams"], 1)
        if streams % self.world_size:
            raise InvalidArgument(f"the state's streams ({streams}) are not a multiple of "
                                  f"world_size {self.world_size}: a mixture resumes into a "
                                  f"world size that divides them")
        if streams != self.streams:
            self._configure(streams)
        if int(state["fingerprint"]) != self._fingerprint:
            raise InvalidArgument("the state is from another mixture (its sources, weights, "
                                  "counts or policy differ)")
        self._start(_check_int("epoch", state["epoch"]), _check_int("position",
                                                                     state["position"]))

    # -- the rest -------------------------------------------------------------

    def stats(self) -> Dict[str, Any]:
        """Each source loader's statistics (``Loader.stats()``), in order."""
        return {"sources": [f.ld.stats() for f in self._feeds]}

    def fields(self) -> Tuple[str, ...]:
        return tuple(self.sources[0].names.get(k, k) for k in self._feeds[0].ld.fields())

    def close(self) -> None:
        for f in getattr(self, "_feeds", []):
            f.ld.close()

    def __enter__(self) -> "_Composed":
        return self

    def __exit__(self, *exc: Any):
        self.close()
        return False

    def __repr__(self) -> str:
        return (f"<stoker.Mixture of {len(self.sources)} sources, batch_size="
                f"{self.batch_size}, exhaust={self.exhaust!r}, homogeneous="
                f"{self.homogeneous}, rank={self.rank}, world_size={self.world_size}, "
                f"epoch={self._epoch}>")


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


class _FieldsDiffer(InvalidArgument):
    """The sources' fields differ (their batches cannot share one layout)."""


def _args(path, batch_size, **options):
    """A Loader's extension arguments for these options (checked)."""
    bound = inspect.signature(Loader.__init__).bind(None, path, batch_size, **options)
    bound.apply_defaults()
    del bound.arguments["self"]
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
        homogeneous: Every batch from one source (needed where the sources'
            fields differ: such a mixture hands each source's batches over
            as they are); default: batches mix sources.
        seed: The mixture's seed (the sources' orders derive theirs from it
            unless a Source gives its own).
        epoch: The first epoch.
        shuffle: The sources' order unless a source sets its own.
        rank, world_size, streams: As for a Loader; a round is ``streams``
            samples (batches), and world_size must divide streams.
        drop_last: Drop a last, partial batch.
        source_field: The batch key that says which source (its index in
            ``sources``) each sample came from; None leaves it out.
        output: ``"numpy"``, ``"torch"`` or ``"dlpack"``.
        threads: Worker threads of each source's loader (0: one per CPU, at
            most 8): a loader whose ring is full sleeps, so the busiest
            source has them all.
        prefetch: Batch buffers of the mixture's ring (0: 4).
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
                 drop_last: bool = False, source_field: Optional[str] = "source",
                 output: Optional[str] = None, threads: int = 0, prefetch: int = 0,
                 memory_budget: int = 1 << 30, **shared: Any):
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
        self.rank, self.world_size, self.split = _share_args(rank, world_size, None)
        self.streams = self.world_size if streams is None else _check_int("streams", streams, 1)
        if self.streams % self.world_size:
            raise InvalidArgument(f"a mixture's streams ({self.streams}) must be a multiple of "
                                  f"world_size ({self.world_size})")
        if output is None:
            output = "numpy"
        if output not in ("numpy", "torch", "dlpack"):
            raise InvalidArgument(f"a mixture's output is 'numpy', 'torch' or 'dlpack', not "
                                  f"{output!r}")
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
        self.device = None
        self._skip_mode = shared.get("on_error") == "skip"
        self._skipped = 0
        self._started = False
        self._exhausted = False
        self._last_ids = None
        self._last_sources: Optional[np.ndarray] = None
        self._counts: Optional[Dict[str, Any]] = None

    def _source_args(self, i: int, s: Source, streams: int, epoch: int) -> tuple:
        opts = dict(s.options)
        opts.setdefault("shuffle", self._shuffle)
        seed = opts.pop("seed", None)
        seed = _source_seed(self.seed, i) if seed is None else _check_int("seed", seed)
        return _args(s.path, self.batch_size, seed=seed, rank=self.rank,
                     world_size=self.world_size, streams=streams, epoch=epoch,
                     output="numpy", **opts, **self._opts)

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
                raise _FieldsDiffer(
                    f"{e.message}; the sources give different fields: select and rename them "
                    f"to match (Source fields= and names=), or use homogeneous=True") from None
            raise
        self.streams = streams
        self._counts = None

    def __repr__(self) -> str:
        return (f"<stoker.Mixture of {len(self.sources)} sources, batch_size="
                f"{self.batch_size}, exhaust={self.exhaust!r}, homogeneous="
                f"{self.homogeneous}, rank={self.rank}, world_size={self.world_size}, "
                f"epoch={self._epoch}>")

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
        return None if self._last_sources is None else self._last_sources.copy()


def open_mixture(sources: Sequence[Any], batch_size: int, **options: Any):
    """A Mixture, or (homogeneous batches of sources whose fields differ)
    the composed one."""
    try:
        return Mixture(sources, batch_size, **options)
    except _FieldsDiffer:
        if not options.get("homogeneous"):
            raise
    return _Composed(sources, batch_size, **options)
