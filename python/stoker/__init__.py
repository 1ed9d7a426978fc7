"""stoker: keeps the GPU fed.

Example::

    import stoker
    with stoker.Loader("basins.stk", batch_size=256, window=365, shuffle="random") as loader:
        for batch in loader:          # a dict of NumPy arrays, views of the batch buffer
            x = batch["x"]            # [256, 365, 16]

Arrays are views of stoker's batch buffer (no copy); the buffer is reused
only after every array pointing into it is gone, so keeping a batch is
always safe (a consumer that keeps more batches than the ring holds makes
the ring grow, beyond the memory budget). ``output="torch"`` yields torch
tensors (made through DLPack, still without a copy), ``output="dlpack"``
yields stoker's own DLPack exporters. ``stoker.torch.Dataset`` puts a
loader inside a ``torch.utils.data.DataLoader``.

Every option after a function's data arguments (``Loader(path,
batch_size, *, ...)``, ``write(path, source, *, ...)``, ``index(paths,
output, *, ...)``) is keyword-only.

Exceptions:
    Everything stoker raises for a reason of its own is a ``StokerError``
    (a ``RuntimeError``) whose args are ``(code, message)``: code is a
    negative errno or one of libstoker's STK_E* codes, and the message
    names the file, shard and record where there is one. The kinds a caller
    may want to tell apart are also the built-in exceptions Python code
    already catches:

    - ``InvalidArgument`` (also a ``ValueError``): a bad option or input.
    - ``NotFound`` (also a ``FileNotFoundError``): no such dataset or file.
    - ``AccessDenied`` (also a ``PermissionError``): an object store refused
      the credentials (HTTP 403), or a file's permissions did.
    - ``OutOfMemory`` (also a ``MemoryError``): memory could not be had.
    - ``Timeout`` (also a ``TimeoutError``): a wait passed its deadline (a
      remote transfer with no progress through all its retries, another
      process that stopped while holding a shared cache's lock).
    - ``DataChanged``: a file or object changed since the dataset was
      opened or indexed (an object's ETag or size, an indexed source file).
    - ``RemoteError`` (also a ``ConnectionError``): what an object store
      answered that no retry cures, raised at once, one subclass a kind:
      ``RedirectLoop``, ``HostNotFound``, ``TLSError``, ``HTTPError`` (a
      4xx other than 401/403/404/408/429; ``.status``), ``BadRange`` (a
      Content-Range other than asked), ``ConnectionRefused`` (nothing
      listens at the URL's port; after a few quick tries at open).
    - ``StokerError`` itself: anything else (a damaged shard, a truncated
      file, an unsupported layout).

    Outside the hierarchy, as anywhere in Python: ``TypeError`` for a value
    of the wrong Python type, ``BufferError`` where the buffer protocol or
    DLPack cannot give what was asked (a copy, another device), and a plain
    ``RuntimeError`` for a Loader used in a process other than the one that
    opened it (after a fork), which is a mistake in the calling program
    rather than a failure of stoker's.
"""
from . import _stoker
from ._errors import (AccessDenied, BadRange, ConnectionRefused, DataChanged, HostNotFound,
                      HTTPError, InvalidArgument, MediaError, NotFound, OutOfMemory,
                      RedirectLoop, RemoteError, StokerError, Timeout, TLSError)
from ._loader import Loader, gpu_count, gpu_status, neuralhydrology_rules, strings
from ._stats import stats
from ._mix import Mixture, Source
from ._media import Audio, DecodeAudio, DecodeImage, Image, media_formats, media_probe
from ._types import Batch, PathLike
from ._parquet import parquet, s3_filesystem
from ._write import bits, index, merge, write
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .profile import profile
else:
    # stoker.profile is the module (so that `import stoker.profile as P`
    # gives P.profile and P.Report), and calling it calls its function:
    # stoker.profile(loader, ...).
    import types as _types

    from . import profile

    class _CallableModule(_types.ModuleType):
        def __call__(self, *args, **kwargs):
            return self.profile(*args, **kwargs)

    profile.__class__ = _CallableModule
    del _types, _CallableModule

__all__ = ["Loader", "Mixture", "Source", "StokerError", "InvalidArgument", "NotFound", "AccessDenied", "OutOfMemory",
           "Timeout", "DataChanged", "RemoteError", "RedirectLoop", "HostNotFound", "TLSError",
           "HTTPError", "BadRange", "ConnectionRefused", "MediaError",
           "Image", "Audio", "DecodeImage", "DecodeAudio", "media_formats", "media_probe",
           "bits", "gpu_count", "gpu_status", "index", "merge", "neuralhydrology_rules",
           "parquet", "profile",
           "s3_filesystem", "stats", "strings", "write", "version"]
__version__: str = _stoker.version
version: str = _stoker.version

# The public objects say they are stoker's (help(), reprs), wherever they
# are defined.
for _obj in (Loader, gpu_count, gpu_status, bits, index, merge, parquet, s3_filesystem, write,
             strings, Image, Audio, DecodeImage, DecodeAudio, media_formats, media_probe):
    _obj.__module__ = __name__
del _obj
