"""stoker's exceptions: one hierarchy.

Every error stoker raises for a reason of its own is a StokerError, whose
args are (code, message): code is a negative errno or one of libstoker's
STK_E* codes (stoker.h), message names the file, shard and record where
there is one; str() is the message.  The kinds a caller may want to tell
apart are also the built-in exceptions Python code already catches:

    InvalidArgument   also a ValueError    a bad option or input
    NotFound          also a FileNotFoundError
    AccessDenied      also a PermissionError   (an object store said 403)
    OutOfMemory       also a MemoryError
    Timeout           also a TimeoutError  (a remote transfer given up after
                                            its retries, a stopped process)
    DataChanged       a file or object changed since the dataset was opened
                      or indexed (an object's ETag or size, a source file)
    RemoteError       also a ConnectionError: what an object store answered
                      that no retry cures, raised at once, one kind each:
        RedirectLoop      a redirect loop
        HostNotFound      a host name that does not resolve
        TLSError          TLS failed (a certificate, the handshake)
        HTTPError         an HTTP 4xx other than 401/403/404/408/429
        BadRange          a Content-Range other than the range asked for
        ConnectionRefused nothing accepts connections at the URL's host and
                          port (also a ConnectionRefusedError), raised
                          after a few quick tries when no server has
                          answered yet; later, a refusal is retried

Anything else (a damaged shard, a truncated file, an unsupported layout)
is a plain StokerError.  A value of the wrong Python type is a TypeError,
as anywhere in Python.
"""

__all__ = ["StokerError", "InvalidArgument", "NotFound", "AccessDenied", "OutOfMemory", "Timeout",
           "DataChanged", "RemoteError", "RedirectLoop", "HostNotFound", "TLSError", "HTTPError",
           "BadRange", "ConnectionRefused"]


class StokerError(RuntimeError):
    """An error from stoker: args are (code, message); str() is the message."""

    def __init__(self, *args, message=None):
        # message=: how torch's DataLoader raises a worker's exception again
        # in the parent (for a class with a `message` attribute).
        if message is not None:
            args = (*args, message)
        super().__init__(*args)

    @property
    def code(self) -> int:
        """The negative errno or STK_E* code (0 when none was given)."""
        return self.args[0] if len(self.args) >= 2 and isinstance(self.args[0], int) else 0

    @property
    def message(self) -> str:
        """What went wrong, naming the file, shard and record where known."""
        if len(self.args) >= 2 and isinstance(self.args[0], int):
            return str(self.args[1])
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return self.message


class InvalidArgument(StokerError, ValueError):
    """A bad option or input (also a ValueError)."""

    def __init__(self, *args, message=None):
        if message is not None:
            args = (*args, message)
        if len(args) == 1:
            args = (-22, args[0])  # -EINVAL
        super().__init__(*args)


class NotFound(StokerError, FileNotFoundError):
    """A file or dataset that is not there (also a FileNotFoundError)."""

    def __str__(self):
        return self.message


class AccessDenied(StokerError, PermissionError):
    """Access refused: an object store answered 403, or a file's
    permissions (also a PermissionError)."""

    def __str__(self):
        return self.message


class OutOfMemory(StokerError, MemoryError):
    """Memory could not be had (also a MemoryError)."""


class Timeout(StokerError, TimeoutError):
    """A wait passed its deadline (also a TimeoutError): a remote transfer
    that made no progress through all its retries, or another process that
    stopped while holding a lock stoker needed."""

    def __str__(self):
        return self.message


class DataChanged(StokerError):
    """A file or object changed since the dataset was opened or indexed: an
    object's ETag or size (a dataset rewritten while it is read), a source
    file of an in-place index.  Reading on would mix old and new data."""


class RemoteError(StokerError, ConnectionError):
    """What an object store answered that no retry cures, raised at once
    rather than after the deadline (also a ConnectionError).  Its kinds are
    the subclasses; the message names the object and the server's words."""

    def __str__(self):
        return self.message


class RedirectLoop(RemoteError):
    """The server redirected the request round in a loop."""


class HostNotFound(RemoteError):
    """The host's name does not resolve (a typo in the endpoint, no DNS)."""


class TLSError(RemoteError):
    """TLS failed: a certificate not trusted or not for this host, or the
    handshake."""


class HTTPError(RemoteError):
    """An HTTP 4xx other than 401/403 (AccessDenied), 404 (NotFound) and
    408/429 (retried): the request as made will never succeed."""

    @property
    def status(self) -> int:
        """The HTTP status (0 where the message does not give one)."""
        import re
        m = re.search(r"HTTP (\d{3})", self.message)
        return int(m.group(1)) if m else 0


class BadRange(RemoteError):
    """The server answered a byte range other than the one asked for: it
    does not serve ranges as the protocol says, and its bytes cannot be
    trusted for the range asked."""


class ConnectionRefused(RemoteError, ConnectionRefusedError):
    """Nothing accepts connections at the URL's host and port: a wrong port,
    a server not running (also a ConnectionRefusedError).  Raised after a
    few quick tries (about 1.5 s) while no server has answered this dataset
    yet; once one has, a refused connection is retried like any failure
    that can pass (a server restarting)."""


class MediaError(StokerError):
    """An encoded image or audio clip of a media field does not decode: it is
    damaged (truncated, a bad CRC), or not a format the field's type allows.
    The message names the file, the record and the field."""
