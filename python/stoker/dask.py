"""Writing a stoker dataset from a Dask DataFrame, one part per partition,
in parallel on the Dask cluster.

    import dask.dataframe as dd, stoker.dask
    ddf = dd.read_parquet("basins/*.parquet")
    stoker.dask.write(ddf, "basins.stk", group_by="basin", order_by="date",
                      fields={"x": ["f1", "f2"], "y": ["q"]})

With ``group_by``, Dask's own shuffle brings each group's rows into one
partition first (``shuffle=False`` skips it for data already partitioned
by the key; a group found in two partitions is then refused, naming it).
Each partition becomes one part of the dataset (every worker must see the
output path: a shared file system); the parts are merged once every task
has finished, and the dataset appears at its path whole.  A task that Dask
runs again (a worker lost) rewrites its part whole, so the dataset holds
each record once.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence, Union

from . import _engine, _s3
from ._types import PathLike

__all__ = ["write"]


def _part(df: Any, index: int, count: int, staging: str, opts: _engine.PartOptions):
    import pyarrow as pa
    table = pa.Table.from_pandas(df, preserve_index=False)
    return _engine.write_part(staging, table, index, count, opts)


def write(ddf: Any, path: PathLike, *, group_by: Optional[str] = None,
          order_by: Optional[str] = None,
          fields: Optional[Mapping[str, Union[str, Sequence[str]]]] = None,
          compress: Optional[Mapping[str, Any]] = None,
          static: Optional[Union[str, Sequence[str]]] = None, shard_bytes: int = 256 << 20,
          overwrite: bool = False, shuffle: bool = True, sync: bool = True,
          attrs: Optional[Mapping[str, Any]] = None, progress: Optional[bool] = None,
          npartitions: Optional[int] = None) -> int:
    """Writes ``ddf`` as a stoker dataset at ``path``, a part per partition.

    Args:
        ddf: A Dask DataFrame; each row a record, or with ``group_by`` each
            group one record (as ``stoker.write`` of an Arrow table).
        path: The dataset directory, on a file system every worker sees;
            or ``s3://bucket/prefix``: each task uploads its part, and the
            manifest goes last (refused where a dataset is, unless
            ``overwrite``, which replaces its objects in place).
        group_by, order_by, fields, compress, static, shard_bytes, sync,
            attrs: As for ``stoker.write`` with an Arrow source.  One difference:
            ``static`` must name the static fields (none by default), since
            each partition sees only its own groups.
        overwrite: Replace a dataset at ``path`` once the new one is
            complete (until then the old one stays readable).
        shuffle: With ``group_by``, bring each group's rows into one
            partition with Dask's shuffle first (``ddf.shuffle(on=...)``).
            False: the partitions already hold whole groups (checked: a
            group in two partitions is refused and nothing is written).
        progress: Show on stderr the parts finished of all, their records
            and bytes, the rate and the time left (tqdm's bar, or a line
            redrawn in place), read from the parts' directory as the tasks
            finish them (nothing for an s3:// path). None: on a terminal or
            in a notebook only; False: never; True: always.
        npartitions: With the shuffle, the partitions (and so the parts)
            it makes; default: as many as ``ddf`` has. Each part holds its
            own shards, so parts of tens of megabytes or more are best:
            thousands of small files read one per partition are better
            shuffled into fewer.

    Returns:
        The number of records written.

    Raises:
        InvalidArgument: A group split between partitions, or options that
            do not fit the data (named as stoker.write names them).
        StokerError: ``path`` holds a dataset (without ``overwrite``), or a
            part could not be written.
    """
    import dask
    if isinstance(static, str):
        static = [static]
    opts = _engine.PartOptions(group_by, order_by, fields, compress, static, shard_bytes, sync,
                               attrs)
    path = path if _s3.is_url(path) else os.path.abspath(os.fspath(path))
    if group_by is not None and group_by not in ddf.columns:
        from ._errors import InvalidArgument
        raise InvalidArgument(f"group_by: {group_by!r} is not a column of the DataFrame "
                              f"({', '.join(map(str, ddf.columns))})")
    if group_by is not None and shuffle:
        ddf = ddf.shuffle(on=group_by, npartitions=npartitions or ddf.npartitions)
    staging = _engine.start(path, overwrite)
    parts = ddf.to_delayed()
    count = len(parts)
    tasks = [dask.delayed(_part)(p, i, count, staging, opts) for i, p in enumerate(parts)]
    try:
        with _engine.watch(staging, count, path, progress):
            results = _compute(tasks)
    except BaseException:
        _engine.discard(staging)
        raise
    return _engine.finish(staging, path, results, count, group_by, overwrite)


def _compute(tasks):
    import dask
    try:
        from distributed import default_client
        client = default_client()
    except (ImportError, ValueError):
        client = None
    if client is not None:
        return client.gather(client.compute(tasks))
    return list(dask.compute(*tasks))
