"""In-process baselines: the strongest loaders a user could write instead of
stoker, over arrays on disk, with no DataLoader and no worker processes.

Three kinds of dataset, each over NumPy arrays (memmaps in practice):

    Fixed({"x": x, "y": y})            fixed-size records: every array's first
                                       axis is the record (x[i], y[i])
    Ragged(flat, offsets, name="x")    variable-length records: record i is
                                       flat[offsets[i]:offsets[i + 1]] (rows of
                                       flat, which may be 1-D or N-D)
    Windows({"x": x, "y": y}, series_offsets, window, stride=1)
                                       windows of `window` consecutive rows
                                       that never cross a series; series s is
                                       rows series_offsets[s]:series_offsets[s + 1]
                                       of every field; windows are numbered
                                       series by series

len(ds) is the number of samples and ds.gather(idx) returns one batch: a dict
of arrays ({name: [B, ...]} for Fixed and Windows, {name: rows, name +
"_offsets": [B + 1] int64} for Ragged) plus "index", the sample numbers it
holds, in order.

The systems, each an iterator of such batches with the given batch size,
seed and epochs; every epoch is a permutation of all samples, the last batch
of an epoch may be short, and no batch spans two epochs:

    numpy   one thread, no pipeline: the permutation of
            np.random.default_rng(seed + epoch), cut into batches, gathered
    tdn     torchdata.nodes: the same index batches -> ParallelMapper(gather,
            threads) -> Prefetcher
    spdl    SPDL: PipelineBuilder, the same index batches -> pipe(gather,
            concurrency) -> sink
    grain   Grain over ArrayRecord files written by write_array_record():
            a MapDataset whose elements are batches (the same permutations
            as above, or Grain's own shuffle: see grain_batches), each read
            with one __getitems__ of Grain's ArrayRecordDataSource and
            decoded, to_iter_dataset with ReadOptions (threads, prefetch)

Settings (keyword arguments of batches(); DEFAULTS holds the fastest
measured): sort, each batch's sample numbers sorted (the same samples, read
in file order); reuse, batches gathered into buffers of a BufferPool, each
reused only once no array of an earlier batch refers to it; and each
system's threads and prefetch depth.

    for b in batches("tdn", ds, batch_size=256, seed=0, epochs=1): ...
    write_array_record(ds, "data.array_record")
    for b in batches("grain", "data.array_record", batch_size=256): ...

Writers make the files these read (untimed): write_fixed, write_ragged and
write_series lay out a directory of flat raw files (NAME.bin, read back as
np.memmap) and a layout.json; open_dataset(dir) returns the dataset over
them. Nothing here knows about particular workloads.
"""
import json
import sys
import threading
from pathlib import Path

import numpy as np

SYSTEMS = ("numpy", "tdn", "spdl", "grain")

# The settings each system runs with unless told otherwise, chosen from the
# sweeps below (SWEEPS; bench/suite.py --tune repeats them per workload).
# Warm samples/s on the suite's quick workloads, one 1 s run each on a shared
# 2-core machine, so differences under about 20% are noise:
#
#                  basins   events     audio   spectro      bits
#   numpy          286k     364k       40k     2.79M        3.37M
#   numpy sorted   251k     429k       32k     2.94M        4.02M
#   tdn 1x2        157k     233k       14k     2.18M        2.12M
#   tdn 1x8        197k     188k       41k     2.64M        2.46M
#   tdn 2x2        139k     178k       25k     2.31M        2.48M
#   tdn 2x8        162k     171k       30k     2.15M        2.52M
#   tdn 4x2        176k     135k       27k     2.32M        1.80M
#   tdn 4x8        120k     143k       36k     2.91M        2.35M
#   spdl 1/1/2     151k      91k       33k     1.36M        1.14M
#   spdl 2/2/2     101k     103k       27k     1.61M        0.87M
#   spdl 4/4/2      83k      94k       13k     1.13M        0.97M
#   grain 1x2       14k      37k      3.3k      82k          99k
#   grain 2x2      8.2k      62k      5.5k      57k         119k
#   grain 2x8      9.4k      62k      5.5k      94k         104k
#   grain 4x2      8.7k      52k      5.9k     131k         117k
#   grain 4x8       14k      50k       11k     121k         111k
#   grain, Grain's shuffle  8.2k  22k  8.3k     30k          34k
#
# Later, on the same machine: gathering into reused buffers (BufferPool,
# reuse=True) steadied the threaded systems on large batches (audio) and made
# no difference one could tell from the noise elsewhere; it is on for them.
# (tdn WxP: ParallelMapper threads x Prefetcher depth; spdl C/T/B: pipe
# concurrency / threads / sink buffer; grain TxP: read threads x prefetched
# batches.) One thread is as fast as any: each gather is one or a few NumPy
# copies bound by memory bandwidth, with Python steps between them that hold
# the GIL, and on 2 cores extra threads mostly contend for it; inside the
# threaded pipelines the same gather measured up to 3x slower than alone.
# Sorting each batch's indices (same samples, read in file order) helped
# small records and was within the noise for large ones. Grain is bound by
# ArrayRecord's reads (about 4 us a record, and about 1 GB/s for large ones,
# through Grain's 32 KiB read buffer) and, with its own shuffle, by its
# per-sample Python steps.
DEFAULTS = {
    "numpy": {"sort": True, "reuse": False},
    "tdn": {"workers": 1, "prefetch": 8, "sort": True, "reuse": True},
    "spdl": {"concurrency": 1, "threads": 1, "buffer": 2, "thread_queue": False, "sort": True,
             "reuse": True},
    "grain": {"threads": 4, "prefetch": 8, "sort": True},
}
SWEEPS = {
    "numpy": [{"sort": s, "reuse": r} for s in (False, True) for r in (False, True)],
    "tdn": [{"workers": w, "prefetch": p, "sort": True, "reuse": True} for w in (1, 2, 4)
            for p in (2, 8)] + [{"workers": 1, "prefetch": 8, "sort": True, "reuse": False}],
    "spdl": [{"concurrency": c, "threads": c, "buffer": 2, "thread_queue": q, "sort": True,
              "reuse": True} for c in (1, 2, 4) for q in (False, True)]
    + [{"concurrency": 1, "threads": 1, "buffer": 8, "thread_queue": False, "sort": True,
        "reuse": True},
       {"concurrency": 1, "threads": 1, "buffer": 2, "thread_queue": False, "sort": True,
        "reuse": False}],
    "grain": [{"threads": t, "prefetch": p, "sort": True} for t in (1, 2, 4) for p in (2, 8)]
    + [{"threads": 2, "prefetch": 2, "shuffle": "grain"}],
}


# -- datasets -------------------------------------------------------------------

class BufferPool:
    """Batch buffers, each reused once nothing outside the pool refers to it
    any more (no array of a batch made from it is alive), so that a kept
    batch is never overwritten. Gathering into a reused buffer spares the
    kernel's zeroing of fresh pages and the allocator's returning them:
    large batches made in threads (outside the main heap) were slow and
    erratic without it (audio, torchdata.nodes: 10,000-45,000 clips/s)."""

    def __init__(self, keep=16):
        self.bufs, self.keep, self.lock = [], keep, threading.Lock()

    def get(self, shape, dtype):
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        with self.lock:
            for b in self.bufs:
                # References: the list, the loop variable and getrefcount's own.
                if len(b) >= n and sys.getrefcount(b) <= 3:
                    break
            else:
                b = np.empty(max(n + n // 4, 1), np.uint8)   # room for larger batches later
                self.bufs.append(b)
                if len(self.bufs) > self.keep:
                    self.bufs.pop(0)
        return b[:n].view(dtype).reshape(shape)


class Fixed:
    """Fixed-size records: a dict of arrays with the same first axis."""

    kind = "fixed"

    def __init__(self, fields):
        self.fields = dict(fields)
        self.n = len(next(iter(self.fields.values())))
        assert all(len(a) == self.n for a in self.fields.values())

    def __len__(self):
        return self.n

    def gather(self, idx, pool=None):
        # np.take along the first axis, one call per field: it copies each
        # record's bytes straight into a new batch array. Measured on the
        # suite's 1 KiB segments and 1 KiB bit vectors: fancy indexing (a[idx])
        # took 1.3-1.4x as long. With a BufferPool, take writes into a reused
        # buffer (out=, mode="clip": with the default mode="raise", out= goes
        # through a temporary copy); on one thread that was within the noise
        # of a new array.
        if pool is None:
            b = {k: np.take(a, idx, axis=0) for k, a in self.fields.items()}
        else:
            b = {k: np.take(a, idx, axis=0, mode="clip",
                            out=pool.get((len(idx),) + a.shape[1:], a.dtype))
                 for k, a in self.fields.items()}
        b["index"] = idx
        return b


class Ragged:
    """Variable-length records: record i is flat[offsets[i]:offsets[i + 1]]."""

    kind = "ragged"

    def __init__(self, flat, offsets, name="x", method="auto"):
        self.flat, self.name = flat, name
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        self.n = len(self.offsets) - 1
        mean_rows = (self.offsets[-1] - self.offsets[0]) / max(self.n, 1)
        # Two pure-NumPy gathers (see gather); "rows" costs per row, "concat"
        # per record. Measured (batches of 256): records of 2-16 rows, "rows"
        # 1.4-2.9x faster; 40 rows, "concat" 1.3x; the suite's events (255
        # rows of 24 bytes), "concat" 3.3x; its audio clips (48,000 rows of 2
        # bytes), "concat" 20x.
        self.method = method if method != "auto" else ("rows" if mean_rows < 24 else "concat")

    def __len__(self):
        return self.n

    def gather(self, idx, pool=None):
        off = self.offsets
        starts, ends = off[idx], off[idx + 1]
        out_off = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(ends - starts, out=out_off[1:])
        if self.method == "rows":
            # One take of every row: the row numbers built with repeat/arange.
            rows = np.arange(out_off[-1], dtype=np.int64)
            rows += np.repeat(starts - out_off[:-1], ends - starts)
            x = (self.flat[rows] if pool is None else
                 np.take(self.flat, rows, axis=0, mode="clip",
                         out=pool.get((len(rows),) + self.flat.shape[1:], self.flat.dtype)))
        else:
            # One slice per record (views, no copy), joined by one concatenate
            # that copies each record once into the batch. concatenate(out=)
            # into a preallocated buffer and sorted indices were within the
            # noise (+-10%) on events and audio; fresh arrays are kept.
            f = self.flat
            out = None if pool is None else pool.get((int(out_off[-1]),) + f.shape[1:], f.dtype)
            x = np.concatenate([f[a:b] for a, b in zip(starts.tolist(), ends.tolist())], out=out)
        return {self.name: x, self.name + "_offsets": out_off, "index": idx}


class Windows:
    """Windows of `window` rows (every `stride`-th start) within each series."""

    kind = "windows"

    def __init__(self, fields, series_offsets, window, stride=1):
        self.fields = dict(fields)
        self.window, self.stride = int(window), int(stride)
        so = np.asarray(series_offsets, dtype=np.int64)
        self.series_offsets = so
        rows = np.diff(so)
        nwin = np.where(rows >= window, (rows - window) // stride + 1, 0)
        self.first = np.zeros(len(rows) + 1, np.int64)   # first window of each series
        np.cumsum(nwin, out=self.first[1:])
        self.n = int(self.first[-1])
        # One strided view per field over all its rows: views[k][r] is the
        # window of `window` rows starting at row r (no copy; the windows
        # overlap in memory). Windows that would cross a series are never
        # asked for, so one view serves every series.
        self.views = {}
        for k, a in self.fields.items():
            nrows = len(a) - self.window + 1
            self.views[k] = np.lib.stride_tricks.as_strided(
                a, shape=(nrows, self.window) + a.shape[1:], strides=(a.strides[0],) + a.strides,
                writeable=False)

    def __len__(self):
        return self.n

    def starts(self, idx):
        """Global start rows of windows idx."""
        s = np.searchsorted(self.first, idx, side="right") - 1
        return self.series_offsets[s] + (idx - self.first[s]) * self.stride

    def gather(self, idx, pool=None):
        # (pool is not used: fancy indexing has no out=, and a per-window
        # loop of copies into a reused buffer was slower; see below.)
        r = self.starts(idx)
        # One fancy-index gather per field from the strided view: [B, window,
        # ...], each window copied once. Measured on the suite's basin
        # windows (365 x 16 float32): a loop of per-window slice copies into
        # a preallocated batch ran at 0.6x of this, sliding_window_view per
        # basin with np.stack at 0.8x; sorted starts and a 2-D view with one
        # flat row per window were within the noise. np.take would first copy
        # the whole overlapping view into a contiguous array.
        b = {k: v[r] for k, v in self.views.items()}
        b["index"] = idx
        return b


# -- writers and readers of the raw layout ------------------------------------------

def _save_layout(d, layout):
    (Path(d) / "layout.json").write_text(json.dumps(layout, indent=1))


def _write_bin(path, arrays):
    """Streams arrays (or one array) into one raw file; returns (dtype, row shape, rows)."""
    dt, shape, rows = None, None, 0
    with open(path, "wb") as f:
        for a in ([arrays] if isinstance(arrays, np.ndarray) else arrays):
            a = np.ascontiguousarray(a)
            if dt is None:
                dt, shape = a.dtype, a.shape[1:]
            assert a.dtype == dt and a.shape[1:] == shape, (a.dtype, a.shape, dt, shape)
            f.write(memoryview(a.reshape(-1)).cast("B"))
            rows += len(a)
    return dt.str, list(shape), rows


def write_fixed(d, fields):
    """Fixed-size records: fields maps a name to an array, or to an iterable
    of arrays that are its records in order, in chunks along the first axis."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    lay = {"kind": "fixed", "fields": {}}
    for k, a in fields.items():
        dt, shape, rows = _write_bin(d / f"{k}.bin", a)
        lay["fields"][k] = {"dtype": dt, "shape": shape, "rows": rows}
    _save_layout(d, lay)


def write_ragged(d, records, name="x"):
    """Variable-length records: records is an iterable of arrays (rows of the
    same dtype and trailing shape); writes NAME.bin and NAME_offsets.npy."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    lens = []

    def each():
        for r in records:
            lens.append(len(r))
            yield r

    dt, shape, rows = _write_bin(d / f"{name}.bin", each())
    off = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    np.save(d / f"{name}_offsets.npy", off)
    _save_layout(d, {"kind": "ragged", "name": name,
                     "fields": {name: {"dtype": dt, "shape": shape, "rows": rows}}})


def write_series(d, series, window, stride=1):
    """Series for windows: series is an iterable of dicts {field: array of
    that series' rows}; every field's rows are concatenated series after
    series (NAME.bin) and series_offsets.npy gives each series' first row."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    files, lay, lens = {}, {"kind": "windows", "window": window, "stride": stride, "fields": {}}, []
    try:
        for s in series:
            n = None
            for k, a in s.items():
                a = np.ascontiguousarray(a)
                if k not in files:
                    files[k] = open(d / f"{k}.bin", "wb")
                    lay["fields"][k] = {"dtype": a.dtype.str, "shape": list(a.shape[1:]), "rows": 0}
                f = lay["fields"][k]
                assert a.dtype.str == f["dtype"] and list(a.shape[1:]) == f["shape"]
                assert n is None or n == len(a), "every field of a series has the same rows"
                n = len(a)
                files[k].write(memoryview(a.reshape(-1)).cast("B"))
                f["rows"] += n
            lens.append(n)
    finally:
        for f in files.values():
            f.close()
    off = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    np.save(d / "series_offsets.npy", off)
    _save_layout(d, lay)


def _memmap(d, k, f):
    shape = (f["rows"], *f["shape"])
    if f["rows"] == 0:
        return np.zeros(shape, f["dtype"])
    # A plain ndarray view of the np.memmap: slicing an np.memmap makes a new
    # np.memmap through Python-level hooks, several microseconds a slice.
    return np.memmap(Path(d) / f"{k}.bin", dtype=f["dtype"], mode="r", shape=shape).view(np.ndarray)


def open_dataset(d, **kw):
    """The dataset over a directory made by write_fixed/write_ragged/write_series."""
    lay = json.loads((Path(d) / "layout.json").read_text())
    fields = {k: _memmap(d, k, f) for k, f in lay["fields"].items()}
    if lay["kind"] == "fixed":
        return Fixed(fields)
    if lay["kind"] == "ragged":
        name = lay["name"]
        return Ragged(fields[name], np.load(Path(d) / f"{name}_offsets.npy"), name, **kw)
    return Windows(fields, np.load(Path(d) / "series_offsets.npy"), lay["window"], lay["stride"])


def dataset_files(d):
    """The files open_dataset(d) reads."""
    return sorted(str(p) for p in Path(d).iterdir() if p.is_file())


# -- the systems ------------------------------------------------------------------

def index_batches(n, batch_size, seed=0, epochs=1, sort=False):
    """Each epoch a permutation (np.random.default_rng(seed + epoch)) cut into
    batches of sample numbers; sort=True sorts each batch (same samples, read
    in file order)."""
    for e in range(epochs):
        perm = np.random.default_rng(seed + e).permutation(n)
        for a in range(0, n, batch_size):
            idx = perm[a:a + batch_size]
            yield np.sort(idx) if sort else idx


def _gather(ds, reuse):
    if not reuse:
        return ds.gather
    pool = BufferPool()
    return lambda idx: ds.gather(idx, pool)


def numpy_batches(ds, batch_size, seed=0, epochs=1, sort=False, reuse=False):
    """The loop a user writes: no threads, no prefetch."""
    gather = _gather(ds, reuse)
    for idx in index_batches(len(ds), batch_size, seed, epochs, sort):
        yield gather(idx)


def tdn_batches(ds, batch_size, seed=0, epochs=1, workers=2, prefetch=2, sort=False, reuse=False):
    import torchdata.nodes as tn
    node = tn.IterableWrapper(index_batches(len(ds), batch_size, seed, epochs, sort))
    node = tn.ParallelMapper(node, map_fn=_gather(ds, reuse), num_workers=workers, method="thread",
                             in_order=True)
    node = tn.Prefetcher(node, prefetch_factor=prefetch)
    yield from tn.Loader(node)


def spdl_batches(ds, batch_size, seed=0, epochs=1, concurrency=2, threads=2, buffer=2,
                 thread_queue=False, sort=False, reuse=False):
    from spdl.pipeline import PipelineBuilder
    pipeline = (PipelineBuilder()
                .add_source(index_batches(len(ds), batch_size, seed, epochs, sort))
                .pipe(_gather(ds, reuse), concurrency=concurrency, output_order="input")
                .add_sink(buffer)
                .build(num_threads=threads, use_thread_output_queue=thread_queue))
    with pipeline.auto_stop():
        yield from pipeline.get_iterator()


# -- ArrayRecord and Grain -----------------------------------------------------------

AR_OPTIONS = "group_size:1,uncompressed"   # one record a chunk, as Grain asks; no compression


def _row_dtype(fields):
    """A packed structured dtype of one row (record) of every field."""
    return np.dtype([(k, a.dtype, a.shape[1:]) for k, a in fields.items()])


def _layout_of(ds, chunk):
    fields = {k: {"dtype": a.dtype.str, "shape": list(a.shape[1:])} for k, a in
              (ds.fields if ds.kind != "ragged" else {ds.name: ds.flat}).items()}
    meta = {"kind": ds.kind, "fields": fields, "samples": len(ds)}
    if ds.kind == "ragged":
        meta["name"] = ds.name
    if ds.kind == "windows":
        meta.update(window=ds.window, stride=ds.stride, chunk=chunk,
                    series_rows=np.diff(ds.series_offsets).tolist())
    return meta


def write_array_record(ds, path, chunk=None):
    """Writes ds as one ArrayRecord file (uncompressed, group_size 1) and its
    layout beside it (PATH.json). Each record is one sample's raw bytes (every
    field's bytes in turn for Fixed); for Windows each record holds `chunk`
    consecutive rows of one series (default: half the window, so that a
    window spans at most three records: measured on the suite's basins, a
    batch read 1.7x as fast as with whole-window pieces, which read two
    records but up to twice the window's rows), every field of a row side
    by side."""
    from array_record.python.array_record_module import ArrayRecordWriter
    path = str(path)
    w = ArrayRecordWriter(path, AR_OPTIONS)
    try:
        if ds.kind == "fixed":
            rdt = _row_dtype(ds.fields)
            step = max(1, (64 << 20) // rdt.itemsize)
            for a in range(0, len(ds), step):
                rows = np.empty(min(step, len(ds) - a), rdt)
                for k, f in ds.fields.items():
                    rows[k] = f[a:a + len(rows)]
                for r in rows:
                    w.write(r.tobytes())
        elif ds.kind == "ragged":
            off = ds.offsets
            for i in range(len(ds)):
                w.write(np.ascontiguousarray(ds.flat[off[i]:off[i + 1]]).tobytes())
        else:
            chunk = chunk or -(-ds.window // 2)
            rdt = _row_dtype(ds.fields)
            so = ds.series_offsets
            for s in range(len(so) - 1):
                rows = np.empty(int(so[s + 1] - so[s]), rdt)
                for k, f in ds.fields.items():
                    rows[k] = f[so[s]:so[s + 1]]
                for a in range(0, len(rows), chunk):
                    w.write(rows[a:a + chunk].tobytes())
    finally:
        w.close()
    Path(path + ".json").write_text(json.dumps(_layout_of(ds, chunk)))


class _ArrayRecordReader:
    """Reads batches of samples from a file made by write_array_record: one
    __getitems__ of the ArrayRecord data source per batch, then the records'
    bytes joined once and viewed as the batch's arrays."""

    def __init__(self, path):
        from grain.sources import ArrayRecordDataSource
        path = str(path)
        self.meta = m = json.loads(Path(path + ".json").read_text())
        self.src = ArrayRecordDataSource([path])
        self.kind, self.n = m["kind"], m["samples"]
        self.rdt = np.dtype([(k, np.dtype(f["dtype"]), tuple(f["shape"]))
                             for k, f in m["fields"].items()])
        if self.kind == "windows":
            L, st, C = m["window"], m["stride"], m["chunk"]
            rows = np.asarray(m["series_rows"], np.int64)
            nwin = np.where(rows >= L, (rows - L) // st + 1, 0)
            self.first = np.zeros(len(rows) + 1, np.int64)
            np.cumsum(nwin, out=self.first[1:])
            nchunks = (rows + C - 1) // C
            self.cfirst = np.zeros(len(rows) + 1, np.int64)    # first record of each series
            np.cumsum(nchunks, out=self.cfirst[1:])
            # Rows of every record: C, except each series' last.
            self.crows = np.full(int(self.cfirst[-1]), C, np.int64)
            last = self.cfirst[1:][nchunks > 0] - 1
            self.crows[last] = rows[nchunks > 0] - (nchunks[nchunks > 0] - 1) * C
            self.per = (C - 1 + L + C - 1) // C        # records a window can touch
            self.L, self.st, self.C = L, st, C
        assert len(self.src) == (self.cfirst[-1] if self.kind == "windows" else self.n)

    def read(self, idx):
        idx = np.asarray(idx, np.int64)
        if self.kind == "windows":
            return self._windows(idx)
        recs = self.src.__getitems__(idx.tolist())
        buf = bytearray().join(recs)
        if self.kind == "ragged":
            name = self.meta["name"]
            dt = self.rdt[name]
            x = np.frombuffer(buf, dt.base).reshape((-1,) + dt.shape)
            rb = dt.itemsize
            out_off = np.zeros(len(recs) + 1, np.int64)
            np.cumsum([len(r) // rb for r in recs], out=out_off[1:])
            return {name: x, name + "_offsets": out_off, "index": idx}
        rows = np.frombuffer(buf, self.rdt)
        if len(self.rdt.names) == 1:
            k = self.rdt.names[0]
            b = {k: rows[k]}   # one field: the joined bytes are the batch, no further copy
        else:
            b = {k: np.ascontiguousarray(rows[k]) for k in self.rdt.names}
        b["index"] = idx
        return b

    def _windows(self, idx):
        s = np.searchsorted(self.first, idx, side="right") - 1
        t = (idx - self.first[s]) * self.st                      # start row within the series
        k0 = self.cfirst[s] + t // self.C
        # The records each window touches (the series' last one repeated past
        # its end), read together and joined: each window's rows then lie
        # side by side in the joined buffer.
        last = self.cfirst[s + 1] - 1
        keys = np.minimum(k0[:, None] + np.arange(self.per), last[:, None]).ravel()
        recs = self.src.__getitems__(keys.tolist())
        rows = np.frombuffer(bytearray().join(recs), self.rdt)
        pos = np.zeros(len(keys), np.int64)
        np.cumsum(self.crows[keys][:-1], out=pos[1:])
        r = pos[::self.per] + t % self.C
        b = {}
        for k in self.rdt.names:
            a = rows[k]
            v = np.lib.stride_tricks.as_strided(
                a, shape=(len(a) - self.L + 1, self.L) + a.shape[1:],
                strides=(a.strides[0],) + a.strides, writeable=False)
            b[k] = v[r]
        b["index"] = idx
        return b


def grain_batches(path, batch_size, seed=0, epochs=1, threads=2, prefetch=2, shuffle="numpy",
                  sort=False):
    """Grain's MapDataset over the ArrayRecord file, each element one batch.
    shuffle="grain": MapDataset.range(n).shuffle(seed).batch(B) gives each
    batch's sample numbers (Grain's own shuffle, reseeded each epoch);
    shuffle="numpy": the permutation of np.random.default_rng(seed + epoch)
    as the other systems use, cut into batches by a map over batch numbers.
    Grain's shuffle and batch run Python code per sample (about 17 us a
    sample here), which bounds small samples to some 60,000/s; the numpy
    mode has no per-sample step. Either way the batch's records are read by
    one __getitems__ of Grain's ArrayRecordDataSource, in read threads."""
    import functools
    import grain
    rd = _ArrayRecordReader(path)
    if shuffle == "grain":
        ds = (grain.MapDataset.range(rd.n).shuffle(seed=seed)
              .batch(batch_size, batch_fn=np.asarray)
              .map(rd.read)
              .repeat(epochs))   # reshuffled each epoch: the shuffle's seed moves with it
    else:
        nb = -(-rd.n // batch_size)

        @functools.lru_cache(maxsize=2)
        def perm(e):
            return np.random.default_rng(seed + e).permutation(rd.n)

        def read_batch(j):
            e, k = divmod(j, nb)
            idx = perm(e)[k * batch_size:(k + 1) * batch_size]
            return rd.read(np.sort(idx) if sort else idx)

        ds = grain.MapDataset.range(nb * epochs).map(read_batch)
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=prefetch))
    yield from it


def batches(system, data, batch_size, seed=0, epochs=1, **settings):
    """An iterator of batches of `data` by `system` (see the module's doc):
    data is a dataset for numpy/tdn/spdl and an ArrayRecord path for grain;
    settings override DEFAULTS[system]."""
    kw = dict(DEFAULTS[system], **settings)
    fn = {"numpy": numpy_batches, "tdn": tdn_batches, "spdl": spdl_batches,
          "grain": grain_batches}[system]
    return fn(data, batch_size, seed, epochs, **kw)
