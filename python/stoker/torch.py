"""stoker inside torch.utils.data.DataLoader.

    from torch.utils.data import DataLoader
    import stoker.torch

    ds = stoker.torch.Dataset("basins.stk", batch_size=256, window=365, shuffle="random")
    for epoch in range(10):
        ds.set_epoch(epoch)
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
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile
import weakref
from typing import Any, Dict, Iterator, Mapping, Tuple

import torch.utils.data

from . import _ranks
from ._errors import InvalidArgument
from ._loader import Loader, _count
from ._types import PathLike

__all__ = ["Dataset", "Samples"]


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
        **kwargs: The keyword-only options of stoker.Loader, with its
            defaults, except ``output`` (always torch) and ``split`` (set
            per worker). rank and world_size not given are found when an
            epoch starts (not here), from the torch.distributed group or
            the launcher's variables; see ``rank_info()``.

    Raises:
        TypeError: ``output`` was given.
    """

    def __init__(self, path: PathLike, batch_size: int, **kwargs: Any):
        super().__init__()
        if "output" in kwargs:
            raise TypeError("stoker.torch.Dataset always yields torch tensors; drop 'output'")
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
    """

    def __init__(self, path: PathLike, *, read_batch: int = 256, **kwargs: Any):
        super().__init__(path, read_batch, **kwargs)

    def __iter__(self) -> Iterator[Dict[str, torch.Tensor]]:  # type: ignore[override]
        for batch in super().__iter__():
            names = [k for k in batch if not k.endswith("_offsets")]
            ragged = {k: batch[k + "_offsets"].tolist() for k in names
                      if k + "_offsets" in batch}
            n = len(next(iter(ragged.values()))) - 1 if ragged else len(batch[names[0]])
            for i in range(n):
                yield {k: (batch[k][ragged[k][i]:ragged[k][i + 1]] if k in ragged
                           else batch[k][i]) for k in names}

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
