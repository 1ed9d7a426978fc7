"""pyarrow's S3 file system, set up the way the loader sets up its client
(src/remote/creds.c): credentials from the environment or the shared files
(pyarrow's own chain reads the same variables and files), the region, and
a custom endpoint (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL) addressed
path-style, as MinIO, Ceph and rclone expect.  Used where Python moves
objects itself: Parquet inputs of `stoker pack`, and the engine writers'
parts."""
from __future__ import annotations

import os


def is_url(path) -> bool:
    return isinstance(path, str) and path.startswith("s3://")


def filesystem():
    from pyarrow import fs
    kw = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        scheme, _, rest = endpoint.partition("://")
        kw.update(endpoint_override=rest.rstrip("/") if rest else endpoint,
                  scheme=scheme if rest else "https")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        kw["region"] = region
    if os.environ.get("AWS_NO_SIGN_REQUEST", "").lower() in ("1", "true", "yes"):
        kw["anonymous"] = True
    # A deleted object's "directory" is made again as a marker object only
    # where nothing else holds it up (servers such as rclone refuse such
    # markers).
    kw["check_directory_existence_before_creation"] = True
    return fs.S3FileSystem(**kw)


def key(url: str) -> str:
    """bucket/prefix of an s3:// URL, without a trailing slash."""
    return url[len("s3://"):].rstrip("/")
