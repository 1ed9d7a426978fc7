"""What the engine writers (stoker.dask, stoker.ray) share: one part of a
dataset per task, written into a staging directory beside the dataset, the
group keys each part holds checked for groups split between parts, and the
parts merged and the staging directory put in the dataset's place once
every task has finished.

Why a staging directory: a dataset appears at its path whole or not at
all (a rename of the merged directory), a failed or abandoned write leaves
nothing at the path, and with overwrite the old dataset stays readable
until the new one is complete.  Why parts are idempotent: a task run again
(a worker lost, a retry) rewrites its own part whole (the writer's
overwrite of a finished part), so the merged dataset holds each task's
records once.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _s3
from ._errors import InvalidArgument, StokerError
from ._types import PathLike
from ._write import merge, write


class PartOptions:
    """The options every part is written with (picklable: it travels to
    the engine's workers)."""

    def __init__(self, group_by: Optional[str], order_by: Optional[str],
                 fields: Optional[Mapping[str, Union[str, Sequence[str]]]],
                 compress: Optional[Mapping[str, Any]], static: Optional[Sequence[str]],
                 shard_bytes: int, sync: bool, attrs: Optional[Mapping[str, Any]]):
        if group_by is None and (order_by is not None or static is not None):
            raise InvalidArgument("order_by and static need group_by")
        # Which fields are constant within every group is a property of all
        # the data, and each part sees only its own: left to the parts, one
        # could find a field static that another does not, and their
        # schemas would differ.  So nothing is static unless named.
        if group_by is not None and static is None:
            static = []
        self.group_by, self.order_by, self.fields = group_by, order_by, fields
        self.compress, self.static, self.shard_bytes = compress, static, shard_bytes
        self.sync, self.attrs = sync, attrs


def staging_path(path: PathLike) -> str:
    """The directory the parts of `path` are written into."""
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(path.rstrip(os.sep))
    return os.path.join(parent, f".{name}.stoker-parts")


def start(path: PathLike, overwrite: bool) -> str:
    """Checks that `path` may be written and makes an empty staging
    directory (what an earlier write left there is removed: its parts are
    never merged into this one).  An s3:// path is its own staging place:
    returns it, with the part manifests an earlier write left removed."""
    if _s3.is_url(path):
        return _s3_start(path, overwrite)
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(os.path.join(path, "manifest.json")) and not overwrite:
        raise StokerError(f"{path}: a dataset is already there (pass overwrite=True to "
                          "replace it once the new one is complete)")
    if os.path.exists(path) and not os.path.isdir(path):
        raise StokerError(f"{path}: exists and is not a directory")
    if os.path.isdir(path) and not overwrite and os.listdir(path):
        raise StokerError(f"{path}: a directory that is not empty (and holds no dataset); "
                          "remove it or write elsewhere")
    staging = staging_path(path)
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    return staging


def write_part(staging: str, table: Any, index: int, count: Optional[int],
               opts: PartOptions) -> Tuple[int, int, List[Any]]:
    """Writes part `index` (of `count`; None: given at the merge) of an
    Arrow table; returns (index, records, the group keys it holds).  To an
    s3:// staging place: written locally, then uploaded (shards first, the
    part manifest last)."""
    if _s3.is_url(staging):
        tmp = tempfile.mkdtemp(prefix="stoker-part-")
        try:
            result = write_part(tmp, table, index, count, opts)
            _s3_upload_part(tmp, staging, index)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return result
    records = write(staging, table, overwrite=True, shard_bytes=opts.shard_bytes,
                    sync=opts.sync, attrs=opts.attrs, compress=opts.compress,
                    group_by=opts.group_by, order_by=opts.order_by, fields=opts.fields,
                    static=opts.static, part=(index, count), progress=False)
    keys: List[Any] = []
    if opts.group_by is not None and table.num_rows:
        import pyarrow.compute as pc
        keys = pc.unique(table.column(opts.group_by)).to_pylist()
    return index, records, keys


def watch(staging: str, parts: Optional[int], path: PathLike,
          progress: Optional[bool]) -> Any:
    """Shows the write's progress while the engine's tasks run (a with-block
    around them): the parts finished in `staging`, of `parts` (None:
    unknown), their records and the bytes of their shards, read from the
    directory every 0.1 s (a part's manifest appears when it is complete).
    An s3:// staging place shows nothing."""
    from . import _progress
    if _s3.is_url(staging) or not _progress.wanted(progress):
        return _progress.Poll(_progress.bar("", progress=False), tuple)
    seen: Dict[str, int] = {}

    def finished() -> Tuple[int, int, str]:
        import json
        if not os.path.isdir(staging):
            # Merged, and put at its path: the dataset's totals.
            names = os.listdir(path)
            with open(os.path.join(path, "manifest.json")) as f:
                records = int(json.load(f)["records"])
            shards = [n for n in names if n.startswith("part-") and n.endswith(".stk")]
            return (len({n[:len("part-00000")] for n in shards}),
                    sum(os.stat(os.path.join(path, n)).st_size for n in shards),
                    f"{records:,} records")
        names = os.listdir(staging)
        for n in names:
            if n.startswith("part-") and n.endswith(".json") and n not in seen:
                try:
                    with open(os.path.join(staging, n)) as f:
                        seen[n] = int(json.load(f)["records"])
                except (OSError, ValueError, KeyError):
                    pass  # being replaced: read at the next poll
        done = {n[:len("part-00000")] for n in seen}
        size = 0
        for n in names:
            if n[:len("part-00000")] in done and n.endswith(".stk"):
                try:
                    size += os.stat(os.path.join(staging, n)).st_size
                except OSError:
                    pass
        return len(seen), size, f"{sum(seen.values()):,} records"

    name = os.path.basename(os.fspath(path).rstrip("/"))
    return _progress.Poll(_progress.bar(f"write {name}", parts, "parts", progress), finished)


def check_groups(results: Sequence[Tuple[int, int, List[Any]]], group_by: Optional[str]) -> None:
    """Refuses parts that share a group key: that group's rows were split
    between them and would become two records."""
    if group_by is None:
        return
    seen: Dict[Any, int] = {}
    for index, _, keys in sorted(results, key=lambda r: r[0]):
        for k in keys:
            if k in seen:
                raise InvalidArgument(
                    f"group {group_by}={k!r} has rows in part {seen[k]} and in part {index}: "
                    "a group must lie in one partition (block) to become one record; let "
                    "the engine bring each group together first (stoker.dask.write with "
                    "shuffle=True, stoker.ray.write, or the engine's own groupby or "
                    "shuffle on the key)")
            seen[k] = index


def finish(staging: str, path: PathLike, results: Sequence[Tuple[int, int, List[Any]]],
           count: int, group_by: Optional[str], overwrite: bool) -> int:
    """Checks the parts, merges them and puts the dataset at `path`;
    returns its records.  On any error the staging directory is removed
    and `path` is left as it was."""
    if _s3.is_url(path):
        return _s3_finish(path, results, count, group_by)
    path = os.path.abspath(os.fspath(path))
    try:
        indexes = sorted(r[0] for r in results)
        if indexes != list(range(count)):
            raise StokerError(f"{path}: the write tasks reported parts {indexes[:10]}..., "
                              f"not 0..{count - 1}")
        check_groups(results, group_by)
        merge(staging, parts=count)
        old = None
        if os.path.exists(path):
            if not overwrite and os.listdir(path):
                raise StokerError(f"{path}: appeared while the parts were written")
            old = staging + ".old"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(path, old)
        os.rename(staging, path)
        _sync_dir(os.path.dirname(path))
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return sum(r[1] for r in results)


def _sync_dir(d: str) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def discard(staging: str) -> None:
    """Removes what a failed write staged.  At an s3:// prefix: its part
    objects, unless the prefix holds a dataset (whose objects may share
    their names: overwrite in place)."""
    if not _s3.is_url(staging):
        shutil.rmtree(staging, ignore_errors=True)
        return
    from pyarrow import fs as pafs
    s3, k = _s3.filesystem(), _s3.key(staging)
    if s3.get_file_info(k + "/manifest.json").type == pafs.FileType.File:
        return
    _delete(staging, [n for n in _names(s3, k) if n.startswith("part-")])


# ---- an s3:// output ----
#
# Object stores have no rename: the parts' shards are uploaded under their
# final names beside the dataset's manifest-to-be, each part's manifest
# after its shards; the merge reads the part manifests back, builds the
# manifest locally (stoker.merge, which never opens a shard) and uploads
# it last, so a reader sees no dataset at the prefix until every shard is
# there.  Without overwrite a prefix holding a dataset is refused; with it,
# objects are replaced in place (as `stoker push --replace`): readers of
# the old version then fail on their pinned ETags, and a failed write can
# leave the old version unreadable.  A new prefix per version is the safe
# way.


def _s3_list(fs, prefix):
    from pyarrow import fs as pafs
    return [i for i in fs.get_file_info(pafs.FileSelector(prefix, recursive=False,
                                                          allow_not_found=True))
            if i.type == pafs.FileType.File]


def _names(s3, prefix):
    return [i.path.rsplit("/", 1)[-1] for i in _s3_list(s3, prefix)]


def _delete(url, names):
    """Deletes objects url/name with stoker's client (pyarrow's delete
    makes a "directory" marker object, which S3-like servers such as
    rclone refuse)."""
    from . import _stoker
    if names:
        _stoker.push_files(None, names, url)


def _s3_start(url: str, overwrite: bool) -> str:
    from pyarrow import fs as pafs
    s3, k = _s3.filesystem(), _s3.key(url)
    if s3.get_file_info(k + "/manifest.json").type == pafs.FileType.File and not overwrite:
        raise StokerError(f"{url}: a dataset is already there (write each version to a new "
                          "prefix, or pass overwrite=True to replace its objects in place)")
    # An earlier write's part manifests: never merged into this one.
    _delete(url, [n for n in _names(s3, k) if n.startswith("part-") and n.endswith(".json")])
    return url


def _s3_upload_part(local: str, url: str, index: int) -> None:
    from . import _stoker
    names = sorted(n for n in os.listdir(local) if n.startswith(f"part-{index:05d}-"))
    # (Uploaded by stoker's own client, the loader's: pyarrow's streams
    # every object as a multipart upload without lengths, which S3-like
    # servers such as rclone refuse.)
    _stoker.push_files(local, names, url)
    _stoker.push_files(local, [f"part-{index:05d}.json"], url)


def _s3_finish(url: str, results, count: int, group_by: Optional[str]) -> int:
    s3, k = _s3.filesystem(), _s3.key(url)
    indexes = sorted(r[0] for r in results)
    try:
        if indexes != list(range(count)):
            raise StokerError(f"{url}: the write tasks reported parts {indexes[:10]}..., "
                              f"not 0..{count - 1}")
        check_groups(results, group_by)
    except BaseException:
        discard(url)
        raise
    tmp = tempfile.mkdtemp(prefix="stoker-merge-")
    try:
        # The part manifests by name (the tasks reported 0..count-1), not
        # by listing the prefix, which holds every part's shards too: with
        # rclone serve s3 and pyarrow's client, a merge of 200 parts was
        # seen waiting on such a listing for over ten minutes.
        parts = [f"{k}/part-{i:05d}.json" for i in range(count)]
        for p in parts:
            with s3.open_input_stream(p) as f, \
                    open(os.path.join(tmp, p.rsplit("/", 1)[-1]), "wb") as out:
                shutil.copyfileobj(f, out)
        merge(tmp, parts=count)
        from . import _stoker
        _stoker.push_files(tmp, ["manifest.json"], url)
        _delete(url, [p.rsplit("/", 1)[-1] for p in parts])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return sum(r[1] for r in results)
