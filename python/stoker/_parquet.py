"""Parquet inputs named as `stoker pack --from parquet` names them: local
files, directories (every .parquet below) and shell patterns, and s3://
prefixes, objects and patterns (wildcards within one part of the name),
read with pyarrow; s3:// through the file system set up as the loader
sets up its client (stoker._s3)."""
from __future__ import annotations

import glob
import os
from typing import Any, List, Sequence, Tuple, Union

from ._errors import NotFound
from ._types import PathLike


def _match(path: str, pattern: str) -> bool:
    """A glob match in which wildcards stay within one '/'-separated part,
    as the shell's do (fnmatch alone lets '*' cross '/')."""
    import fnmatch
    a, b = path.split("/"), pattern.split("/")
    return len(a) == len(b) and all(fnmatch.fnmatchcase(x, y) for x, y in zip(a, b))


def _s3_objects(url: str, s3: Any) -> List[Tuple[str, int, int]]:
    """The Parquet objects an s3:// argument names: (bucket/key, size,
    mtime) each, sorted by key."""
    from pyarrow import fs
    path = url[len("s3://"):]
    wild = next((i for i, ch in enumerate(path) if ch in "*?["), None)
    if wild is None:
        info = s3.get_file_info(path)
        if info.type == fs.FileType.File:
            return [(path, info.size, info.mtime_ns)]
        base, pattern = path.rstrip("/"), None
    else:
        base, pattern = path[:path.rfind("/", 0, wild)], path
    out = []
    for i in s3.get_file_info(fs.FileSelector(base, recursive=True, allow_not_found=True)):
        if i.type != fs.FileType.File:
            continue
        if pattern is None and not i.path.endswith(".parquet"):
            continue
        if pattern is not None and not _match(i.path, pattern):
            continue
        out.append((i.path, i.size, i.mtime_ns))
    return sorted(out)


def resolve(paths: Union[PathLike, Sequence[PathLike]]) -> Tuple[List[str], List[tuple], Any]:
    """(files, their identities, the file system or None for local files).
    An identity is what resume compares: (path, device, inode, size,
    mtime) locally, ("s3", key, size, mtime) in a bucket.  Local and s3://
    inputs are not mixed (one file system reads them)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: List[str] = []
    ident: List[tuple] = []
    s3 = None
    kinds = {str(p).startswith("s3://") for p in paths}
    if len(kinds) > 1:
        raise ValueError("Parquet inputs are either all local or all s3:// (one file system "
                         "reads them)")
    for p in paths:
        p = os.fspath(p)
        if p.startswith("s3://"):
            if s3 is None:
                from ._s3 import filesystem
                s3 = filesystem()
            hits = _s3_objects(p, s3)
            if not hits:
                raise NotFound(f"{p}: no Parquet objects there")
            files += [h[0] for h in hits]
            ident += [("s3",) + h for h in hits]
            continue
        if os.path.isdir(p):
            hits = sorted(glob.glob(os.path.join(p, "**", "*.parquet"), recursive=True))
        else:
            hits = sorted(glob.glob(p))
            if not hits:
                raise NotFound(f"{p}: no such file")
        files += hits
        for f in hits:
            st = os.stat(f)
            ident.append((os.path.abspath(f), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    if not files:
        raise NotFound("no Parquet files found")
    return files, ident, s3


def parquet(paths: Union[PathLike, Sequence[PathLike]]) -> Any:
    """The rows of Parquet files as a pyarrow RecordBatchReader, for
    ``stoker.write`` (or an engine): local paths, directories and
    patterns, or s3:// prefixes, objects and patterns read with the
    loader's credentials and endpoint.

    Raises:
        NotFound: A path that names no Parquet file.
    """
    import pyarrow.dataset as pds
    files, _, fs = resolve(paths)
    return pds.dataset(files, format="parquet", filesystem=fs).scanner().to_reader()


def s3_filesystem() -> Any:
    """pyarrow's S3 file system set up as stoker's loader sets up its client
    (AWS_* variables and files, AWS_ENDPOINT_URL path-style): for an
    engine's own readers, ``ray.data.read_parquet(url,
    filesystem=stoker.s3_filesystem())``."""
    from ._s3 import filesystem
    return filesystem()
