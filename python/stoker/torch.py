"""stoker inside torch.utils.data.DataLoader.

    import stoker.torch

    loader = stoker.torch.DataLoader("basins.stk", 256, window=365, shuffle="random")
    for epoch in range(10):
        loader.dataset.set_epoch(epoch)     # optional: epochs advance by themselves
        for batch in loader:
            ...

or, with a DataLoader of one's own, always given batch_size=None:

    from torch.utils.data import DataLoader

    ds = stoker.torch.Dataset("basins.stk", batch_size=256, window=365, shuffle="random")
    for batch in DataLoader(ds, batch_size=None, num_workers=0):
        ...

stoker batches already, in its own threads, so the DataLoader is given
batch_size=None and, best, num_workers=0: the batches then reach the
training loop without a copy. With worker processes each worker opens its
own loader over its share of the rank's batches, and the DataLoader copies
each batch into shared memory to pass it between processes.

Epochs follow set_epoch(epoch) when it is called (as with
DistributedSampler), and otherwise advance by themselves, one per pass over
the DataLoader, in every configuration: no workers, workers started anew
each epoch, or persistent_workers=True.  Worker processes hold copies of
the dataset, so the parent's set_epoch reaches them through a small state
file the copies share (under the temporary directory, removed with the
dataset); the workers of one pass agree on its epoch through it.

With worker processes the rank's batches are dealt to the workers whole
(worker k of n takes batches k, k + n, ...), so that len(DataLoader) is the
number of batches it yields and, since the DataLoader takes one batch from
each worker in turn, the batches and their order are the same with any
number of workers.

len(dataset) is counted from the dataset alone, without opening a loader
or starting its threads, so that the DataLoader's parent process (which
calls len()) holds no loader when it forks its workers.

The dataset implements state_dict() / load_state_dict(), which
torchdata.stateful_dataloader.StatefulDataLoader calls in each worker, so a
run resumes exactly where it stopped.

A DataLoader left with its default batch_size=1 would batch stoker's
batches again (x of shape (1, 256, 365, 4)): the Dataset sees the
DataLoader's collation when it is iterated and warns once, naming the fix.

Transforms run where the batches are read, in the DataLoader's workers when
there are any: ``transform=`` on each sample (the batch is cut into
samples, each a dict of views, and the transform's results are batched
again), then ``batch_transform=`` on the batch.  Both are pickled with the
dataset for workers started by spawn or forkserver, so they must then be
module-level functions or picklable objects.  They do not touch the resume
state: a resumed run gives the batches that follow, transformed alike.
The fast path for arithmetic over a whole batch (normalising, masking,
casting) is neither: have the batches arrive on the GPU (``device="cuda"``)
and apply it there in the training loop, a few kernels per batch.
"""
from __future__ import annotations

import fcntl
import json
import os
import pickle
import sys
import tempfile
import warnings
import weakref
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np
import torch.utils.data

from . import _ranks
from ._errors import InvalidArgument
from ._loader import Loader, _count, _device_index
from ._types import PathLike

__all__ = ["DataLoader", "Dataset", "Samples"]

# A per-sample transform: a sample's dict of tensors in, a dict out.
SampleTransform = Callable[[Dict[str, Any]], Mapping[str, Any]]
# A batch transform: a batch in, anything the DataLoader can pass on out.
BatchTransform = Callable[[Dict[str, Any]], Any]


class Dataset(torch.utils.data.IterableDataset):
    """An IterableDataset of stoker batches (dicts of torch tensors).

    Give it to a DataLoader with ``batch_size=None``: stoker batches
    already. Each process that iterates it (the training process, or each
    DataLoader worker) opens its own Loader there.

    Args:
        path: The dataset directory or in-place index; or a list of sources
            (see ``stoker.Source``), which makes a mixture (with DataLoader
            workers, only of sources read straight into its batches: not
            remote ones, block order over data read from files, or
            ``on_error="skip"``).
        batch_size: Samples per batch.
        transform: Called on each sample of each batch, where the batch is
            read (in a DataLoader worker when there are workers): a dict
            of the sample's fields (views of the batch: a window's rows, a
            ragged field's values) in, a dict of tensors, arrays, numbers
            or other objects out, the same keys for every sample.  The
            results are batched again: tensors and arrays stacked, numbers
            made a tensor, anything else kept in a list; a key that was a
            ragged field of the batch is concatenated with its
            ``<key>_offsets`` as stoker gives it.  Default None.
        batch_transform: Called on each batch (after ``transform``), where
            it is read; it may return anything the DataLoader can pass on.
            Default None.
        **kwargs: The keyword-only options of stoker.Loader, with its
            defaults, except ``output`` (always torch) and ``split`` (set
            per worker). rank and world_size not given are found when an
            epoch starts (not here), from the torch.distributed group or
            the launcher's variables; see ``rank_info()``.

    Both transforms travel with the dataset to the DataLoader's workers
    (pickled where they are started by spawn or forkserver: use a
    module-level function or a picklable object there) and leave the
    resume state as it is.  A transform that draws random numbers
    repeats its results after a resume only if it seeds its own draws.
    Arithmetic over whole batches is fastest on the GPU, in the training
    loop, over batches that arrive there (``device="cuda"``).

    Raises:
        TypeError: ``output`` was given, or a transform is not callable.
    """

    def __init__(self, path: PathLike, batch_size: int, *,
                 transform: Optional[SampleTransform] = None,
                 batch_transform: Optional[BatchTransform] = None, **kwargs: Any):
        super().__init__()
        if "output" in kwargs:
            raise TypeError("stoker.torch.Dataset always yields torch tensors; drop 'output'")
        for name, fn in (("transform", transform), ("batch_transform", batch_transform)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, not {type(fn).__name__}")
        self.transform = transform
        self.batch_transform = batch_transform
        # A list of sources: a mixture (stoker.Mixture), read in this
        # process by the sources' own threads.
        self._mixture = isinstance(path, (list, tuple))
        self.path = list(path) if self._mixture else os.fspath(path)
        self.batch_size = batch_size
        self.kwargs = dict(kwargs)
        self.rank = kwargs.pop("rank", None)
        self.world_size = kwargs.pop("world_size", None)
        self.kwargs.pop("rank", None)
        self.kwargs.pop("world_size", None)
        self._epoch = int(self.kwargs.pop("epoch", 0))
        self._fixed_share: Any = None   # (workers: the share found by the parent)
        self._loader = None
        self._pid = None          # the process that opened self._loader
        self._pending_state = None
        self._exhausted = False
        self._passes = 0          # passes this copy ran (persistent workers run several)
        self._lens: Dict[Any, int] = {}  # len() by share
        # The epochs' hand-off between this object and its copies in worker
        # processes (_Epochs); made with the object, removed with it.
        self._epochs = _Epochs(self._epoch)

    def __getstate__(self):
        # A DataLoader worker started by spawn or forkserver gets a pickled
        # copy: it opens its own loader (an open one cannot be pickled).
        state = self.__dict__.copy()
        state["_loader"] = None
        state["_pid"] = None
        # A transform pickle cannot take would fail the worker's start with
        # a message that names no transform: name it.  (copy.deepcopy
        # calls this too, and copies a lambda as it is.)
        copying = sys._getframe(1).f_globals.get("__name__") == "copy"
        for name in ("transform", "batch_transform"):
            fn = state.get(name)
            if fn is None or copying:
                continue
            try:
                pickle.dumps(fn)
            except Exception as e:
                raise TypeError(
                    f"stoker.torch.Dataset's {name}={fn!r} cannot be pickled, as DataLoader "
                    f"workers started by spawn or forkserver need it: define it at a "
                    f"module's top level, or start the workers by fork ({e})") from e
        if torch.utils.data.get_worker_info() is None:
            # Pickled in the training process for workers started by spawn
            # or forkserver, where torch.distributed is not initialised:
            # they take the rank found here.  (Where none can be found the
            # worker looks again, and raises there.)
            try:
                state["_fixed_share"] = self.rank_info()
            except InvalidArgument:
                state["_fixed_share"] = None
        return state

    def rank_info(self) -> _ranks.Share:
        """(rank, world_size, source) as this process finds them now: the
        arguments, the torch.distributed group, or the launcher's
        variables (see stoker.Loader's ``rank``).  Found at each iteration,
        not at construction: a Dataset made before
        ``init_process_group`` reads the share of the group it trains in."""
        if self._fixed_share is not None:
            return self._fixed_share
        served = _accelerate_dispatch()
        if served and self.rank is None and self.world_size is None:
            return _ranks.Share(0, 1, f"Accelerate's dispatcher: this process reads the "
                                      f"epoch for all {served} processes")
        return _ranks.resolve(self.rank, self.world_size)

    def _share(self) -> Tuple[int, int, Tuple[int, int]]:
        rank, world, _ = self.rank_info()
        info = torch.utils.data.get_worker_info()
        if info is None:
            return rank, world, (0, 1)
        # The rank's batches, dealt whole to the workers.
        return rank, world, (info.id, info.num_workers)

    def _open(self):
        rank, world, split = self._share()
        # A loader opened in another process (the DataLoader's parent, before
        # it forked this worker) has no threads here: open a new one, even
        # when the share is the same (num_workers=1).
        if self._loader is not None and (
                self._pid != os.getpid()
                or (self._loader.rank, self._loader.world_size, self._loader.split)
                != (rank, world, split)):
            self._loader.close()
            self._loader = None
        if self._loader is None:
            self._loader = Loader(self.path, self.batch_size, rank=rank, world_size=world,
                                  split=split, epoch=self._epoch, output="torch", **self.kwargs)
            self._pid = os.getpid()
        return self._loader

    def __repr__(self) -> str:
        try:
            share = "rank={} world_size={} rank_source={!r}".format(*self.rank_info())
        except InvalidArgument as e:
            share = f"rank unknown ({e})"
        return (f"<stoker.torch.Dataset path={self.path!r} batch_size={self.batch_size} "
                f"epoch={self._epoch} {share}>")

    def close(self) -> None:
        """Stops this process's loader and its threads (a DataLoader
        worker's are its own). Safe from any thread at any time: an
        iteration in progress raises InvalidArgument ("closed"), batches it
        gave stay valid, and the next iteration opens a new loader."""
        ld, self._loader = self._loader, None
        if ld is not None and self._pid == os.getpid():
            ld.close()

    def set_epoch(self, epoch: int) -> None:
        """Chooses the epoch the next iteration runs (in every worker), as
        DistributedSampler.set_epoch does."""
        self._epoch = int(epoch)
        self._exhausted = False
        self._epochs.set(self._epoch)
        if self._loader is not None:
            self._loader.set_epoch(self._epoch)

    def _pass_key(self, info):
        """This worker's key for its next pass: the workers of one pass share
        the DataLoader's base seed (new for each pass of non-persistent
        workers) and their count of passes (which persistent workers keep)."""
        key = f"{info.seed - info.id}:{self._passes}"
        self._passes += 1
        return key

    def __iter__(self) -> Iterator[Dict[str, torch.Tensor]]:
        # Not a generator itself, so that it runs when the DataLoader calls
        # iter() on it, and can see the DataLoader's fetcher there.
        collated = _collating_fetcher(self)
        in_worker = torch.utils.data.get_worker_info() is not None
        if collated and not in_worker:
            _warn_collated(self._epochs.path)
        return self._transformed(collated and in_worker)

    def _transformed(self, mark: bool) -> Iterator[Any]:
        """The batches, transformed.  mark: a worker's batches go to a
        collating DataLoader, and carry the warning to its process."""
        for batch in self._batches():
            if self.transform is not None:
                batch = _rebatch(batch, self.transform)
            if self.batch_transform is not None:
                batch = self.batch_transform(batch)
            if mark:
                if isinstance(batch, dict):
                    batch = _Collated(batch, self._epochs.path)
                else:
                    # A batch_transform's own type: warn here (on the
                    # worker's stderr) instead.
                    _warn_collated(self._epochs.path)
            yield batch

    def _batches(self) -> Iterator[Dict[str, torch.Tensor]]:
        loader = self._open()
        info = torch.utils.data.get_worker_info()
        if self._pending_state is not None:
            loader.load_state_dict(self._pending_state)
            self._epoch = loader.epoch
            self._pending_state = None
            if info is not None:
                self._epochs.resumed(self._pass_key(info), self._epoch)
        else:
            if info is not None:
                self._epoch = self._epochs.for_pass(self._pass_key(info))
            elif self._exhausted and loader.epoch == self._epoch:
                # A new iteration without set_epoch() runs the next epoch.
                self._epoch += 1
            if self._exhausted or loader.epoch != self._epoch:
                loader.set_epoch(self._epoch)
        self._exhausted = False
        for batch in loader:
            yield batch
        self._exhausted = True

    def state_dict(self) -> Dict[str, Any]:
        """The resume state (the torchdata StatefulDataLoader protocol): the
        open loader's (see Loader.state_dict), else the epoch to start."""
        # A state loaded but not yet applied (it is, at the first batch) is
        # the state, even when a loader is open.
        if self._pending_state is not None:
            return dict(self._pending_state)
        if self._loader is None:
            return {"epoch": self._epoch, "position": None}
        return self._loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes from ``state_dict()`` at the next iteration."""
        if state.get("position") is None:
            self._epoch = int(state.get("epoch", 0))
            self._pending_state = None
            return
        self._pending_state = dict(state)

    def __len__(self) -> int:
        """The number of batches an epoch yields (through a DataLoader, with
        any number of workers).  Counted from the dataset without opening a
        loader: no thread starts here."""
        rank, world, split = self._share()
        key = (rank, world, split)
        if key not in self._lens and self._mixture:
            # A mixture counts its sources' samples by opening them.
            self._lens[key] = len(self._open())
        if key not in self._lens:
            counts = _count(self.path, self.batch_size, rank=rank, world_size=world,
                            split=split, epoch=self._epoch, output="torch", **self.kwargs)
            self._lens[key] = counts["rank_batches"]
        return self._lens[key]


class Samples(Dataset):
    """An IterableDataset of single samples (dicts of torch tensors), for
    code that batches by itself: the ``transformers`` Trainer, or a
    DataLoader with a ``batch_size`` and a ``collate_fn`` of its own.

        trainer = Trainer(model, TrainingArguments(..., per_device_train_batch_size=32),
                          train_dataset=stoker.torch.Samples("tokens.stk", shuffle="random"),
                          data_collator=DataCollatorWithPadding(tokenizer))

    stoker still reads in batches of ``read_batch`` samples, in its own
    threads, and each sample is a view of one of them (a ragged field's
    rows, a string field's bytes); the DataLoader's collate copies them into
    its batch.  Everything else (ranks found when an epoch starts, epochs,
    workers, state_dict) is as for ``Dataset``.  ``len()`` is the samples
    an epoch gives this rank, so that the DataLoader's length is right.

    ``transform=`` is called on each sample (a dict of views) before it is
    yielded, in the DataLoader's workers when there are any; its result
    goes to the DataLoader's collate_fn as it is.  There is no
    ``batch_transform``: the batches are the DataLoader's (its
    ``collate_fn``).
    """

    def __init__(self, path: PathLike, *, read_batch: int = 256,
                 transform: Optional[Callable[[Dict[str, Any]], Any]] = None, **kwargs: Any):
        if "batch_transform" in kwargs:
            raise TypeError("stoker.torch.Samples yields single samples, which the DataLoader "
                            "batches: transform its batches in its collate_fn, not with "
                            "batch_transform")
        super().__init__(path, read_batch, transform=transform, **kwargs)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        # Batching the samples is the point here: no warning.
        for batch in self._batches():
            for sample in _samples(batch):
                yield sample if self.transform is None else self.transform(sample)

    def __len__(self) -> int:
        rank, world, _ = self._share()
        key = (rank, world, (0, 1), "samples")
        if key not in self._lens:
            if self._mixture:
                self._lens[key] = self._open().counts()["rank_samples"]
            else:
                self._lens[key] = _count(self.path, self.batch_size, rank=rank,
                                         world_size=world, epoch=self._epoch, output="torch",
                                         **self.kwargs)["rank_samples"]
        return self._lens[key]


def DataLoader(path: PathLike, batch_size: int, *, num_workers: int = 0,
               transform: Optional[SampleTransform] = None,
               batch_transform: Optional[BatchTransform] = None,
               stateful: Optional[bool] = None, persistent_workers: Optional[bool] = None,
               pin_memory: bool = False, prefetch_factor: Optional[int] = None,
               multiprocessing_context: Any = None,
               worker_init_fn: Optional[Callable[[int], None]] = None, timeout: float = 0,
               **kwargs: Any) -> torch.utils.data.DataLoader:
    """A DataLoader over a new ``Dataset(path, batch_size, ...)``, set up
    for it: ``batch_size=None`` (stoker batches), so each batch arrives as
    stoker made it.

        loader = stoker.torch.DataLoader("basins.stk", 256, window=365, shuffle="random")
        for batch in loader:               # {"x": [256, 365, 4], ...}
            ...

    The dataset is ``loader.dataset`` (``set_epoch`` and ``len``).

    Args:
        path, batch_size: As ``Dataset`` takes them.
        num_workers: DataLoader worker processes, default 0: stoker reads
            in threads of its own, and without workers the batches reach
            the training loop without a copy.  Workers are worth it for a
            ``transform`` that takes Python time per sample.
        transform, batch_transform: As ``Dataset`` takes them.
        stateful: True: a ``torchdata`` ``StatefulDataLoader`` (its
            ``state_dict()`` resumes a run mid-epoch; ImportError without
            torchdata).  False: a ``torch.utils.data.DataLoader``.  None
            (the default): the first where torchdata is installed.
        persistent_workers: Default True when there are workers: they
            keep their loaders open from one epoch to the next (epochs
            still follow ``set_epoch`` or advance by themselves).
        pin_memory: Default False: for batches on the GPU, ``device="cuda"``
            copies them there from stoker's own page-locked buffers,
            without the extra copy that pinning each batch costs.
        prefetch_factor, multiprocessing_context, worker_init_fn, timeout:
            Passed to the DataLoader (only with workers where it asks so).
        **kwargs: The options of ``Dataset`` (those of stoker.Loader).

    Raises:
        InvalidArgument: ``device`` is a GPU and there are workers (the
            batches are put on the GPU in the process that reads them:
            use ``num_workers=0``).
        ImportError: ``stateful=True`` without torchdata.
    """
    if num_workers > 0 and _device_index(kwargs.get("device"), resolve=False) >= 0:
        raise InvalidArgument(
            f"stoker.torch.DataLoader: device={kwargs['device']!r} puts batches on the GPU in "
            f"the process that reads them, which cannot be a worker: use num_workers=0 "
            f"(stoker reads in threads of its own), not {num_workers}")
    ds = Dataset(path, batch_size, transform=transform, batch_transform=batch_transform,
                 **kwargs)
    cls: Any = torch.utils.data.DataLoader
    if stateful or stateful is None:
        try:
            from torchdata.stateful_dataloader import StatefulDataLoader
            cls = StatefulDataLoader
        except ImportError:
            if stateful:
                raise ImportError("stoker.torch.DataLoader(stateful=True) needs torchdata "
                                  "(pip install torchdata)") from None
    opts: Dict[str, Any] = dict(batch_size=None, num_workers=num_workers,
                                pin_memory=pin_memory, timeout=timeout,
                                worker_init_fn=worker_init_fn)
    if num_workers > 0:
        opts["persistent_workers"] = True if persistent_workers is None else persistent_workers
        if prefetch_factor is not None:
            opts["prefetch_factor"] = prefetch_factor
        if multiprocessing_context is not None:
            opts["multiprocessing_context"] = multiprocessing_context
    elif persistent_workers:
        raise InvalidArgument("stoker.torch.DataLoader: persistent_workers=True needs "
                              "num_workers > 0")
    with warnings.catch_warnings():
        # StatefulDataLoader (torchdata 0.11) calls torch.set_vital, which
        # torch 2.13 deprecates, at every construction: nothing a user of
        # this function can act on.
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
        return cls(ds, **opts)


def _samples(batch: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """A batch cut into samples: dicts of views (a ragged field's values
    between its offsets; the offsets themselves left out)."""
    names = [k for k in batch if not (k.endswith("_offsets") and k[:-8] in batch)]
    ragged = {k: batch[k + "_offsets"].tolist() for k in names if k + "_offsets" in batch}
    n = len(next(iter(ragged.values()))) - 1 if ragged else len(batch[names[0]])
    return [{k: (batch[k][ragged[k][i]:ragged[k][i + 1]] if k in ragged else batch[k][i])
             for k in names} for i in range(n)]


def _rebatch(batch: Mapping[str, Any], transform: SampleTransform) -> Dict[str, Any]:
    """``transform`` applied to each sample of ``batch``, its results
    batched again (see Dataset's ``transform``)."""
    out = [transform(s) for s in _samples(batch)]
    if not out:
        return {}
    keys = out[0].keys() if isinstance(out[0], Mapping) else None
    for i, s in enumerate(out):
        if not isinstance(s, Mapping):
            raise TypeError(f"stoker.torch.Dataset: transform must return a dict of the "
                            f"sample's fields, not {type(s).__name__} (sample {i} of the batch)")
        if s.keys() != keys:
            raise InvalidArgument(f"stoker.torch.Dataset: transform returned keys "
                                  f"{sorted(s)} for sample {i} of the batch but "
                                  f"{sorted(keys)} for sample 0: every sample needs the same")
    res: Dict[str, Any] = {}
    for k in keys:
        vals = [s[k] for s in out]
        v0 = vals[0]
        if isinstance(v0, np.ndarray):
            vals = [torch.as_tensor(v) for v in vals]
            v0 = vals[0]
        if isinstance(v0, torch.Tensor):
            if k + "_offsets" in batch and v0.dim() >= 1:
                # A ragged field stays ragged, whatever this batch's lengths.
                if k + "_offsets" in keys:
                    raise InvalidArgument(f"stoker.torch.Dataset: transform returned both "
                                          f"{k!r} (a ragged field) and {k + '_offsets'!r}")
                off = [0]
                for v in vals:
                    off.append(off[-1] + v.shape[0])
                res[k] = torch.cat(vals)
                res[k + "_offsets"] = torch.tensor(off, dtype=batch[k + "_offsets"].dtype,
                                                   device=batch[k + "_offsets"].device)
                continue
            shapes = {tuple(v.shape) for v in vals}
            if len(shapes) > 1:
                raise InvalidArgument(
                    f"stoker.torch.Dataset: transform returned {k!r} of shapes "
                    f"{sorted(shapes)[:4]} within one batch, which cannot be stacked: "
                    f"give every sample's {k!r} the same shape (pad or crop it)")
            res[k] = torch.stack(vals)
        elif isinstance(v0, (bool, int, float)) and all(
                isinstance(v, (bool, int, float)) for v in vals):
            res[k] = torch.tensor(vals)
        else:
            res[k] = vals
    return res


def _collating_fetcher(ds: Dataset) -> bool:
    """Whether ``ds`` is being iterated by a DataLoader fetcher that
    collates (auto_collation: the DataLoader's batch_size is not None),
    which would batch its batches again.  The DataLoader calls iter() on
    the dataset from the fetcher it makes (in its process, or in each
    worker), so the fetcher is one of the callers' ``self``; a fetcher of
    another dataset (one that wraps this) is not this one's concern."""
    f = sys._getframe(2)
    for _ in range(8):
        if f is None:
            break
        obj = f.f_locals.get("self")
        if obj is not None and getattr(obj, "dataset", None) is ds and hasattr(
                obj, "auto_collation"):
            return bool(obj.auto_collation)
        f = f.f_back
    return False


_COLLATED = ("stoker.torch.Dataset yields whole batches, and this DataLoader batches them "
             "again (each tensor gains a leading dimension: x of shape (1, 256, ...) with "
             "the DataLoader's default batch_size=1). Give the DataLoader batch_size=None, "
             "or make it with stoker.torch.DataLoader(path, batch_size, ...), which does.")
_warned: set = set()


def _warn_collated(key: str) -> None:
    """Warns once in this process for the dataset whose shared state file
    is ``key`` (and its copies in workers)."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(_COLLATED, UserWarning, stacklevel=3)


def _from_worker(key: str, batch: Dict[str, Any]) -> Dict[str, Any]:
    _warn_collated(key)
    return batch


class _Collated(dict):
    """A batch that a worker hands to a collating DataLoader.  Collation
    copies it (copy.copy, keeping the type); the process that receives the
    result unpickles it as a plain dict, and warns there, where the user
    sees it (a worker's warnings go to its stderr, never to a notebook)."""

    def __init__(self, batch: Mapping[str, Any], key: str):
        super().__init__(batch)
        self._key = key

    def __copy__(self) -> "_Collated":
        return _Collated(self, self._key)

    def __reduce__(self):
        return (_from_worker, (self._key, dict(self)))


def _accelerate_dispatch() -> int:
    """The processes that an Accelerate DataLoaderDispatcher up the stack
    serves, or 0.

    ``accelerator.prepare(DataLoader(iterable dataset))`` dispatches by
    default: process 0 iterates the DataLoader, and each batch it reads is
    cut into one part a process.  A rank's share read there would reach
    the processes as halves of a half: the epoch must be read whole.  The
    dispatcher is up the stack when this runs in the training process, in
    its len(), and in DataLoader workers started by fork (which keep the
    frames that forked them); workers started by spawn take what the
    parent found when it pickled the dataset."""
    mod = sys.modules.get("accelerate.data_loader")
    cls = getattr(mod, "DataLoaderDispatcher", None) if mod is not None else None
    if cls is None:
        return 0
    f = sys._getframe(1)
    while f is not None:
        obj = f.f_locals.get("self")
        if isinstance(obj, cls):
            try:
                return int(obj.state.num_processes)
            except (AttributeError, TypeError, ValueError):
                return 1
        f = f.f_back
    return 0


class _Epochs:
    """Which epoch each pass runs, shared by a Dataset and its copies in
    worker processes: a small JSON file under the temporary directory, read
    and written under an exclusive lock (flock works across processes
    whatever the DataLoader's start method).

    It holds the epoch last given to set_epoch() with a count of calls, and
    the last pass: its key (see Dataset._pass_key), its epoch, and the
    count of set_epoch() calls it had seen.  The first worker of a pass
    decides: the epoch set since the last pass if set_epoch() was called,
    else the last pass's epoch + 1; the others read the decision.
    """

    def __init__(self, epoch):
        fd, self.path = tempfile.mkstemp(prefix="stoker-epochs-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"set": epoch, "sets": 0, "key": None, "epoch": epoch, "seen": 0}, f)
        self._owner = os.getpid()
        self._gone = weakref.finalize(self, _Epochs._remove, self.path, self._owner)

    @staticmethod
    def _remove(path, owner):
        if os.getpid() == owner:
            try:
                os.unlink(path)
            except OSError:
                pass

    def __getstate__(self):
        return {"path": self.path, "_owner": self._owner}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def _update(self, fn):
        with open(self.path, "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            st = json.load(f)
            out = fn(st)
            f.seek(0)
            f.truncate()
            json.dump(st, f)
            return out

    def set(self, epoch):
        def fn(st):
            st["set"] = epoch
            st["sets"] += 1
        try:
            self._update(fn)
        except OSError:
            pass  # no file (a copy made by plain pickling): nothing to tell

    def for_pass(self, key):
        def fn(st):
            if st["key"] != key or st["sets"] != st["seen"]:
                if st["key"] is None or st["sets"] != st["seen"]:
                    st["epoch"] = st["set"]
                else:
                    st["epoch"] += 1
                st["key"], st["seen"] = key, st["sets"]
            return st["epoch"]
        return self._update(fn)

    def resumed(self, key, epoch):
        def fn(st):
            st["key"], st["epoch"], st["seen"] = key, epoch, st["sets"]
        self._update(fn)
