"""stoker: keeps the GPU fed.

    import stoker
    with stoker.Loader("basins.stk", batch_size=256, window=365, shuffle="random") as loader:
        for batch in loader:          # a dict of NumPy arrays, views of the batch buffer
            x = batch["x"]            # [256, 365, 16]

Arrays are views of stoker's batch buffer (no copy); the buffer is reused
only after every array pointing into it is gone, so keeping a batch is
always safe (a consumer that keeps more batches than the ring holds makes
the ring grow, beyond the memory budget). `output="torch"` yields torch tensors (made through DLPack,
still without a copy), `output="dlpack"` yields stoker's own DLPack
exporters.
"""
import os

import numpy as np

from . import _stoker
from ._errors import InvalidArgument, NotFound, OutOfMemory, StokerError

__all__ = ["Loader", "StokerError", "InvalidArgument", "NotFound", "OutOfMemory", "bits", "gpu_count", "gpu_status", "index", "profile",
           "write", "version"]
__version__ = _stoker.version
version = _stoker.version

_ORDERS = {"sequential": 0, "random": 1, "block": 2}
_BACKENDS = {"auto": 0, "uring": 1, "io_uring": 1, "pool": 2, "mmap": 3}
_VALID = {None: 0, "all": 0, "mask": 1, "notnan": 2, "not_nan": 2}
_OUTPUTS = ("numpy", "torch", "dlpack")
_ON_ERROR = {"raise": 0, "skip": 1}
_WARM_UP = {"auto": 0, True: 1, "on": 1, False: 2, "off": 2}


def _env_int(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise InvalidArgument(f"environment variable {name}={v!r} is not an integer") from None


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


def gpu_status():
    """(CUDA devices stoker can use, why none when 0)."""
    return _stoker.gpu_count()


def gpu_count():
    """CUDA devices stoker can use: 0 without a CUDA build of stoker, an
    NVIDIA driver or a device (gpu_status() says which)."""
    return _stoker.gpu_count()[0]


def _device_index(device):
    """-1 for the host, else the CUDA ordinal of `device` ("cuda", "cuda:N",
    N or a torch.device)."""
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
        raise InvalidArgument(f"{name} must be one of {sorted(k for k in choices if k)}, not {value!r}")
    return choices[value]


class Loader:
    """Batches of a stoker dataset for one rank of a training job.

    Every option of the C loader (``stk_loader_options``) is a keyword with the
    same default:

    path          the dataset directory
    batch_size    samples per batch (required)
    fields        names of the fields to load (default: all)
    window        rows per window over the time fields (default: whole records)
    stride        rows between window starts (1)
    valid_field, valid   keep only windows whose valid_field at the last row
                  is nonzero (valid="mask") or not NaN (valid="notnan")
    shuffle       "sequential", "random" or "block" (default "block")
    seed, epoch   the order's seed and the first epoch (0, 0)
    block_bytes, block_samples, block_group   the block order's block size
                  (4 MiB of reads, or a sample count) and blocks per group (16)
    rank, world_size   this rank's share; default: torchrun's RANK and
                  WORLD_SIZE, else 0 and 1
    pad           give every rank ceil(N / world_size) samples by wrapping (False)
    split         (k, n): yield only batches k, k + n, k + 2n, ... of this rank's
                  stream, whole (None: all); n consumers taking one batch each in
                  turn see the rank's stream itself (stoker.torch uses it for
                  DataLoader workers)
    drop_last     drop a last partial batch (False)
    backend       "auto", "uring", "pool" or "mmap" ("auto")
    direct        O_DIRECT reads (False)
    threads       worker threads (0: one per CPU)
    prefetch      batch buffers in the ring (0: from the memory budget)
    queue_depth   io_uring entries per worker (64)
    memory_budget bytes for buffers (1 GiB; never more than half of what memory
                  and the process's cgroup have room for)
    verify        check the checksum of every block of data a batch uses, once
                  per epoch (True); a damaged byte raises StokerError naming
                  the shard file and the record
    on_error      "raise" (default), or "skip": a sample that fails its
                  checksum is replaced by the next good one of the order (of
                  its group, in block order), so every rank keeps the same
                  batch count; each replacement is counted in stats()
                  ["skipped"] and named in a RuntimeWarning
    max_skips     with "skip", this many failures in a row raise (100)
    output        "numpy" (default without a device), "torch" (default with
                  one) or "dlpack"
    device        None (default: batches in host memory), or "cuda", "cuda:N"
                  or N: batches on that GPU (see below)
    gpu_slots     device batch buffers (3)
    resident_budget  bytes of GPU memory the selected fields may take to be
                  uploaded once and assembled on the GPU (0: never)
    max_open_files  descriptors kept open; past it (an in-place index of many
                  small files) files are opened on demand and cached (0: from
                  the process's limit)
    warm_up       "auto" (default), True or False: bring a dataset that is not
                  in the page cache into it with large sequential reads, on a
                  thread of its own, while the first epoch is served from it,
                  instead of one small read per sample.  "auto" does it when
                  the data fits in 3/4 of the memory the page cache may still
                  take (MemAvailable and any cgroup memory.max) and the loader
                  reads through the mapping (the "auto" backend then picks
                  "mmap"); True whenever the data is not in memory

    root          for an in-place index: the directory its files may lie
                  under (default: the index's own directory).  An index names
                  files by path, so one handed over from elsewhere could name
                  any file the process can read; an index written away from
                  its files (stoker.index("/data", "~/data.idx")) is opened
                  with root="/data", which says that you trust it.  A file
                  outside is refused, naming it (StokerError, code
                  STK_EOUTSIDE = -1015).

    `path` is a dataset directory or an in-place index written by
    stoker.index / `stoker index`; both take the same options.

    Ragged fields (record mode) come as ``name`` (the rows concatenated) and
    ``name_offsets`` (int64, batch_size + 1).

    With a device, stoker page-locks its batch buffers and copies each batch
    to the GPU on its own CUDA stream; tensors arrive on the device through
    DLPack with the stream rules kept (torch.from_dlpack makes the current
    stream wait for the copy, and a device buffer is refilled only after the
    work queued on that stream when the batch was dropped is done).  Hold at
    most gpu_slots - 1 batches.  With resident_budget large enough, batches
    are assembled on the GPU from a copy of the dataset made at open.
    """

    def __init__(self, path, batch_size, fields=None, window=None, stride=1, valid_field=None,
                 valid=None, shuffle="block", seed=0, epoch=0, block_bytes=4 << 20,
                 block_samples=0, block_group=16, rank=None, world_size=None, pad=False,
                 drop_last=False, backend="auto", direct=False, threads=0, prefetch=0,
                 queue_depth=64, memory_budget=1 << 30, verify=True, on_error="raise",
                 max_skips=100, output=None, max_open_files=0, device=None, gpu_slots=3,
                 resident_budget=0, warm_up="auto", split=None, root=None):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
        batch_size = _check_int("batch_size", batch_size, 1, high=_U32)
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
        valid_code = _check_choice("valid", valid, _VALID)
        if valid_field is not None and valid_code == 0:
            raise InvalidArgument("valid_field needs valid='mask' or valid='notnan'")
        order = _check_choice("shuffle", shuffle, _ORDERS)
        seed = _check_int("seed", seed)
        epoch = _check_int("epoch", epoch)
        block_bytes = _check_int("block_bytes", block_bytes, 1)
        block_samples = _check_int("block_samples", block_samples)
        block_group = _check_int("block_group", block_group, 1, high=_U32)
        if world_size is None:
            world_size = _env_int("WORLD_SIZE", 1)
        if rank is None:
            rank = _env_int("RANK", 0)
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
        backend_code = _check_choice("backend", backend, _BACKENDS)
        threads = _check_int("threads", threads, high=_I32)
        prefetch = _check_int("prefetch", prefetch, high=_U32)
        queue_depth = _check_int("queue_depth", queue_depth, 1, high=_U32)
        memory_budget = _check_int("memory_budget", memory_budget, 1)
        on_error_code = _check_choice("on_error", on_error, _ON_ERROR)
        max_skips = _check_int("max_skips", max_skips, 1)
        dev = _device_index(device)
        if not isinstance(warm_up, (str, bool)) or warm_up not in _WARM_UP:
            raise InvalidArgument(f"warm_up must be 'auto', True or False, not {warm_up!r}")
        warm_up_code = _WARM_UP[warm_up]
        if output is None:
            output = "torch" if dev >= 0 else "numpy"
        if output not in _OUTPUTS:
            raise InvalidArgument(f"output must be one of {_OUTPUTS}, not {output!r}")
        if dev >= 0 and output == "numpy":
            raise InvalidArgument("output='numpy' cannot hold GPU memory; with a device use "
                             "output='torch' or 'dlpack'")
        gpu_slots = _check_int("gpu_slots", gpu_slots, 2, high=_U32)
        resident_budget = _check_int("resident_budget", resident_budget)
        if output == "torch":
            import torch  # noqa: F401  (fail early, not at the first batch)
        self._output = output
        self._c = _stoker.Loader(
            os.fspath(path), batch_size, fields, window or 0, stride, valid_field, valid_code,
            order, seed, epoch, block_bytes, block_samples, block_group, rank, world_size,
            bool(pad), bool(drop_last), backend_code, bool(direct), threads, prefetch,
            queue_depth, memory_budget, bool(verify), on_error_code, max_skips,
            _check_int("max_open_files", max_open_files, high=_U32), dev, gpu_slots,
            resident_budget, warm_up_code, split_index, split_count,
            None if root is None else os.fspath(root))
        self.device = None if dev < 0 else f"cuda:{dev}"
        self._skip_mode = on_error_code == 1
        self._skipped = 0
        self.batch_size = batch_size
        self.rank, self.world_size = rank, world_size
        self.split = (split_index, split_count)
        self._epoch = epoch
        self._started = False     # a batch of the current epoch was taken
        self._exhausted = False   # the current epoch ended
        self._last_ids = None

    # -- iteration --------------------------------------------------------

    def __iter__(self):
        # Iterating again after an epoch ended starts the next one, as a
        # DataLoader does; set_epoch() chooses one explicitly.
        if self._exhausted:
            self.set_epoch(self._epoch + 1)
        while True:
            batch = self.next()
            if batch is None:
                return
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
        if self._output == "dlpack":
            return arrays
        if self._output == "torch":
            import torch
            return {k: torch.from_dlpack(v) for k, v in arrays.items()}
        out = {}
        for k, v in arrays.items():
            a = np.asarray(v) if v.dtype != "bf16" else np.asarray(v).view(np.uint16)
            out[k] = a
        return out

    def next(self):
        """The next batch, or None at the end of the epoch."""
        item = None
        try:
            item = self._c.next_batch()
            if item is None:
                self._exhausted = True
                return None
            # A copy: a view would keep the whole batch buffer held after
            # the caller dropped the batch, so that holding one batch while
            # asking for the next could exhaust the ring (-EBUSY) at
            # prefetch=2.
            ids = np.array(item[1], dtype=np.uint64)
            out = self._convert(item[0])
        except BaseException:
            # Interrupted (Ctrl-C) after the batch was taken but before the
            # caller had it: put it back, so that the next call gives it and
            # a state saved now does not count it as delivered.
            if item is not None:
                self._c.unget_last()
            raise
        self._started = True
        self._last_ids = ids
        return out

    def sample_ids(self):
        """The global sample ids of the last batch returned (a NumPy array)."""
        return None if self._last_ids is None else self._last_ids.copy()

    def __len__(self):
        return self._c.counts()["rank_batches"]

    # -- epochs and state -------------------------------------------------

    def set_epoch(self, epoch):
        epoch = _check_int("epoch", epoch)
        self._c.set_epoch(epoch)
        self._epoch = epoch
        self._exhausted = False
        self._started = False

    @property
    def epoch(self):
        return self._epoch

    def state_dict(self):
        """The resume state (the torchdata StatefulDataLoader protocol)."""
        st = self._c.save()
        if self._exhausted:
            # The epoch ended: resume at the start of the next one.
            st = dict(st, epoch=st["epoch"] + 1, position=0)
        st["stoker_state_version"] = 1
        return st

    def load_state_dict(self, state):
        if not isinstance(state, dict):
            raise TypeError("state must be a dict from state_dict()")
        missing = {"seed", "epoch", "position", "fingerprint"} - set(state)
        if missing:
            raise InvalidArgument(f"state is missing {sorted(missing)}")
        self._c.restore(int(state["seed"]), int(state["epoch"]), int(state["position"]),
                        int(state["fingerprint"]))
        self._epoch = int(state["epoch"])
        self._exhausted = False
        self._started = False

    # -- the rest -----------------------------------------------------------

    def stats(self):
        """Per-stage counters: plan, io, assemble, wait (the data stall)."""
        return self._c.stats()

    def reset_stats(self):
        self._c.stats_reset()

    @property
    def fields(self):
        return self._c.field_names

    @property
    def backend(self):
        return self._c.counts()["backend"]

    def counts(self):
        return self._c.counts()

    # -- tracing ------------------------------------------------------------

    def trace_start(self, max_spans=0):
        """Records what each of the loader's threads does (stoker.h says
        more): batches with plan, verify, read and assemble nested inside,
        and the consumer's waits.  Keeps at most max_spans per thread (0:
        65536); starting again discards what was recorded."""
        self._c.trace_start(_check_int("max_spans", max_spans, high=_U32))

    def trace_stop(self):
        self._c.trace_stop()

    def trace_span(self, name, t0_ns, t1_ns):
        """Adds a span (a training step, say) to the consumer's timeline;
        times from time.monotonic_ns()."""
        self._c.trace_span(str(name), int(t0_ns), int(t1_ns))

    def trace_write(self, path):
        """Writes the spans recorded since trace_start as a Chrome trace
        (JSON) that ui.perfetto.dev and chrome://tracing open."""
        self._c.trace_write(os.fspath(path))

    def close(self):
        """Stops the loader's threads. Batches still referenced stay valid."""
        self._c.close()

    @property
    def closed(self):
        return self._c.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


from .profile import profile  # noqa: E402  (needs Loader's module loaded)

# -- writing --------------------------------------------------------------

_NP_TO_STK = {
    np.dtype("uint8"): "u8", np.dtype("uint16"): "u16", np.dtype("uint32"): "u32",
    np.dtype("uint64"): "u64", np.dtype("int8"): "i8", np.dtype("int16"): "i16",
    np.dtype("int32"): "i32", np.dtype("int64"): "i64", np.dtype("float16"): "f16",
    np.dtype("float32"): "f32", np.dtype("float64"): "f64", np.dtype("bool"): "u8",
}


def _contig(v):
    """v as a C-contiguous array, keeping its shape: np.ascontiguousarray
    would turn a 0-d value (a per-record scalar) into shape (1,)."""
    a = np.asarray(v)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _stk_dtype(name, arr):
    dt = arr.dtype
    if dt not in _NP_TO_STK and dt.newbyteorder("=") in _NP_TO_STK and dt.byteorder == ">":
        raise InvalidArgument(f"field '{name}': big-endian {dt} is not supported; use "
                         "arr.astype(arr.dtype.newbyteorder('<'))")
    try:
        return _NP_TO_STK[dt]
    except KeyError:
        hint = ""
        if dt.kind in "SUO":
            hint = ("; strings of '0'/'1' (bit vectors) become numbers with "
                    "stoker.bits(values), other strings must be mapped to numbers first")
        raise InvalidArgument(f"field '{name}': dtype {dt} cannot be stored "
                         f"(numeric and bool dtypes can){hint}") from None


def bits(values, *, packed=False, dtype="u1"):
    """Bit vectors written as strings of '0' and '1' (a bloom filter stored
    as text: an HDF5 fixed-length string dataset, a pandas or Arrow string
    column) as a 2-d NumPy array, one row per string, ready for stoker.write:

        stoker.write("fp.stk", {"fp": stoker.bits(h5["fingerprints"][:])})

    values  a NumPy array of fixed-length bytes or str (dtype S or U), or any
            sequence of str/bytes (list, pandas Series, pyarrow array)
    packed  False: one element per bit, 0 or 1 (dtype: "u1" default, or
            "f4", "f2", "f8", "i1"...); True: eight bits per byte,
            numpy.packbits order (the first character is the high bit), shape
            (n, ceil(length / 8)) uint8

    Every string must have the same length and hold only '0' and '1'; else a
    ValueError names the first row that does not and why.
    """
    if hasattr(values, "to_numpy") and not isinstance(values, np.ndarray):
        values = values.to_numpy(zero_copy_only=False) if "pyarrow" in type(values).__module__ \
            else values.to_numpy()
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise InvalidArgument(f"bits: values must be one string per row, not shape {arr.shape}")
    if arr.dtype.kind == "O":
        lens = {len(v) for v in arr} if len(arr) else {0}
        if len(lens) > 1:
            first = len(arr[0])
            i = next(i for i, v in enumerate(arr) if len(v) != first)
            raise InvalidArgument(f"bits: row {i} has {len(arr[i])} characters, row 0 has {first}: "
                             "bit vectors must have one length")
        if len(arr) and isinstance(arr[0], str):
            arr = arr.astype("U")
        else:
            arr = arr.astype("S")
    if arr.dtype.kind == "U":
        width = arr.dtype.itemsize // 4
        codes = np.frombuffer(arr.tobytes(), dtype="<u4").reshape(len(arr), width)
    elif arr.dtype.kind == "S":
        width = arr.dtype.itemsize
        codes = np.frombuffer(arr.tobytes(), dtype=np.uint8).reshape(len(arr), width)
    else:
        raise InvalidArgument(f"bits: values must be strings of '0' and '1', not dtype {arr.dtype}")
    # Fixed-length NumPy strings pad short ones with NULs: a NUL is a short row.
    for bad, what in ((codes == 0, "is shorter than the others"),
                      ((codes != ord("0")) & (codes != ord("1")) & (codes != 0), None)):
        rows = np.flatnonzero(bad.any(axis=1))
        if len(rows):
            i = int(rows[0])
            if what:
                raise InvalidArgument(f"bits: row {i} {what} ({int((codes[i] != 0).sum())} "
                                 f"characters, not {width}): bit vectors must have one length")
            j = int(np.flatnonzero(bad[i])[0])
            raise InvalidArgument(f"bits: row {i} holds {chr(int(codes[i, j]))!r} at position {j}; "
                             "bit vectors hold only '0' and '1'")
    b = (codes == ord("1"))
    if packed:
        return np.packbits(b, axis=1)
    return b.astype(np.dtype(dtype))


def _field_spec(name, arr, ragged, compress):
    codec, level = ("none", 0)
    if compress and name in compress:
        c = compress[name]
        codec, level = ("zstd", 0) if c in (True, "zstd") else ("zstd", int(c))
    shape = list(arr.shape)
    if ragged and shape:
        shape[0] = -1
    return (name, _stk_dtype(name, arr), tuple(shape), codec, level)


_SOURCES = {None: 0, "npy": 1, "wav": 2, "hdf5": 3, "raw": 4}


def index(paths, output, *, source=None, split_axis0=False, dataset=None, float32=False,
          field=None, extension=None):
    """Indexes files where they lie so that a Loader reads them in place.

    paths        a file or directory, or a list of them; a directory's files,
                 at any depth, come in the byte order of their full paths (as
                 sorted() gives: "site0.npy" before "site0/a.npy")
    output       the index file to write (replaced atomically)
    source       "npy", "wav", "hdf5" or "raw" (default: from the first file's
                 extension)
    split_axis0  npy: every row along axis 0 is a record (default: a file is
                 a record)
    dataset      hdf5: the dataset to read (default: the file's only one)
    float32      wav: deliver float32 in [-1, 1) (default: PCM 16 as int16,
                 24 and 32 as int32 scaled to the full range, float as stored)
    field        the field's name (default "data", "audio" or "bytes")
    extension    in directories, only files whose name ends so

    Returns the number of records.  Each file's size and modification time
    are recorded; a Loader refuses a file that changed since (re-index it).
    Files under the index's own directory are named relative to it; files
    elsewhere by absolute path, and a Loader then needs root= to read them
    (see Loader).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if source not in _SOURCES:
        raise InvalidArgument(f"source must be one of npy, wav, hdf5, raw or None, not {source!r}")
    return _stoker.index(paths, os.fspath(output), source=_SOURCES[source],
                         split_axis0=bool(split_axis0), dataset=dataset, float32=bool(float32),
                         field=field, extension=extension)


def write(path, source, *, overwrite=False, shard_bytes=256 << 20, align=64, sync=True,
          attrs=None, compress=None, ragged=None, group_by=None, order_by=None, fields=None,
          static=None):
    """Writes a dataset.

    source is one of:
    - a dict of arrays whose first axis indexes records (each record of
      field f is source[f][i]);
    - an iterable of per-record dicts of arrays, whose first dimensions may
      differ from record to record (ragged);
    - any object with __arrow_c_stream__ (pyarrow Table or RecordBatchReader,
      polars DataFrame...), consumed in C through the Arrow C stream
      interface. Each row is a record, or with group_by="basin" each distinct
      basin is one record holding its rows (sorted by order_by="date"), plus
      the key itself as a field. fields={"x": ["f1", "f2", ...], "y": ["q"]}
      stacks columns into fields (default: one field per column). With
      group_by, a field whose rows are equal within every group (a basin's
      area, its attributes) is static: stored once per record, [k] or a
      scalar, and delivered once per sample by a windowed Loader;
      static=[...] names the static fields instead (each must be constant
      within every group), static=[] keeps every field's rows.
    compress maps field names to True / "zstd" / a zstd level. ragged names
    the fields whose first dimension varies (for an iterable, found from the
    first record when not given: every field of ndim >= 1 whose first
    dimension differs between the first two records is ragged; pass it
    explicitly to be sure). Returns the number of records written. On any
    error the dataset is left incomplete, never half-written as complete.
    """
    import json
    attrs_json = json.dumps(attrs) if attrs is not None else None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("path must be a str or os.PathLike")
    path = os.fspath(path)
    if isinstance(source, dict):
        if not source:
            raise InvalidArgument("source has no fields")
        cols = {k: _contig(v) for k, v in source.items()}
        n = {len(v) for v in cols.values() if v.ndim}
        if len(n) > 1 or any(v.ndim == 0 for v in cols.values()):
            raise InvalidArgument("every array of a dict source must have the same first "
                             f"dimension (one entry per record); got lengths {sorted(n)}")
        # One record of each field, as an array: v[0] would give a NumPy
        # scalar for a 1-d v (native byte order, or a Python object for an
        # object array), hiding a dtype that cannot be stored.
        specs = [_field_spec(k, v[0, ...] if len(v) else np.zeros(v.shape[1:], v.dtype),
                             False, compress)
                 for k, v in cols.items()]
        w = _stoker.Writer(path, specs, shard_bytes, align, bool(overwrite), bool(sync),
                           attrs_json)
        try:
            for i in range(n.pop() if n else 0):
                w.append([(v[i], 1 if v[i].ndim == 0 else v[i].shape[0]) for v in cols.values()])
            return w.finish()
        except BaseException:
            w.abort()
            raise
    if hasattr(source, "__arrow_c_stream__"):
        return _write_arrow(path, source, group_by, order_by, fields, compress, shard_bytes,
                            align, overwrite, sync, attrs_json, static)
    if group_by is not None or order_by is not None or fields is not None or static is not None:
        raise TypeError("group_by, order_by, fields and static apply to Arrow sources (objects with "
                        "__arrow_c_stream__: pyarrow tables and readers, polars frames)")
    it = iter(source)
    first = next(it, None)
    if first is None:
        raise InvalidArgument("source is empty: a dataset of an iterable needs one record to "
                         "learn its schema")
    first = {k: _contig(v) for k, v in first.items()}
    second = next(it, None)
    second = None if second is None else {k: _contig(v) for k, v in second.items()}
    if ragged is None:
        ragged = {k for k, v in first.items()
                  if v.ndim and second is not None and k in second and second[k].ndim
                  and second[k].shape[0] != v.shape[0]}
    ragged = set(ragged)
    specs = [_field_spec(k, v, k in ragged, compress) for k, v in first.items()]
    names = [s[0] for s in specs]
    schema = {k: (v.dtype, v.shape, k in ragged and v.ndim > 0) for k, v in first.items()}
    w = _stoker.Writer(path, specs, shard_bytes, align, bool(overwrite), bool(sync), attrs_json)
    try:
        count = 0
        for rec in ([first] + ([second] if second is not None else [])):
            w.append(_values(rec, names, count, schema))
            count += 1
        for rec in it:
            w.append(_values({k: _contig(v) for k, v in rec.items()}, names, count, schema))
            count += 1
        return w.finish()
    except BaseException:
        w.abort()
        raise


def _write_arrow(path, source, group_by, order_by, fields, compress, shard_bytes, align,
                 overwrite, sync, attrs_json, static=None):
    for name, v in (("group_by", group_by), ("order_by", order_by)):
        if v is not None and not isinstance(v, str):
            raise TypeError(f"{name} must be a column name (str)")
    spec = None
    if fields is not None:
        if not isinstance(fields, dict):
            raise TypeError("fields must map field names to lists of column names")
        spec = []
        for name, cols in fields.items():
            if isinstance(cols, str):
                cols = [cols]
            cols = list(cols)
            if not cols or not all(isinstance(c, str) for c in cols):
                raise TypeError(f"fields['{name}'] must be a column name or a list of them")
            codec, level = "none", 0
            if compress and name in compress:
                c = compress[name]
                codec, level = ("zstd", 0) if c in (True, "zstd") else ("zstd", int(c))
            spec.append((name, cols, codec, level))
    elif compress:
        raise InvalidArgument("compress with an Arrow source needs fields= to name the fields")
    if static is not None:
        if isinstance(static, str):
            static = [static]
        static = list(static)
        if not all(isinstance(x, str) for x in static):
            raise TypeError("static must be a list of field names")
        if group_by is None:
            raise InvalidArgument("static needs group_by (a static field holds one value per group)")
    capsule = source.__arrow_c_stream__()
    return _stoker.write_arrow(path, capsule, group_by, order_by, spec, shard_bytes, align,
                               bool(overwrite), bool(sync), attrs_json, static)


def _values(rec, names, i, specs=None):
    """A record's values for Writer.append, checked against the schema the
    first record set (specs: name -> (dtype, shape, ragged))."""
    if set(rec) != set(names):
        raise InvalidArgument(f"record {i}: fields {sorted(rec)} differ from the first record's "
                              f"{sorted(names)}")
    out = []
    for k in names:
        v = _contig(rec[k])
        if specs is not None:
            dt, shape, ragged = specs[k]
            if v.dtype != dt:
                raise InvalidArgument(f"record {i}: field '{k}' is {v.dtype}, but the first "
                                      f"record's is {dt}: every record must have the same "
                                      "dtypes (cast it first)")
            if v.ndim != len(shape) or tuple(v.shape[1:]) != tuple(shape[1:]) or (
                    not ragged and tuple(v.shape) != tuple(shape)):
                want = ("(*" + "".join(f", {d}" for d in shape[1:]) + ")") if ragged \
                    else str(tuple(shape))
                raise InvalidArgument(f"record {i}: field '{k}' has shape {tuple(v.shape)}; the "
                                      f"schema the first record set is {want}"
                                      + ("" if ragged or not shape else
                                         " (name the field in ragged= if its first "
                                         "dimension varies)"))
        out.append((v, 1 if v.ndim == 0 else v.shape[0]))
    return out
