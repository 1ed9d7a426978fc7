"""The contenders, one factory per (workload, system).

A factory returns an iterator that yields the sample count of each batch it
delivers; the runner (suite_run.py) times each next(). Systems:

  report   the user's loader: the job's own loading code, as its user describes it
  torch    the user's Dataset in a torch DataLoader with its knobs tuned
           (workers, pin_memory, persistent_workers, prefetch_factor); for
           audio, whose report uses no DataLoader, a map-style Dataset that
           reads one WAV file per sample
  orc      (audio only) one open/read/close per file, one thread
  wds, mds, litdata   the peers, each reading its own format of the same samples
  numpy, tdn, spdl, grain   the in-process baselines of bench/baselines.py: a
           one-thread NumPy memmap loop, torchdata.nodes and SPDL with threads
           over the same memmaps, and Grain over an ArrayRecord file; no
           DataLoader, no worker processes
  stoker   stoker.Loader over the packed dataset

Every contender delivers the same samples: windows of 365 days x 16 float32
(basins), ragged events of 6 float32 and ragged int16 clips (as one array with
offsets, except the user's loader, which keeps a list), 1 KiB segments, and
1024-bit vectors (as bytes; the user's loader makes float32 tensors of them).
The baselines and stoker also deliver each basin window's 365 values of y
(q) next to x, and each spectrogram segment's label.
"""
import bisect
import collections
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import workloads as W

SEED = 7


def _dl(torch, ds, opts, **kw):
    """A DataLoader with the tuned knobs in opts (workers, prefetch)."""
    nw = opts.get("workers", 2)
    extra = {"persistent_workers": True, "prefetch_factor": opts.get("prefetch", 4)} if nw else {}
    return torch.utils.data.DataLoader(ds, num_workers=nw, pin_memory=opts.get("pin", True),
                                       **extra, **kw)


def _concat(arrays):
    off = np.zeros(len(arrays) + 1, np.int64)
    np.cumsum([len(a) for a in arrays], out=off[1:])
    return np.concatenate(arrays), off


# -- basins -------------------------------------------------------------------

class FileCache:
    """The user's file cache: an LRU of polars frames behind one global lock."""

    def __init__(self, capacity=64):
        self.capacity, self.tables, self._lock = capacity, collections.OrderedDict(), threading.Lock()

    def get_file(self, path, columns=None):
        import polars as pl
        with self._lock:  # every access serialised, hits included
            if path in self.tables:
                self.tables.move_to_end(path)
                return self.tables[path]
            t = pl.read_parquet(path, columns=columns)
            self.tables[path] = t
            if len(self.tables) > self.capacity:
                self.tables.popitem(last=False)
            return t


def basin_report_classes(torch, p, d):
    files = [str(d / "src" / f"basin_{b:05d}.parquet") for b in range(p["basins"])]
    nwin = 365 * W._basin_years(p) - W.WINDOW + 1   # windows per basin (the index)

    class HydroLazyDataset(torch.utils.data.Dataset):
        """Map-style: sample i is (file, start); cut from the cached frame and
        converted with select().to_numpy().astype() and torch.tensor, as in the
        report. The index is kept as per-file counts (a list of 70 M tuples
        would not fit)."""

        def __init__(self):
            self.files, self.cache = files, FileCache()
            self.first = np.concatenate([[0], np.cumsum(nwin)])

        def __len__(self):
            return int(self.first[-1])

        def __getitem__(self, i):
            f = bisect.bisect_right(self.first, i) - 1
            s = int(i - self.first[f])
            table = self.cache.get_file(self.files[f], W.FEATURES + ["q"])
            inp = table.slice(s, W.WINDOW)
            x_np = inp.select(W.FEATURES).to_numpy().astype(np.float32)
            y = inp["q"].to_numpy()[-1]
            return torch.tensor(x_np, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)

    class FileGroupedBatchSampler(torch.utils.data.Sampler):
        """Every batch draws from files_per_batch=50 files, as its user has it."""

        def __init__(self, ds, batch_size, files_per_batch=50, seed=SEED):
            self.ds, self.bs, self.fpb = ds, batch_size, files_per_batch
            self.rng = np.random.default_rng(seed)

        def __iter__(self):
            nf = len(self.ds.files)
            while True:
                chosen = self.rng.choice(nf, size=min(self.fpb, nf), replace=False)
                per = -(-self.bs // len(chosen))
                batch = []
                for f in chosen:
                    n = int(nwin[f])
                    starts = self.rng.choice(n, size=min(per, n), replace=False)
                    batch += [int(self.ds.first[f] + s) for s in starts]
                yield batch[: self.bs]

        def __len__(self):
            return 10**9

    return HydroLazyDataset, FileGroupedBatchSampler


def basins_report(torch, p, d, opts):
    Ds, Sampler = basin_report_classes(torch, p, d)
    ds = Ds()
    # As its user runs it: 10 worker processes, the DataLoader's other knobs at defaults.
    dl = torch.utils.data.DataLoader(ds, batch_sampler=Sampler(ds, W.BATCH["basins"]), num_workers=10)
    for x, y in dl:  # the sampler never ends
        yield x.shape[0]


def basins_torch(torch, p, d, opts):
    Ds, Sampler = basin_report_classes(torch, p, d)
    ds = Ds()
    for x, y in _dl(torch, ds, opts, batch_sampler=Sampler(ds, W.BATCH["basins"])):
        yield x.shape[0]


def basin_pool_batches(records, batch, rng, pool_size=256):
    """Windows of 365 days mixed across many basins from a stream of whole
    basins: a pool of pool_size basins, each with its window starts in a
    random order; each batch takes one window from each of `batch` basins of
    the pool (with repeats only when the pool is smaller than the batch); a
    basin whose windows are used up is replaced by the next one of the
    stream. The same code serves every peer, so that only the record reading
    differs between them."""
    pool, starts = [], []
    it = iter(records)
    done = False
    while True:
        while not done and len(pool) < pool_size:
            rec = next(it, None)
            if rec is None:
                done = True
                break
            x = np.asarray(rec["x"])
            pool.append(x)
            starts.append(list(rng.permutation(len(x) - W.WINDOW + 1)))
        if not pool:
            return
        k = len(pool)
        pick = rng.choice(k, size=batch, replace=k < batch)
        out = np.empty((batch, W.WINDOW, len(W.FEATURES)), np.float32)
        for j, b in enumerate(pick):
            s = starts[b].pop() if starts[b] else rng.integers(len(pool[b]) - W.WINDOW + 1)
            out[j] = pool[b][s:s + W.WINDOW]
        keep = [i for i in range(k) if starts[i]]
        if len(keep) < k:
            pool, starts = [pool[i] for i in keep], [starts[i] for i in keep]
        yield out


# -- events -------------------------------------------------------------------

def events_report_dataset(torch, p, d):
    idx = np.load(d / "src" / "index.npz")
    lens, bounds = idx["lens"], idx["bounds"]

    class EventDataset(torch.utils.data.Dataset):
        """Map-style over event ids; reads the event's Parquet file (keeping
        the last one) and slices the event's rows out of it."""

        def __init__(self):
            self.cur, self.table, self.off = None, None, None

        def __len__(self):
            return int(bounds[-1])

        def __getitem__(self, i):
            import pyarrow.parquet as pq
            f = int(np.searchsorted(bounds, i, side="right") - 1)
            if f != self.cur:
                self.table = pq.read_table(d / "src" / f"events_{f:04d}.parquet")
                self.off = np.concatenate([[0], np.cumsum(lens[bounds[f]:bounds[f + 1]])])
                self.cur = f
            j = i - bounds[f]
            ev = self.table.slice(int(self.off[j]), int(lens[i]))
            x = np.stack([ev.column(f"c{k}").to_numpy() for k in range(6)], axis=1)
            return torch.tensor(x)

    def collate(items):
        x, off = _concat([t.numpy() for t in items])
        return torch.from_numpy(x), torch.from_numpy(off)

    return EventDataset(), collate


def events_report(torch, p, d, opts):
    ds, collate = events_report_dataset(torch, p, d)
    # Its user runs with shuffle=False (shuffling cost 140x) and no workers.
    dl = torch.utils.data.DataLoader(ds, batch_size=W.BATCH["events"], shuffle=False, num_workers=0,
                                     collate_fn=collate)
    for _ in range(opts.get("epochs", 1)):
        for x, off in dl:
            yield len(off) - 1


def events_torch(torch, p, d, opts):
    ds, collate = events_report_dataset(torch, p, d)
    dl = _dl(torch, ds, opts, batch_size=W.BATCH["events"], shuffle=False, collate_fn=collate)
    for _ in range(opts.get("epochs", 1)):
        for x, off in dl:
            yield len(off) - 1


# -- audio --------------------------------------------------------------------

def _clip_order(p):
    return np.random.default_rng(SEED).permutation(p["clips"])


def audio_report(torch, p, d, opts):
    """The user's builder: tasks of files read by a thread pool
    (cpu_max_workers=4), each clip read whole with soundfile."""
    import soundfile as sf
    src, order, bs = d / "src", _clip_order(p), W.BATCH["audio"]

    def load_wav(i):
        return sf.read(W.clip_path(src, i), dtype="int16")[0]

    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(opts.get("epochs", 1)):
            for a in range(0, len(order), bs):
                data = list(pool.map(load_wav, order[a:a + bs]))
                yield len(data)


def audio_torch(torch, p, d, opts):
    import soundfile as sf
    src = d / "src"

    class Clips(torch.utils.data.Dataset):
        def __len__(self):
            return p["clips"]

        def __getitem__(self, i):
            return sf.read(W.clip_path(src, i), dtype="int16")[0]

    def collate(items):
        x, off = _concat(items)
        return torch.from_numpy(x), torch.from_numpy(off)

    g = torch.Generator().manual_seed(SEED)
    dl = _dl(torch, Clips(), opts, batch_size=W.BATCH["audio"], shuffle=True, generator=g,
             collate_fn=collate)
    for _ in range(opts.get("epochs", 1)):
        for x, off in dl:
            yield len(off) - 1


def audio_orc(torch, p, d, opts):
    """One open/read/close per file (the whole file, header included), one thread."""
    src, order, bs = d / "src", _clip_order(p), W.BATCH["audio"]
    paths = [str(W.clip_path(src, i)) for i in order]
    for a in list(range(0, len(paths), bs)) * opts.get("epochs", 1):
        n = 0
        for f in paths[a:a + bs]:
            fd = os.open(f, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                buf = os.read(fd, size)
            finally:
                os.close(fd)
            n += len(buf) > 0
        yield n


# -- spectrogram segments -------------------------------------------------------

def leak_dataset(torch, d):
    import h5py

    class LeakMelDataset(torch.utils.data.Dataset):
        """As its user has it: the HDF5 file is opened once per worker
        (_ensure_open) and each segment is read by index."""

        def __init__(self):
            self.path, self.h5f = d / "src" / "segments.h5", None
            with h5py.File(self.path, "r") as h:
                self._labels = h["labels"][:]

        def _ensure_open(self):
            if self.h5f is None:
                self.h5f = h5py.File(self.path, "r")
                self._segs = self.h5f["segs"]

        def __len__(self):
            return len(self._labels)

        def __getitem__(self, i):
            self._ensure_open()
            return torch.from_numpy(self._segs[i]), int(self._labels[i])

        def __getstate__(self):
            s = self.__dict__.copy()
            s["h5f"] = None
            s.pop("_segs", None)
            return s

    return LeakMelDataset()


def spectro_report(torch, p, d, opts):
    ds = leak_dataset(torch, d)
    g = torch.Generator().manual_seed(SEED)
    # The user's DataLoader: 8 workers, prefetch 4, persistent, pinned.
    dl = torch.utils.data.DataLoader(ds, batch_size=W.BATCH["spectro"], shuffle=True, num_workers=8,
                                     prefetch_factor=4, persistent_workers=True, pin_memory=True,
                                     generator=g)
    for _ in range(opts.get("epochs", 1)):
        for x, y in dl:
            yield x.shape[0]


def spectro_torch(torch, p, d, opts):
    ds = leak_dataset(torch, d)
    g = torch.Generator().manual_seed(SEED)
    dl = _dl(torch, ds, opts, batch_size=W.BATCH["spectro"], shuffle=True, generator=g)
    for _ in range(opts.get("epochs", 1)):
        for x, y in dl:
            yield x.shape[0]


# -- bit vectors ----------------------------------------------------------------

def bloom_dataset(torch, d):
    import h5py
    import pandas as pd

    class BloomFilterDataset(torch.utils.data.Dataset):
        """As its user has it: the table read into pandas, and each bit string
        turned into a float32 tensor with a per-row apply."""

        def __init__(self):
            with h5py.File(d / "src" / "bloom.h5", "r") as h:
                data = pd.DataFrame({"bloomfilter": h["bloomfilter"][:].astype(str), "uid": h["uid"][:]})
            self.bitStringTensors = data["bloomfilter"].apply(
                lambda s: torch.tensor([int(c) for c in s], dtype=torch.float32)).tolist()
            self.uids = data["uid"].values

        def __len__(self):
            return len(self.uids)

        def __getitem__(self, i):
            return self.bitStringTensors[i], int(self.uids[i])

    return BloomFilterDataset()


def bits_report(torch, p, d, opts):
    ds = bloom_dataset(torch, d)
    g = torch.Generator().manual_seed(SEED)
    # As its user runs it: 2 workers, no pinning, no persistent workers, default prefetch.
    dl = torch.utils.data.DataLoader(ds, batch_size=W.BATCH["bits"], shuffle=True, num_workers=2,
                                     generator=g)
    for _ in range(opts.get("epochs", 1)):
        for x, uid in dl:
            yield x.shape[0]


def bits_torch(torch, p, d, opts):
    ds = bloom_dataset(torch, d)
    g = torch.Generator().manual_seed(SEED)
    dl = _dl(torch, ds, opts, batch_size=W.BATCH["bits"], shuffle=True, generator=g)
    for _ in range(opts.get("epochs", 1)):
        for x, uid in dl:
            yield x.shape[0]


# -- peers ------------------------------------------------------------------------

def _peer_records(kind, d, seed):
    """The peer's own shuffled stream of records (dicts of arrays), read in
    the current DataLoader worker (each peer splits its shards by worker)."""
    if kind == "wds":
        import webdataset as wds
        urls = sorted(str(f) for f in (d / "wds").glob("*.tar"))
        ds = (wds.WebDataset(urls, shardshuffle=len(urls), seed=seed, empty_check=False,
                             nodesplitter=None).shuffle(1000).decode())
        for s in ds:
            yield {k[:-4]: v for k, v in s.items() if k.endswith(".npy")}
    elif kind == "mds":
        yield from _mds_dataset[0]
    else:
        yield from _lit_dataset[0]


_mds_dataset, _lit_dataset = [None], [None]


def _open_peer(kind, p, d):
    # Streaming and LitData datasets are created in the main process, as their
    # documentation does, and iterated in the DataLoader's workers.
    if kind == "mds":
        import peerimport
        streaming = peerimport.streaming()
        _mds_dataset[0] = streaming.StreamingDataset(local=str(d / "mds"), shuffle=True,
                                                     shuffle_seed=SEED, batch_size=W.BATCH[p["workload"]])
    elif kind == "litdata":
        import litdata
        _lit_dataset[0] = litdata.StreamingDataset(str(d / "litdata"), shuffle=True, seed=SEED)


def peer(kind):
    def run(torch, p, d, opts):
        name, bs = p["workload"], W.BATCH[p["workload"]]
        _open_peer(kind, p, d)

        class Batches(torch.utils.data.IterableDataset):
            def __iter__(self):
                info = torch.utils.data.get_worker_info()
                rng = np.random.default_rng([SEED, info.id if info else 0])
                recs = _peer_records(kind, d, SEED)
                if name == "basins":
                    for x in basin_pool_batches(recs, bs, rng):
                        yield torch.from_numpy(x)
                    return
                buf = []
                for r in recs:
                    buf.append(r)
                    if len(buf) == bs:
                        yield _collate(name, buf, torch)
                        buf = []
                if buf:
                    yield _collate(name, buf, torch)

        dl = _dl(torch, Batches(), opts, batch_size=None)
        for _ in range(opts.get("epochs", 1)):
            for b in dl:
                yield _count(name, b)
    return run


def _collate(name, recs, torch):
    if name in ("events", "audio"):
        key = "x" if name == "events" else "pcm"
        x, off = _concat([np.asarray(r[key]) for r in recs])
        return torch.from_numpy(x), torch.from_numpy(off)
    if name == "spectro":
        return (torch.from_numpy(np.stack([np.asarray(r["x"]) for r in recs])),
                torch.tensor([int(r["y"]) for r in recs]))
    return torch.from_numpy(np.stack([np.asarray(r["bits"]) for r in recs]))


def _count(name, b):
    if name in ("events", "audio"):
        return len(b[1]) - 1
    if name == "spectro":
        return b[0].shape[0]
    return b.shape[0]


# -- in-process baselines -------------------------------------------------------------

def baseline(system):
    """numpy, tdn and spdl over the memmaps in npy/, grain over arrayrecord/;
    opts["baselines"][system] overrides bench/baselines.py's DEFAULTS."""
    def run(torch, p, d, opts):
        import baselines
        data = (str(d / "arrayrecord" / "data.array_record") if system == "grain"
                else baselines.open_dataset(d / "npy"))
        settings = opts.get("baselines", {}).get(system, {})
        for b in baselines.batches(system, data, W.BATCH[p["workload"]], SEED, opts.get("epochs", 1),
                                   **settings):
            yield len(b["index"])
    return run


# -- stoker -------------------------------------------------------------------------

def stoker_loader(torch, p, d, opts):
    import stoker
    name = p["workload"]
    kw = dict(batch_size=W.BATCH[name], shuffle="random", seed=SEED)
    if name == "basins":
        kw.update(window=W.WINDOW, fields=["x", "y"])
    kw.update(opts.get("stoker", {}))
    with stoker.Loader(d / "stoker.stk", **kw) as ld:
        key = {"basins": "x", "events": "x_offsets", "audio": "pcm_offsets", "spectro": "x",
               "bits": "bits"}[name]
        ragged = key.endswith("_offsets")
        for _ in range(opts.get("epochs", 1)):
            for b in ld:  # iterating again starts the next epoch
                yield len(b[key]) - 1 if ragged else len(b[key])


FACTORIES = {
    ("basins", "report"): basins_report, ("basins", "torch"): basins_torch,
    ("events", "report"): events_report, ("events", "torch"): events_torch,
    ("audio", "report"): audio_report, ("audio", "torch"): audio_torch, ("audio", "orc"): audio_orc,
    ("spectro", "report"): spectro_report, ("spectro", "torch"): spectro_torch,
    ("bits", "report"): bits_report, ("bits", "torch"): bits_torch,
}


def factory(name, system):
    if system == "stoker":
        return stoker_loader
    if system in ("wds", "mds", "litdata"):
        return peer(system)
    if system in ("numpy", "tdn", "spdl", "grain"):
        return baseline(system)
    return FACTORIES[(name, system)]


# Which files each system reads (for the cold cases).
FORMAT_OF = {"report": "src", "torch": "src", "orc": "src", "wds": "wds", "mds": "mds",
             "litdata": "litdata", "stoker": "stoker", "numpy": "npy", "tdn": "npy", "spdl": "npy",
             "grain": "arrayrecord"}
