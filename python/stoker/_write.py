"""stoker.write, stoker.index and stoker.bits: making datasets, from arrays,
records or Arrow streams, or by indexing files where they lie."""
from __future__ import annotations

import itertools
import os
from typing import (Any, Dict, Iterable, Literal, Mapping, Optional, Sequence, Sized, Tuple,
                    Union)

import numpy as np

from . import _hf, _media, _progress, _stoker
from ._errors import InvalidArgument, StokerError
from ._types import PathLike

_NP_TO_STK = {
    np.dtype("uint8"): "u8", np.dtype("uint16"): "u16", np.dtype("uint32"): "u32",
    np.dtype("uint64"): "u64", np.dtype("int8"): "i8", np.dtype("int16"): "i16",
    np.dtype("int32"): "i32", np.dtype("int64"): "i64", np.dtype("float16"): "f16",
    np.dtype("float32"): "f32", np.dtype("float64"): "f64", np.dtype("bool"): "u8",
}

# bfloat16 has no dtype in NumPy itself: its values travel through here as
# their raw 16-bit words, under this marker (one uint16 in a structured
# dtype, which nothing else produces).
_BF16 = np.dtype([("bfloat16", "<u2")])
_NP_TO_STK[_BF16] = "bf16"


def _bf16_words(v):
    """A torch tensor of bfloat16 as its raw words under _BF16; None for
    anything else."""
    if type(v).__module__.split(".")[0] != "torch":
        return None
    import torch
    if getattr(v, "dtype", None) != torch.bfloat16:
        return None
    return v.detach().cpu().contiguous().view(torch.int16).numpy().view(_BF16)


def _contig(v):
    """v as a C-contiguous array, keeping its shape: np.ascontiguousarray
    would turn a 0-d value (a per-record scalar) into shape (1,).  A torch
    tensor of bfloat16 comes as its words (_BF16)."""
    a = _bf16_words(v)
    if a is None:
        a = np.asarray(v)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


# What write() takes, for the TypeError that names it.
_ACCEPTED = ("a dict of arrays (one entry per record), an iterable of per-record dicts, an "
             "Arrow source (a pyarrow Table, Dataset or RecordBatchReader, an iterator of "
             "pyarrow RecordBatches, a polars or pandas frame, any object with "
             "__arrow_c_stream__), stoker.parquet(path) for Parquet files, or a Hugging Face "
             "datasets Dataset, IterableDataset or DatasetDict")


def _pyarrow_kind(x: Any) -> Optional[str]:
    """The class name of a pyarrow object (RecordBatch, Table,
    FileSystemDataset, Scanner, ParquetFile...), else None; pyarrow is not
    imported to ask."""
    mod = type(x).__module__ or ""
    return type(x).__name__ if mod.split(".")[0] == "pyarrow" else None


class _Batches:
    """Record batches handed to the C writer through a pyarrow
    RecordBatchReader made here: counted for the progress display, each
    checked against the schema (the C stream would read a batch of another
    schema by the first's), and an exception raised while producing them
    kept, to be raised as itself rather than as the stream's text of it."""

    def __init__(self, schema: Any, batches: Iterable[Any], display: Any, noun: str = "item"):
        self.schema, self.batches, self.display = schema, batches, display
        self.noun = noun  # what the source's items are called in messages
        self.rows = 0  # given so far
        self.path = ""  # the dataset written, for messages
        self.error: Optional[BaseException] = None

    def _gen(self):
        import pyarrow as pa
        try:
            for i, b in enumerate(self.batches):
                if _pyarrow_kind(b) == "Table":
                    parts = b.to_batches()
                elif _pyarrow_kind(b) == "RecordBatch":
                    parts = [b]
                elif hasattr(b, "__arrow_c_array__") or hasattr(b, "__arrow_c_stream__"):
                    parts = [pa.record_batch(b)] if hasattr(b, "__arrow_c_array__") \
                        else pa.table(b).to_batches()
                else:
                    raise TypeError(f"{self.noun} {i} of the source is a {type(b).__name__}, "
                                    "but the first was a pyarrow RecordBatch: every item must "
                                    "be one")
                for part in parts:
                    wrong = _schema_mismatch(part.schema, self.schema)
                    if wrong:
                        raise InvalidArgument(
                            f"{self.path}: {self.noun} {i} of the source (its rows from "
                            f"{self.rows}) "
                            f"does not have the source's schema: {wrong}; every batch must "
                            f"have it ({_schema_text(self.schema)}): cast it, "
                            "batch.cast(schema)")
                    self.display.update(part.num_rows, part.nbytes)
                    self.rows += part.num_rows
                    yield part
        except BaseException as e:
            self.error = e
            raise

    def reader(self) -> Any:
        import pyarrow as pa
        return pa.RecordBatchReader.from_batches(self.schema, self._gen())


def _schema_text(schema: Any) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def _schema_mismatch(got: Any, want: Any) -> Optional[str]:
    """How a batch's schema differs from the stream's in what the C writer
    reads by position (the columns' names and types; not nullability nor
    metadata), or None where it does not."""
    if len(got) != len(want):
        return (f"it has {len(got)} columns ({', '.join(got.names)}) where the schema has "
                f"{len(want)} ({', '.join(want.names)})")
    for k, (g, w) in enumerate(zip(got, want)):
        if g.name != w.name:
            return f"its column {k} is '{g.name}' where the schema has '{w.name}'"
        if g.type != w.type:
            return f"column '{g.name}' is {g.type} where the schema has {w.type}"
    return None


def _arrow_rows(source: Any) -> Optional[int]:
    """How many rows an Arrow source holds where that is cheap to know
    (for the progress display), else None."""
    kind = _pyarrow_kind(source)
    if kind in ("Table", "RecordBatch"):
        return int(source.num_rows)
    if kind and kind.endswith("Dataset"):
        return int(source.count_rows())  # Parquet: from the footers
    if kind == "Scanner":
        return None
    if (type(source).__module__ or "").split(".")[0] in ("pandas", "polars", "datasets") \
            and hasattr(source, "__len__") and not isinstance(source, dict):
        return len(source)
    return None


def _counted(source: Any, what: str, total: Optional[int],
             progress: Optional[bool]) -> Optional[_Batches]:
    """An Arrow source re-read through pyarrow, batch by batch, to count
    its rows for the progress display (the C writer reads the stream the
    same way either way); None without pyarrow (no progress then)."""
    try:
        import pyarrow as pa
    except ImportError:
        return None
    reader = source if _pyarrow_kind(source) == "RecordBatchReader" \
        else pa.RecordBatchReader.from_stream(source)
    return _Batches(reader.schema, reader, _progress.bar(what, total, "rows", progress),
                    "batch")


def _arrow_stream(source: Any) -> Any:
    """What a user tries first, as an Arrow source: a pyarrow Dataset or
    Scanner as a stream of record batches (not loaded whole), a
    ParquetFile as its batches.  Anything else is returned as it is."""
    kind = _pyarrow_kind(source)
    if kind is None:
        return source
    if kind.endswith("Dataset") and hasattr(source, "scanner"):
        return source.scanner().to_reader()
    if kind == "Scanner":
        return source.to_reader()
    if kind == "ParquetFile":
        import pyarrow as pa
        return pa.RecordBatchReader.from_batches(source.schema_arrow, source.iter_batches())
    return source


def _not_data_hint(source: Any) -> str:
    """What to pass instead of a path or an open file."""
    if isinstance(source, (str, os.PathLike)):
        p = os.fspath(source)
        name = p.decode(errors="replace") if isinstance(p, bytes) else p
        return (f"source is a {type(source).__module__}.{type(source).__qualname__}, "
                f"{name!r}: a path is not data; for Parquet files pass "
                f"stoker.parquet({name!r}); to read .npy, .wav or HDF5 files where they lie, "
                f"stoker.index; stoker.write takes {_ACCEPTED}")
    return (f"source is a {type(source).__module__}.{type(source).__qualname__}; "
            f"stoker.write takes {_ACCEPTED}")


def _text_kind(x):
    """"string" for a str, "binary" for bytes, else None."""
    if isinstance(x, str):
        return "string"
    if isinstance(x, (bytes, bytearray)):
        return "binary"
    return None


def _text_column(v):
    """A dict source's column of one string a record, as (type, [uint8
    arrays]), or None for a column of anything else: a list or tuple of
    str (or of bytes), or a 1-d NumPy array of str (U, StringDType, or
    objects that are all str) or of bytes (S, or objects); a pyarrow
    array, pandas or polars Series of them as well."""
    lib = (type(v).__module__ or "").split(".")[0]
    if lib == "pyarrow" and hasattr(v, "to_pylist"):
        import pyarrow as pa
        t = v.type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
                or pa.types.is_string_view(t) or pa.types.is_binary_view(t)):
            return None
        v = v.to_pylist()
    elif lib == "pandas" and getattr(v, "ndim", 0) == 1 and hasattr(v, "to_list"):
        if getattr(v.dtype, "kind", "O") not in "OSUT":
            return None  # (numbers: not turned into a list of objects)
        v = v.to_list()
    elif lib == "polars" and hasattr(v, "to_list"):
        if str(getattr(v, "dtype", "")) not in ("String", "Utf8", "Binary"):
            return None
        v = v.to_list()
    if isinstance(v, np.ndarray):
        if v.ndim != 1 or v.dtype.kind not in "USTO":
            return None
        items = v.tolist()
    elif isinstance(v, (list, tuple)) and v:
        items = v
    else:
        return None
    kinds = {_text_kind(x) for x in items}
    if isinstance(v, np.ndarray) and v.dtype.kind in "UST":
        kinds = {"binary" if v.dtype.kind == "S" else "string"}
    if len(kinds) != 1 or None in kinds:
        return None
    t = kinds.pop()
    enc = [np.frombuffer(x.encode() if t == "string" else bytes(x), np.uint8) for x in items]
    return t, enc


def _time_type(arr):
    """A datetime64 / timedelta64 array as (its int64 view, its logical
    type); anything else as (arr, None)."""
    if arr.dtype.kind not in "Mm":
        return arr, None
    unit, count = np.datetime_data(arr.dtype)
    if count != 1 or unit not in ("s", "ms", "us", "ns", "D"):
        raise InvalidArgument(f"{arr.dtype}: datetime64 and timedelta64 of s, ms, us or ns (or "
                              "datetime64[D]) can be stored; cast it first")
    if unit == "D":
        if arr.dtype.kind == "m":
            raise InvalidArgument("timedelta64[D] cannot be stored: cast it to timedelta64[s]")
        return arr.view(np.int64).astype(np.int32), "date32"
    kind = "timestamp" if arr.dtype.kind == "M" else "duration"
    return arr.view(np.int64), f"{kind}[{unit}]"


def _rec_value(v):
    """A per-record value as (C-contiguous array, logical type or None):
    a str or bytes as its bytes (uint8), a datetime64 as int64."""
    if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "UST":
        v = v.item()
    elif isinstance(v, (np.str_, np.bytes_)):
        v = v.item()
    t = _text_kind(v)
    if t is not None:
        return np.frombuffer(v.encode() if t == "string" else bytes(v), np.uint8), t
    return _time_type(_contig(v))


def _stk_dtype(name, arr):
    dt = arr.dtype
    if dt not in _NP_TO_STK and dt.newbyteorder("=") in _NP_TO_STK and dt.byteorder == ">":
        raise InvalidArgument(f"field '{name}': big-endian {dt} is not supported; use "
                         "arr.astype(arr.dtype.newbyteorder('<'))")
    try:
        return _NP_TO_STK[dt]
    except KeyError:
        hint = ""
        if dt.kind in "SUOT":
            hint = ("; strings are fields of one string a record (a list of str, or a 1-d "
                    "array of them); strings of '0'/'1' (bit vectors) become numbers with "
                    "stoker.bits(values)")
        raise InvalidArgument(f"field '{name}': dtype {dt} cannot be stored "
                         f"(numeric and bool dtypes can){hint}") from None


def bits(values: Any, *, packed: bool = False, dtype: Any = "u1") -> np.ndarray:
    """Bit vectors written as strings of '0' and '1', as a 2-d NumPy array.

    For a bloom filter stored as text (an HDF5 fixed-length string dataset,
    a pandas or Arrow string column); one row per string, ready for
    stoker.write::

        stoker.write("fp.stk", {"fp": stoker.bits(h5["fingerprints"][:])})

    Args:
        values: A NumPy array of fixed-length bytes or str (dtype S or U), or
            any sequence of str/bytes (list, pandas Series, pyarrow array).
        packed: False: one element per bit, 0 or 1, of ``dtype``; True: eight
            bits per byte, numpy.packbits order (the first character is the
            high bit), shape (n, ceil(length / 8)) uint8.
        dtype: The elements' dtype when not packed ("u1", "f4", "f2", "f8",
            "i1"...).

    Returns:
        The array, one row per string.

    Raises:
        InvalidArgument: A string of another length than the first, or
            holding a character other than '0' and '1' (the message names
            the first such row and why).
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


def _codec(name, compress):
    """(codec, level) of field `name` under write's `compress`."""
    if not compress or name not in compress:
        return "none", 0
    c = compress[name]
    # True and False by identity: 1 == True would otherwise make level 1 the
    # default level, and False (0) a compression at level 0.
    if c is True or c == "zstd":
        return "zstd", 0
    if c is False or c is None:
        return "none", 0
    if isinstance(c, int):
        return "zstd", c
    raise InvalidArgument(f"compress['{name}'] must be True, False, 'zstd' or a zstd level, "
                          f"not {c!r}")


def _field_spec(name, arr, ragged, compress, type=None):
    codec, level = _codec(name, compress)
    shape = list(arr.shape)
    if ragged and shape:
        shape[0] = -1
    dtype = "bytes" if type in ("string", "binary", "image", "audio") else _stk_dtype(name, arr)
    return (name, dtype, tuple(shape), codec, level, type)


_SOURCES = {None: 0, "npy": 1, "wav": 2, "hdf5": 3, "raw": 4, "image": 5, "audio": 6}


def index(paths: Union[PathLike, Iterable[PathLike]], output: PathLike, *,
          source: Optional[Literal["npy", "wav", "hdf5", "raw", "image", "audio"]] = None,
          split_axis0: bool = False, dataset: Optional[str] = None, float32: bool = False,
          field: Optional[str] = None, extension: Optional[str] = None,
          progress: Optional[bool] = None) -> int:
    """Indexes files where they lie so that a Loader reads them in place.

    Each file's size and modification time are recorded; a Loader refuses a
    file that changed since (re-index it). Files under the index's own
    directory are named relative to it; files elsewhere by absolute path,
    and a Loader then needs ``root=`` to read them (see Loader).

    Args:
        paths: A file or directory, or a list of them; a directory's files,
            at any depth, come in the byte order of their full paths (as
            sorted() gives: "site0.npy" before "site0/a.npy").
        output: The index file to write (replaced atomically).
        source: ``"npy"``, ``"wav"``, ``"hdf5"``, ``"raw"``, ``"image"``
            (.jpg, .jpeg, .png, .webp) or ``"audio"`` (.flac, .mp3, .ogg,
            .opus) (default: from the first file's extension). Image and
            audio files are a record each, stored as they are, for
            ``Loader(decode=...)``; each one's header is checked here.
        split_axis0: npy: every row along axis 0 is a record (default: a file
            is a record).
        dataset: hdf5: the dataset to read (default: the file's only one).
        float32: wav: deliver float32 in [-1, 1) (default: PCM 16 as int16,
            24 and 32 as int32 scaled to the full range, float as stored).
        field: The field's name (default "data", "audio" or "bytes").
        extension: In directories, only files whose name ends so.
        progress: Show the files indexed so far, their records and the
            rate on stderr (tqdm's bar, or a line redrawn in place; the
            time left where ``paths`` names files only, whose count is then
            known). None: on a terminal or in a notebook only; False:
            never; True: always.

    Returns:
        The number of records.

    Raises:
        InvalidArgument: An unknown source, or files that do not agree
            (shapes, dtypes, sample rates).
        NotFound: A path that is not there.
        StokerError: A file that cannot be indexed (the message names it).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = [os.fspath(p) for p in paths]
    if source not in _SOURCES:
        raise InvalidArgument(f"source must be one of npy, wav, hdf5, raw or None, not {source!r}")
    shown = _progress.bar(f"index {os.path.basename(os.fspath(output))}",
                          len(files) if _progress.wanted(progress) and
                          all(os.path.isfile(f) for f in files) else None, "files", progress)

    def indexed(n: int, records: int) -> None:
        shown.set(n, 0, f"{records:,} records")

    with shown:
        return _stoker.index(files, os.fspath(output), source=_SOURCES[source],
                             split_axis0=bool(split_axis0), dataset=dataset,
                             float32=bool(float32), field=field, extension=extension,
                             progress=indexed if shown else None)


def write(path: PathLike, source: Any, *, overwrite: bool = False,
          shard_bytes: int = 256 << 20, align: int = 64, sync: bool = True,
          attrs: Optional[Mapping[str, Any]] = None,
          compress: Optional[Mapping[str, Union[bool, str, int]]] = None,
          ragged: Optional[Iterable[str]] = None, group_by: Optional[str] = None,
          order_by: Optional[str] = None,
          fields: Optional[Mapping[str, Union[str, Sequence[str], _media.Image,
                                              _media.Audio]]] = None,
          static: Optional[Union[str, Sequence[str]]] = None,
          part: Optional[Tuple[int, Optional[int]]] = None, resume: bool = False,
          inputs: Optional[str] = None, split: Optional[str] = None,
          progress: Optional[bool] = None,
          format_version: int = 0) -> Union[int, Dict[str, int]]:
    """Writes a dataset, or one part of it.

    On any error the dataset is left incomplete, never half-written as
    complete.

    Args:
        path: The dataset directory to create.
        source: One of:

            - a dict of arrays whose first axis indexes records (each record
              of field f is ``source[f][i]``);
            - an iterable of per-record dicts of arrays, whose first
              dimensions may differ from record to record (ragged);
            - any object with ``__arrow_c_stream__`` (pyarrow Table or
              RecordBatchReader, polars DataFrame...), consumed in C through
              the Arrow C stream interface: each row is a record, or with
              ``group_by`` each distinct key one record holding its rows;
              likewise a ``pyarrow.dataset`` Dataset or Scanner (read as a
              stream of batches, never loaded whole), a
              ``pyarrow.parquet.ParquetFile``, an iterator of pyarrow
              RecordBatches (``ParquetFile.iter_batches()``; the schema is
              the first batch's, and every batch must have it), and
              ``stoker.parquet(path)`` for Parquet files, directories and
              s3:// prefixes.  A batch that does not fit the stream's
              schema (other columns or types; for a stream not made by
              pyarrow, what its arrays' layout shows) is refused by its
              number (without ``group_by``, the records before it kept
              for ``resume``).

            - a Hugging Face ``datasets.Dataset`` (in memory or mapped from
              disk; its Arrow table is read as it lies, in the dataset's
              order after select, shuffle or filter; its format plays no
              part), ``datasets.IterableDataset`` (read in Arrow batches)
              or ``datasets.DatasetDict`` (one dataset per split under
              ``path``, or the one ``split`` names).

            Arrays are NumPy arrays (numeric or bool) or anything
            ``np.asarray`` takes; a torch tensor of ``torch.bfloat16`` makes
            a bf16 field (read back as ``torch.bfloat16`` through torch and
            DLPack, and as the raw 16-bit words, uint16, through NumPy).
            Strings are fields of one string a record, stored as ragged
            bytes and typed "string" or "binary" in the manifest (read back
            as str or bytes; see Loader's ``strings``): Arrow string and
            binary columns of any width, and in dicts and records str and
            bytes values (lists of them, NumPy arrays of dtype U, S,
            StringDType or objects). Arrow dates, times, timestamps and
            durations, and NumPy datetime64 / timedelta64, keep their unit
            (and time zone) in the manifest and read back as datetime64 /
            timedelta64. Arrow lists of lists whose inner lists have one
            length (HF's Array2D) become fields of shape [*, k] (a pyarrow
            Table or a datasets source).
        overwrite: Replace an existing dataset at ``path``.
        shard_bytes: The size shards are cut at.
        align: The alignment of each record's data in a shard.
        sync: fsync what is written before the dataset is published.
        attrs: A JSON-serialisable dict stored with the dataset.
        compress: Maps field names to True / "zstd" / a zstd level.
        ragged: The fields whose first dimension varies. For an iterable,
            found from the first records when not given: every field of
            ndim >= 1 whose first dimension differs between the first two
            records (pass it to be sure).
        group_by: Arrow: the key column; each distinct key (``"basin"``) is
            one record holding its rows, plus the key itself as a field.
        order_by: Arrow with group_by: the column each record's rows are
            sorted by (``"date"``).
        fields: Arrow: stacks columns into fields, ``{"x": ["f1", "f2"],
            "y": ["q"]}`` (default: one field per column). Records or a
            dict of columns: ``{"image": stoker.Image()}`` or
            ``stoker.Audio()`` makes a bytes field a media field (typed
            "image" or "audio"), which ``Loader(decode=...)`` decodes;
            each record's header is read as it is written, and a file that
            is not such media is refused, naming the record.
        static: Arrow with group_by: by default a field whose rows are equal
            within every group (a basin's area, its attributes) is static:
            stored once per record, [k] or a scalar, and delivered once per
            sample by a windowed Loader. A list names the static fields
            instead (each must be constant within every group); ``[]`` keeps
            every field's rows.
        part: ``(i, n)``: write part i of n into ``path`` (distinct files and
            a part manifest; ``merge(path)`` joins the parts, in the order of
            their numbers, once all are written), as ``stoker pack --part``
            does; n None: the count is not known yet (an engine's task),
            and is given to ``merge``. With ``overwrite`` a finished part is
            replaced whole, so a task run again leaves one copy of its
            records.
        resume: Arrow: continue an interrupted write of the same source
            (the stream is read again and the records the interrupted
            write kept are skipped; without one, an ordinary write).
        inputs: A short string naming what the source is made from
            (letters, digits and ``. _ : -``, e.g. a digest of the input
            files and options), recorded with the dataset: resume refuses
            an interrupted write that recorded other inputs.
        split: A DatasetDict: write only this split, into ``path``.
        progress: Show progress on stderr (records, or rows of an Arrow
            source; bytes, rate and, where the total is known, the time
            left): tqdm's bar when tqdm is installed, else a line redrawn in
            place. None: on a terminal or in a notebook only; False: never;
            True: always.
        format_version: 0 (the default) writes format version 2 where
            every field has a fixed shape and none is compressed (records
            are then found by arithmetic, without an index entry each) and
            version 1 otherwise; 1 always writes version 1, which stoker
            releases before version 2 also read; 2 insists on version 2
            (InvalidArgument for a schema it cannot hold).

    Returns:
        The number of records written (a DatasetDict without ``split``: a
        dict of each split's).

    Raises:
        InvalidArgument: A source that does not fit (arrays of different
            lengths, a record unlike the first, a dtype that cannot be
            stored); the message names the record and the field.
        StokerError: The dataset exists (without overwrite) or cannot be
            written.
        TypeError: Arguments of the wrong type, a source of none of the
            kinds above, or Arrow options with a source that is not Arrow.
    """
    import json
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("path must be a str or os.PathLike")
    path = os.fspath(path)
    if split is not None and not _hf.is_dict(source):
        raise TypeError("split applies to a datasets.DatasetDict (the split to write)")
    if _hf.is_dict(source):
        if split is None:
            # One dataset a split, each the write of that split alone.
            opts = dict(overwrite=overwrite, shard_bytes=shard_bytes, align=align, sync=sync,
                        attrs=attrs, compress=compress, ragged=ragged, group_by=group_by,
                        order_by=order_by, fields=fields, static=static, part=part,
                        resume=resume, inputs=inputs, progress=progress,
                        format_version=format_version)
            return {name: write(os.path.join(path, name), ds, **opts)
                    for name, ds in source.items()}
        if split not in source:
            raise InvalidArgument(f"split {split!r}: the DatasetDict holds {sorted(source)}")
        source = source[split]
    # A Hugging Face dataset's Image and Audio columns (structs of the
    # file's bytes and path) become media fields, its rows records.
    hf_media = _hf.media_columns(source) if _hf.is_hf(source) else {}
    if hf_media:
        if group_by is not None or order_by is not None or static is not None:
            raise TypeError("group_by, order_by and static do not apply to a dataset with Image "
                            "or Audio columns")
        given = {k: v.type for k, v in (fields or {}).items()}
        fields = {k: _media.Image() if t == "image" else _media.Audio()
                  for k, t in {**hf_media, **given}.items()}
        source = _hf.media_records(source, hf_media)
    # Rows of an Arrow source, for the progress display, while the source
    # is still what the caller passed.
    media = _media.media_types(fields)
    if media and len(media) == len(fields or {}) and not hasattr(source, "__arrow_c_stream__"):
        fields = None  # (media fields only: records or a dict of columns)
    elif media:
        raise TypeError("stoker.Image() / stoker.Audio() fields are written from records (an "
                        "iterable of dicts) or a dict of columns, not with other fields= "
                        "entries or an Arrow source")
    rows = _arrow_rows(source) if _progress.wanted(progress) else None
    if _hf.is_hf(source):
        source = _hf.arrow(source)
    elif _hf.is_table(source):
        source = _hf.fixed_lists(source)
    attrs_json = json.dumps(attrs) if attrs is not None else None
    part_index, part_count = _part_args(part)
    what = f"write {os.path.basename(path.rstrip(os.sep)) or path}"
    source = _arrow_stream(source)
    original, batches = source, None
    if not isinstance(source, (dict, str, bytes, os.PathLike)) and \
            not hasattr(source, "__arrow_c_stream__") and hasattr(source, "__iter__"):
        # An iterable: of per-record dicts, or of record batches (the
        # first item says which).
        it = iter(source)
        first = next(it, None)
        if first is not None and not isinstance(first, Mapping) and (
                _pyarrow_kind(first) in ("RecordBatch", "Table")
                or hasattr(first, "__arrow_c_array__")):
            import pyarrow as pa
            if _pyarrow_kind(first) not in ("RecordBatch", "Table"):
                first = pa.record_batch(first)
            total = None
            if isinstance(source, (list, tuple)) and \
                    all(_pyarrow_kind(b) in ("RecordBatch", "Table") for b in source):
                total = sum(b.num_rows for b in source)
            batches = _Batches(first.schema, itertools.chain([first], it),
                               _progress.bar(what, total, "rows", progress))
            batches.path = path
            source = batches.reader()
        else:
            source = itertools.chain([] if first is None else [first], it)
    if resume and not hasattr(source, "__arrow_c_stream__"):
        raise TypeError("resume applies to Arrow sources (the stream is read again and the "
                        "records already written skipped)")
    if isinstance(source, dict):
        if not source:
            raise InvalidArgument("source has no fields")
        cols, types, specs = {}, {}, []
        for k, v in source.items():
            text = _text_column(v)
            if k in media:
                if text is None or text[0] != "binary":
                    raise TypeError(f"field '{k}' is a {media[k]} field: give it a list of the "
                                    "files' bytes")
                for i, x in enumerate(text[1]):
                    _media.check_record(k, media[k], x, i)
                text = (media[k], text[1])
            if text is not None:
                types[k], cols[k] = text
                specs.append(_field_spec(k, np.zeros(0, np.uint8), True, compress, types[k]))
                continue
            cols[k], types[k] = _time_type(_contig(v))
            # One record of the field, as an array: v[0] would give a NumPy
            # scalar for a 1-d v (native byte order, or a Python object for
            # an object array), hiding a dtype that cannot be stored.
            a = cols[k]
            if a.ndim:
                specs.append(_field_spec(k, a[0, ...] if len(a) else np.zeros(a.shape[1:], a.dtype),
                                         False, compress, types[k]))
        n = {len(v) for v in cols.values() if isinstance(v, list) or v.ndim}
        if len(n) > 1 or any(not isinstance(v, list) and v.ndim == 0 for v in cols.values()):
            raise InvalidArgument("every array of a dict source must have the same first "
                             f"dimension (one entry per record); got lengths {sorted(n)}")
        w = _stoker.Writer(path, specs, shard_bytes, align, bool(overwrite), bool(sync),
                           attrs_json, part_index, part_count, int(format_version))
        count = n.pop() if n else 0
        with _progress.bar(what, count, "records", progress) as shown:
            # The bytes of a record: a column's whole size shared evenly
            # (exact but for ragged text columns).
            size = sum(sum(x.nbytes for x in v) if isinstance(v, list) else v.nbytes
                       for v in cols.values())
            try:
                for i in range(count):
                    w.append([(v[i], 1 if v[i].ndim == 0 else v[i].shape[0])
                              for v in cols.values()])
                    if shown and (i & 63 == 63 or i + 1 == count):
                        shown.set(i + 1, size * (i + 1) // count)
                return w.finish()
            except BaseException:
                w.abort()
                raise
    if hasattr(source, "__arrow_c_stream__"):
        # A pyarrow reader's batches are checked against its schema even
        # without progress: its C stream gives each batch without its
        # types, and an int32 column where int64 was announced has the
        # same layout (the C writer checks what the layout shows).
        if batches is None and (_progress.wanted(progress)
                                or _pyarrow_kind(source) == "RecordBatchReader"):
            batches = _counted(source, what, rows, progress)
            if batches is not None:
                batches.path = path
                source = batches.reader()
        try:
            return _write_arrow(path, source, group_by, order_by, fields, compress, shard_bytes,
                                align, overwrite, sync, attrs_json, static, part_index,
                                part_count, resume, inputs, format_version)
        except StokerError:
            # The exception that stopped the stream in Python, as itself.
            if batches is not None and batches.error is not None:
                raise batches.error from None
            raise
        finally:
            if batches is not None:
                batches.display.close()
    if group_by is not None or order_by is not None or fields is not None or static is not None:
        raise TypeError("group_by, order_by, fields (other than stoker.Image() and "
                        "stoker.Audio()) and static apply to Arrow sources (objects with "
                        "__arrow_c_stream__: pyarrow tables and readers, polars frames)")
    if isinstance(source, (str, bytes, os.PathLike)) or not hasattr(source, "__iter__"):
        raise TypeError(_not_data_hint(source))
    it = iter(source)
    first = next(it, None)
    if first is None:
        raise InvalidArgument("source is empty: a dataset of an iterable needs one record to "
                         "learn its schema")
    if not isinstance(first, Mapping):
        raise TypeError(f"source is an iterable whose first item is a {type(first).__name__}, "
                        f"not a per-record dict; stoker.write takes {_ACCEPTED}")
    raw = [first]
    first_t = {k: _rec_value(v) for k, v in first.items()}
    types = {k: t for k, (_, t) in first_t.items()}
    first = {k: a for k, (a, _) in first_t.items()}
    second = next(it, None)
    if second is not None:
        raw.append(second)
        second = ({k: _rec_value(v)[0] for k, v in second.items()}
                  if isinstance(second, Mapping) else None)
    if ragged is None:
        ragged = {k for k, v in first.items()
                  if v.ndim and second is not None and k in second and second[k].ndim
                  and second[k].shape[0] != v.shape[0]}
    ragged = set(ragged) | {k for k, t in types.items() if t in ("string", "binary")}
    for k in media:
        if k not in types or types[k] != "binary":
            raise TypeError(f"field '{k}' is a {media[k]} field: each record must give the "
                            f"file's bytes" + ("" if k in types else " (the first has no such "
                                                                      "field)"))
    specs = [_field_spec(k, v, k in ragged, compress, media.get(k, types[k]))
             for k, v in first.items()]
    names = [s[0] for s in specs]
    schema = {k: (v.dtype, v.shape, k in ragged and v.ndim > 0, types[k])
              for k, v in first.items()}
    w = _stoker.Writer(path, specs, shard_bytes, align, bool(overwrite), bool(sync), attrs_json,
                       part_index, part_count, int(format_version))
    total = len(original) if isinstance(original, Sized) else None
    with _progress.bar(what, total, "records", progress) as shown:
        try:
            count = 0
            for rec in itertools.chain(raw, it):
                values = _values(rec, names, count, schema)
                for k, kind in media.items():
                    _media.check_record(k, kind, rec[k], count)
                w.append(values)
                count += 1
                if shown:
                    shown.update(1, sum(v.nbytes for v, _ in values))
            return w.finish()
        except BaseException:
            w.abort()
            raise


def _write_arrow(path, source, group_by, order_by, fields, compress, shard_bytes, align,
                 overwrite, sync, attrs_json, static=None, part_index=0, part_count=1,
                 resume=False, inputs=None, format_version=0):
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
            codec, level = _codec(name, compress)
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
    kind = None
    try:  # the order column's Arrow type, for order_note (pyarrow sources)
        kind = str(source.schema.field(order_by).type) if order_by else None
    except Exception:  # noqa: BLE001  (not pyarrow, or no such column: C says)
        pass
    capsule = source.__arrow_c_stream__()
    # `stoker pack` gives (digest, each input on a line): a refusal to
    # resume then names the input that changed.
    inputs, inputs_list = inputs if isinstance(inputs, tuple) else (inputs, None)
    n, report = _stoker.write_arrow(path, capsule, group_by, order_by, spec, shard_bytes, align,
                                    bool(overwrite), bool(sync), attrs_json, static, part_index,
                                    part_count, bool(resume), inputs, inputs_list,
                                    int(format_version))
    global last_order_report
    last_order_report = dict(report, group_by=group_by, order_by=order_by, type=kind)
    note = order_note(last_order_report)
    if note:
        import logging
        logging.getLogger("stoker").info("%s: %s", os.fspath(path), note)
    return n


# What the last Arrow pack with group_by and order_by found of its rows'
# order (stk_arrow_report, with the column's name and type); order_note()
# says it in words (stoker pack prints it).
last_order_report: Optional[Dict[str, Any]] = None


def order_note(r: Optional[Mapping[str, Any]]) -> Optional[str]:
    """A line on a grouped pack's order: its step, and the groups whose
    rows have gaps or repeat a value; None where there is nothing to say."""
    if not r or not r.get("group_by") or not r.get("order_by") or not r.get("step"):
        return None
    col = r["order_by"]
    unit = f" ({r['type']})" if r.get("type") else ""
    line = f"rows by '{col}', a step of {r['step']}{unit}"
    if r["gap_groups"]:
        line += (f"; {r['gap_groups']} of {r['groups']} groups have gaps ({r['gaps']} in all): "
                 f"a window across one spans more than its rows (Loader calendar=True keeps "
                 f"only windows of consecutive rows)")
    else:
        line += f"; no gaps in {r['groups']} groups"
    if r["repeat_groups"]:
        line += (f"; {r['repeat_groups']} groups repeat a value of '{col}' "
                 f"({r['repeats']} rows)")
    return line


_PARTS_OPEN = 2**32 - 1  # STK_PARTS_OPEN: the count is given to the merge
_MAX_PARTS = 99999


def _part_args(part):
    """(part_index, part_count) for the C writer from ``part``."""
    if part is None:
        return 0, 1
    if not isinstance(part, tuple) or len(part) != 2:
        raise TypeError("part must be a tuple (index, count), count an int or None")
    i, n = part
    for name, v in (("part index", i), ("part count", n)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
            raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    if n is None:
        if not 0 <= i < _MAX_PARTS:
            raise InvalidArgument(f"part index {i}: from 0 to {_MAX_PARTS - 1}")
        return int(i), _PARTS_OPEN
    if not 1 <= n <= _MAX_PARTS or not 0 <= i < n:
        raise InvalidArgument(f"part {i} of {n}: parts are numbered 0..count-1, count from 1 "
                              f"to {_MAX_PARTS}")
    return int(i), int(n)


def merge(path: PathLike, parts: Optional[int] = None) -> None:
    """Joins the parts written into ``path`` (``write(..., part=(i, n))``,
    ``stoker pack --part``) into one dataset: a manifest over their shards,
    records in the order of the parts; no shard is rewritten.

    Args:
        path: The dataset directory holding the parts.
        parts: How many parts there are: required for parts written with
            an unknown count (``part=(i, None)``); exactly parts 0..parts-1
            must be there, and a part numbered past them (left by another
            write) is refused rather than merged in. None: the count the
            parts record.

    Raises:
        StokerError: A part is missing or unfinished (named), the parts
            disagree on their schema, or ``path`` already holds a merged
            dataset.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("path must be a str or os.PathLike")
    if parts is not None and (isinstance(parts, bool) or not isinstance(parts, (int, np.integer))
                              or not 1 <= parts <= _MAX_PARTS):
        raise InvalidArgument(f"parts must be an int from 1 to {_MAX_PARTS}, not {parts!r}")
    _stoker.merge(os.fspath(path), 0 if parts is None else int(parts))


def _values(rec, names, i, specs=None):
    """A record's values for Writer.append, checked against the schema the
    first record set (specs: name -> (dtype, shape, ragged, type))."""
    if not isinstance(rec, Mapping):
        raise TypeError(f"record {i} is a {type(rec).__name__}, not a dict of the record's "
                        "fields")
    if set(rec) != set(names):
        raise InvalidArgument(f"record {i}: fields {sorted(rec)} differ from the first record's "
                              f"{sorted(names)}")
    out = []
    for k in names:
        v, t = _rec_value(rec[k])
        if specs is not None:
            dt, shape, ragged, want = specs[k]
            if t != want:
                raise InvalidArgument(f"record {i}: field '{k}' is {t or v.dtype}, but the first "
                                      f"record's is {want or dt}: every record must have the "
                                      "same types")
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
