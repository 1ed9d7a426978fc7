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
own loader over its share of the samples (rank * num_workers + worker id
out of world_size * num_workers); every sample appears at most once per
epoch (N mod (world_size * num_workers) are dropped, unless pad=True), and
the DataLoader copies each batch into shared memory to pass it between
processes.

Call set_epoch(epoch) before each epoch, as with DistributedSampler: worker
processes start from the parent's copy of the dataset, so only the parent
can move it to the next epoch. Without workers, iterating again also moves
to the next epoch by itself.

The dataset implements state_dict() / load_state_dict(), which
torchdata.stateful_dataloader.StatefulDataLoader calls in each worker, so a
run resumes exactly where it stopped.
"""
import os

import torch.utils.data

from . import Loader, _env_int

__all__ = ["Dataset"]


class Dataset(torch.utils.data.IterableDataset):
    """An IterableDataset of stoker batches (dicts of torch tensors).

    Takes the arguments of stoker.Loader; rank and world_size default to
    torchrun's RANK and WORLD_SIZE.
    """

    def __init__(self, path, batch_size, **kwargs):
        super().__init__()
        if "output" in kwargs:
            raise TypeError("stoker.torch.Dataset always yields torch tensors; drop 'output'")
        self.path = os.fspath(path)
        self.batch_size = batch_size
        self.kwargs = dict(kwargs)
        self.rank = kwargs.pop("rank", None)
        self.world_size = kwargs.pop("world_size", None)
        self.kwargs.pop("rank", None)
        self.kwargs.pop("world_size", None)
        self._epoch = int(self.kwargs.pop("epoch", 0))
        self._loader = None
        self._pid = None          # the process that opened self._loader
        self._pending_state = None
        self._exhausted = False

    def __getstate__(self):
        # A DataLoader worker started by spawn or forkserver gets a pickled
        # copy: it opens its own loader (an open one cannot be pickled).
        state = self.__dict__.copy()
        state["_loader"] = None
        state["_pid"] = None
        return state

    def _share(self):
        rank = self.rank if self.rank is not None else _env_int("RANK", 0)
        world = self.world_size if self.world_size is not None else _env_int("WORLD_SIZE", 1)
        info = torch.utils.data.get_worker_info()
        if info is None:
            return rank, world
        return rank * info.num_workers + info.id, world * info.num_workers

    def _open(self):
        rank, world = self._share()
        # A loader opened in another process (the DataLoader's parent, before
        # it forked this worker) has no threads here: open a new one, even
        # when the share is the same (num_workers=1).
        if self._loader is not None and (
                self._pid != os.getpid()
                or (self._loader.rank, self._loader.world_size) != (rank, world)):
            self._loader.close()
            self._loader = None
        if self._loader is None:
            self._loader = Loader(self.path, self.batch_size, rank=rank, world_size=world,
                                  epoch=self._epoch, output="torch", **self.kwargs)
            self._pid = os.getpid()
        return self._loader

    def set_epoch(self, epoch):
        """Chooses the epoch the next iteration runs (in every worker)."""
        self._epoch = int(epoch)
        self._exhausted = False
        if self._loader is not None:
            self._loader.set_epoch(self._epoch)

    def __iter__(self):
        loader = self._open()
        if self._pending_state is not None:
            loader.load_state_dict(self._pending_state)
            self._epoch = loader.epoch
            self._pending_state = None
        elif self._exhausted or loader.epoch != self._epoch:
            # A new iteration without set_epoch() runs the next epoch.
            if self._exhausted and loader.epoch == self._epoch:
                self._epoch += 1
            loader.set_epoch(self._epoch)
        self._exhausted = False
        for batch in loader:
            yield batch
        self._exhausted = True

    def state_dict(self):
        # A state loaded but not yet applied (it is, at the first batch) is
        # the state, even when a loader is open (len() opens one).
        if self._pending_state is not None:
            return dict(self._pending_state)
        if self._loader is None:
            return {"epoch": self._epoch, "position": None}
        return self._loader.state_dict()

    def load_state_dict(self, state):
        if state.get("position") is None:
            self._epoch = int(state.get("epoch", 0))
            self._pending_state = None
            return
        self._pending_state = dict(state)

    def __len__(self):
        return len(self._open())
