"""Sources of stoker.write that are not plain Arrow streams: Hugging Face
``datasets`` objects (through their Arrow tables, never their Python
rows), and Arrow tables whose lists of lists can be fields of fixed inner
dimensions.  Nothing here imports ``datasets``: a source is recognised by
the module its type comes from."""
from __future__ import annotations

from typing import Any, Optional

BATCH_ROWS = 65536  # rows taken (or read from an IterableDataset) at a time


def _module(x: Any) -> str:
    return (type(x).__module__ or "").split(".")[0]


def is_hf(source: Any) -> bool:
    """A ``datasets`` object (Dataset, IterableDataset, their dicts, or a
    ``datasets.table.Table``)."""
    return _module(source) == "datasets"


def is_dict(source: Any) -> bool:
    """A DatasetDict or IterableDatasetDict."""
    return is_hf(source) and isinstance(source, dict)


def is_table(source: Any) -> bool:
    return _module(source) == "pyarrow" and type(source).__name__ == "Table"


def arrow(source: Any) -> Any:
    """A ``datasets`` Dataset, IterableDataset or Table as an Arrow source
    (an object with ``__arrow_c_stream__``)."""
    import datasets
    if isinstance(source, datasets.table.Table):
        return fixed_lists(source.table)
    if isinstance(source, datasets.Dataset):
        return _dataset(source)
    if isinstance(source, datasets.IterableDataset):
        return _iterable(source)
    raise TypeError(f"a datasets.{type(source).__name__} cannot be written: stoker.write takes "
                    "a datasets.Dataset, IterableDataset or DatasetDict")


def media_columns(source: Any) -> dict:
    """A Dataset's or IterableDataset's Image and Audio columns: {name:
    "image" | "audio"} (top-level features only)."""
    import datasets
    feats = getattr(source, "features", None) or {}
    return {k: "image" if isinstance(f, datasets.Image) else "audio"
            for k, f in feats.items() if isinstance(f, (datasets.Image, datasets.Audio))}


def media_records(source: Any, media: dict) -> Any:
    """The rows of a dataset with Image or Audio columns as per-record dicts
    for stoker's media fields: each such column's encoded file (its
    ``bytes``, or the file at its ``path`` where the dataset keeps only
    that), never decoded; the other columns as they are stored."""
    import pyarrow as pa
    if hasattr(source, "data") and hasattr(source.data, "table"):
        table = source.data.table
        indices = getattr(source, "_indices", None)
        batches = (table.take(indices.column(0).slice(i, BATCH_ROWS)) if indices is not None
                   else table.slice(i, BATCH_ROWS)
                   for i in range(0, len(indices) if indices is not None else table.num_rows,
                                  BATCH_ROWS))
    else:  # an IterableDataset: its rows undecoded, a batch at a time
        batches = (pa.Table.from_pylist(b) for b in
                   source.decode(False).iter(batch_size=BATCH_ROWS))
    for t in batches:
        for row in t.to_pylist():
            for k in media:
                v = row[k]
                if isinstance(v, dict):
                    data = v.get("bytes")
                    if data is None and v.get("path"):
                        with open(v["path"], "rb") as f:
                            data = f.read()
                    row[k] = data
            yield row


def _dataset(ds: Any) -> Any:
    """The dataset's rows, in its order: its Arrow table as it lies (in
    memory or mapped from its cache files; its format, e.g. with_format,
    plays no part), taken through its indices mapping where select,
    shuffle, filter or a split made one (a batch of rows at a time, so that
    a shuffled dataset is never copied whole)."""
    import pyarrow as pa
    table = fixed_lists(ds.data.table, types=array_types(ds.features))
    indices = getattr(ds, "_indices", None)
    if indices is None:
        return table
    idx = indices.column(0)

    def batches():
        for start in range(0, len(idx), BATCH_ROWS):
            yield from table.take(idx.slice(start, BATCH_ROWS)).to_batches()

    return pa.RecordBatchReader.from_batches(table.schema, batches())


def _iterable(ds: Any) -> Any:
    """An IterableDataset's rows as Arrow batches, each batch cast to the
    first one's schema: its arrow format where its rows come from Arrow
    (to_iterable_dataset, files), else its Python rows encoded with its
    features (a generator's rows, whose first batch alone would not know a
    list's type if its lists were empty)."""
    import pyarrow as pa
    features = getattr(ds, "features", None)
    arrow_backed = getattr(getattr(ds, "_ex_iterable", None), "iter_arrow", None) is not None
    if arrow_backed or features is None:
        it = iter(ds.with_format("arrow").iter(batch_size=BATCH_ROWS))
    else:
        schema = features.arrow_schema
        it = (pa.Table.from_pydict(features.encode_batch(b), schema=schema)
              for b in ds.with_format(None).iter(batch_size=BATCH_ROWS))
    first = next(it, None)
    if first is None:
        features = getattr(ds, "features", None)
        if features is None:
            from ._errors import InvalidArgument
            raise InvalidArgument("the IterableDataset yields no rows and declares no features: "
                                  "there is no schema to write")
        return pa.RecordBatchReader.from_batches(features.arrow_schema, iter(()))
    first = fixed_lists(first, types=array_types(getattr(ds, "features", None)))
    schema = first.schema

    def batches():
        yield from first.to_batches()
        for t in it:
            yield from fixed_lists(t, schema).to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches())


def _storage(col: Any) -> Any:
    """A chunked column without its extension type (HF's Array2D...)."""
    import pyarrow as pa
    if not isinstance(col.type, pa.ExtensionType):
        return col
    return pa.chunked_array([c.storage for c in col.chunks], type=col.type.storage_type)


def _inner(t: Any, vals: Any) -> Any:
    """The type that elements `vals` (of type t, inside a list) take as a
    field: variable lists of one length throughout become fixed-size lists,
    recursively; anything else stays."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if isinstance(t, pa.ExtensionType):
        return _inner(t.storage_type, vals.storage)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_inner(t.value_type, vals.flatten()), t.list_size)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if len(vals) == 0 or vals.null_count:
            return t
        lens = pc.min_max(pc.list_value_length(vals)).as_py()
        if lens["min"] != lens["max"] or not lens["min"]:
            return t  # (ragged inside: the packer says why it cannot)
        return pa.list_(_inner(t.value_type, vals.flatten()), lens["min"])
    return t


def _listlike(t: Any) -> bool:
    import pyarrow as pa
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _nested(t: Any) -> bool:
    """A list (of any kind) of lists, under any extension type."""
    import pyarrow as pa
    if isinstance(t, pa.ExtensionType):
        t = t.storage_type
    if not _listlike(t):
        return False
    v = t.value_type
    return _listlike(v.storage_type if isinstance(v, pa.ExtensionType) else v)


def _outer(t: Any, col: Any) -> Any:
    import pyarrow as pa
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        flat = col.flatten()
        inner = _inner(t.value_type, flat)
        if inner == t.value_type:
            return t
        if pa.types.is_fixed_size_list(t):
            return pa.list_(inner, t.list_size)
        return pa.large_list(inner) if pa.types.is_large_list(t) else pa.list_(inner)
    return t


def array_types(features: Any) -> dict:
    """{column: Arrow type} for the columns of HF ArrayND features: nested
    fixed-size lists of their shape (the first dimension a list where it
    is None), so that a fixed shape packs as a fixed field."""
    return _nd_types({name: (type(f).__name__, f.shape, f.dtype)
                      for name, f in (features or {}).items()
                      if type(f).__name__.startswith("Array")})


def _nd_types(specs: dict) -> dict:
    import pyarrow as pa
    out = {}
    for name, (kind, shape, dtype) in specs.items():
        if kind not in ("Array2D", "Array3D", "Array4D", "Array5D"):
            continue
        t = pa.type_for_alias(dtype)
        for k, d in enumerate(reversed(shape)):
            t = pa.list_(t) if d is None and k == len(shape) - 1 else pa.list_(t, d)
        out[name] = t
    return out


def _meta_types(schema: Any) -> dict:
    """array_types from the features that a file written by ``datasets``
    records in its schema's metadata (without importing ``datasets``)."""
    import json
    try:
        feats = json.loads((schema.metadata or {})[b"huggingface"])["info"]["features"]
        return _nd_types({n: (f.get("_type"), tuple(f["shape"]), f["dtype"])
                          for n, f in feats.items() if isinstance(f, dict) and "shape" in f})
    except (KeyError, ValueError, TypeError):
        return {}


def fixed_lists(table: Any, schema: Optional[Any] = None, types: Optional[dict] = None) -> Any:
    """The table with each list-of-lists column whose inner lists have one
    length (HF's Array2D to Array5D, a Sequence of fixed Sequences) cast to
    lists of fixed-size lists, which pack as fields of shape [*, k, ...]
    (or [n, k, ...]); with `schema`, cast to that schema's types instead;
    `types` gives some columns' types outright (array_types)."""
    import pyarrow as pa
    cols, fields, changed = [], [], False
    for i, f in enumerate(table.schema):
        col = table.column(i)
        if schema is not None:
            want = schema.field(i).type
        elif types and f.name in types:
            want = types[f.name]
        elif _nested(col.type):
            # (Only lists of lists are looked into: combining a column's
            # chunks copies it.)
            base = _storage(col)
            want = _outer(base.type, base.combine_chunks()) if len(base) else base.type
        else:
            want = col.type
        if want != col.type:
            col = _storage(col).cast(want)
            f = f.with_type(want)
            changed = True
        cols.append(col)
        fields.append(f)
    if not changed:
        return table
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def ipc_files(paths: Any) -> Any:
    """The Arrow IPC files that `paths` name, in order, and their
    identities (path, device, inode, size, mtime) for resume: a directory
    gives its ``.arrow`` files at any depth, sorted (a Hugging Face
    ``save_to_disk`` directory's shards in order); a file or pattern gives
    its matches.  A DatasetDict's directory is refused: it holds several
    datasets (name one split's directory)."""
    import glob
    import os
    from ._errors import InvalidArgument, NotFound
    files = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            if os.path.exists(os.path.join(p, "dataset_dict.json")):
                raise InvalidArgument(f"{p} holds a DatasetDict (several splits): pack one "
                                      f"split's directory, e.g. {os.path.join(p, 'train')}")
            hits = sorted(glob.glob(os.path.join(p, "**", "*.arrow"), recursive=True))
            if not hits:
                raise NotFound(f"{p}: no .arrow files there")
        else:
            hits = sorted(glob.glob(p))
            if not hits:
                raise NotFound(f"{p}: no such file")
        files += hits
    ident = []
    for f in files:
        st = os.stat(f)
        ident.append((os.path.abspath(f), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return files, ident


def ipc_reader(files: Any) -> Any:
    """One Arrow stream over the record batches of Arrow IPC files, each
    mapped, not read: the streaming format (what ``datasets`` writes) or
    the file format (Feather v2, ``pyarrow.ipc.new_file``), told apart by
    the file's magic.  Every file must have the first one's schema."""
    import pyarrow as pa

    def open_one(f):
        src = pa.memory_map(f)
        magic = src.read(6)
        src.seek(0)
        if magic == b"ARROW1":
            r = pa.ipc.open_file(src)
            return r.schema, (r.get_batch(i) for i in range(r.num_record_batches))
        r = pa.ipc.open_stream(src)
        return r.schema, iter(r)

    schema, first = open_one(files[0])

    def raw():
        yield from first
        for f in files[1:]:
            s, bs = open_one(f)
            if not s.equals(schema, check_metadata=False):
                from ._errors import InvalidArgument
                raise InvalidArgument(f"{f}: its schema differs from {files[0]}'s")
            yield from bs

    # The first rows decide which lists of lists become fixed-size lists
    # (fixed_lists); every later batch is cast to the same types.
    it = (b for b in raw() if b.num_rows)
    head = next(it, None)
    if head is None:
        return pa.RecordBatchReader.from_batches(schema, iter(()))
    head = fixed_lists(pa.Table.from_batches([head]), types=_meta_types(schema))
    target = head.schema

    def batches():
        yield from head.to_batches()
        for b in it:
            yield from fixed_lists(pa.Table.from_batches([b]), target).to_batches()

    return pa.RecordBatchReader.from_batches(target, batches())
