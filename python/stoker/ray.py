"""Writing a stoker dataset from Ray Data, one part per write task.

    import ray, stoker.ray
    ds = ray.data.read_parquet("basins/")
    stoker.ray.write(ds, "basins.stk", group_by="basin", order_by="date")
    # or, where the blocks already hold whole groups:
    ds.write_datasink(stoker.ray.Datasink("basins.stk", group_by="basin"))

``stoker.ray.write`` brings each group's rows together with Ray Data's own
groupby first; the Datasink writes what it is given, a part per write task
(every task must see the output path: a shared file system), and once all
tasks have succeeded checks that no group was split between tasks, merges
the parts and puts the dataset at its path whole.  A task Ray runs again
rewrites its part whole, so the dataset holds each record once.  A write
that fails leaves nothing at the path (with overwrite, the old dataset).
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from . import _engine, _s3
from ._types import PathLike

try:
    from ray.data import Datasink as _RayDatasink
except ImportError as e:  # pragma: no cover (a clear error at import)
    raise ImportError("stoker.ray needs Ray Data (pip install 'ray[data]')") from e

__all__ = ["Datasink", "write"]


class Datasink(_RayDatasink):
    """A Ray Data datasink writing a stoker dataset at ``path``.

    Args:
        path: The dataset directory, on a file system every task sees; or
            ``s3://bucket/prefix``: each task uploads its part, and the
            manifest goes last (refused where a dataset is, unless
            ``overwrite``, which replaces its objects in place).
        group_by, order_by, fields, compress, static, shard_bytes, sync,
            attrs: As for ``stoker.write`` with an Arrow source.  One difference:
            ``static`` must name the static fields (none by default), since
            each task sees only its own groups.
        overwrite: Replace a dataset at ``path`` once the new one is
            complete.
    """

    def __init__(self, path: PathLike, *, group_by: Optional[str] = None,
                 order_by: Optional[str] = None,
                 fields: Optional[Mapping[str, Union[str, Sequence[str]]]] = None,
                 compress: Optional[Mapping[str, Any]] = None,
                 static: Optional[Union[str, Sequence[str]]] = None,
                 shard_bytes: int = 256 << 20, overwrite: bool = False, sync: bool = True,
                 attrs: Optional[Mapping[str, Any]] = None):
        if isinstance(static, str):
            static = [static]
        self.path = path if _s3.is_url(path) else os.path.abspath(os.fspath(path))
        self.overwrite = overwrite
        self.opts = _engine.PartOptions(group_by, order_by, fields, compress, static,
                                        shard_bytes, sync, attrs)
        # Known before the tasks are planned (the datasink travels to them);
        # an s3:// output is its own staging place.
        self.staging = self.path if _s3.is_url(self.path) else _engine.staging_path(self.path)
        self.records = 0

    def get_name(self) -> str:
        return "stoker"

    @property
    def supports_distributed_writes(self) -> bool:
        return True

    def on_write_start(self, *args: Any, **kwargs: Any) -> None:
        _engine.start(self.path, self.overwrite)

    def write(self, blocks: Iterable[Any], ctx: Any) -> Any:
        import pyarrow as pa
        from ray.data.block import BlockAccessor
        tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
        tables = [t for t in tables if t.num_columns]
        if not tables:
            return (ctx.task_idx, 0, [], None)
        table = pa.concat_tables(tables, promote_options="default")
        index, records, keys = _engine.write_part(self.staging, table, ctx.task_idx, None,
                                                  self.opts)
        return (index, records, keys, table.schema)

    def on_write_complete(self, write_result: Any) -> None:
        returns = list(write_result.write_returns)
        # A task handed no rows wrote no part (it had no schema): its empty
        # part is written now, with another part's schema, so that parts
        # keep their tasks' numbers.
        schema = next((r[3] for r in returns if r[3] is not None), None)
        for r in returns:
            if r[3] is None and schema is not None:
                _engine.write_part(self.staging, schema.empty_table(), r[0], None, self.opts)
        results = [r[:3] for r in returns]
        if schema is None:
            _engine.discard(self.staging)
            from ._errors import InvalidArgument
            raise InvalidArgument(f"{self.path}: the dataset to write has no rows")
        self.records = _engine.finish(self.staging, self.path, results, len(results),
                                      self.opts.group_by, self.overwrite)

    def on_write_failed(self, error: Exception) -> None:
        _engine.discard(self.staging)


def write(ds: Any, path: PathLike, *, group_by: Optional[str] = None,
          num_partitions: Optional[int] = None, progress: Optional[bool] = None,
          **kwargs: Any) -> int:
    """Writes the Ray Dataset ``ds`` as a stoker dataset at ``path``; with
    ``group_by``, Ray Data's groupby brings each group's rows into one block
    first, in ``num_partitions`` partitions, each one write task and one
    part (default: the cluster's CPUs; Ray's own default, 200, would make
    mostly empty parts of a small dataset, each a write and an upload; ask
    for more where a partition would not fit a worker's memory).

    ``progress`` shows on stderr the parts finished (of all, with
    ``group_by``), their records and bytes, the rate and the time left
    (tqdm's bar, or a line redrawn in place; Ray Data's own bars are off
    meanwhile), read from the parts' directory as the tasks finish them
    (nothing for an s3:// path). None: on a terminal or in a notebook only;
    False: never (Ray Data's bars as Ray is set); True: always.  Other
    keyword arguments are the Datasink's.  Returns the records written."""
    if group_by is not None:
        if num_partitions is None:
            import ray
            num_partitions = max(1, int(ray.cluster_resources().get("CPU", 1)))
        ds = ds.groupby(group_by, num_partitions=num_partitions).map_groups(
            lambda t: t, batch_format="pyarrow")
    sink = Datasink(path, group_by=group_by, **kwargs)
    from . import _progress
    if not _progress.wanted(progress):
        ds.write_datasink(sink)
        return sink.records
    from ray.data import DataContext
    ctx = DataContext.get_current()
    bars = ctx.enable_progress_bars
    ctx.enable_progress_bars = False  # (one display at a time on the terminal)
    try:
        with _engine.watch(sink.staging, num_partitions if group_by is not None else None,
                           sink.path, progress):
            ds.write_datasink(sink)
    finally:
        ctx.enable_progress_bars = bars
    return sink.records
