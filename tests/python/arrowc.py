"""An Arrow C stream made by hand (ctypes), for the tests of what stoker's C
writer does with the batches a stream gives: each batch is exported from
pyarrow into a C ArrowArray, which a test may then alter (other buffers,
offsets, lengths) before the writer reads it, so that a stream can give
what no pyarrow reader would: a batch that does not fit the stream's
schema, or a malformed one.

    with HandStream(schema, [batch0, batch1], alter=fn) as s:
        stoker.write(path, s, progress=False)

fn(stream, i, array) is called with each batch's ArrowArray (a ctypes Structure
over the exported memory); HandStream.keep(x) keeps a ctypes buffer a test
points the array at alive as long as the stream.
"""
import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int64, c_void_p)


class ArrowArray(Structure):
    pass


ArrowArray._fields_ = [
    ("length", c_int64), ("null_count", c_int64), ("offset", c_int64),
    ("n_buffers", c_int64), ("n_children", c_int64), ("buffers", POINTER(c_void_p)),
    ("children", POINTER(POINTER(ArrowArray))), ("dictionary", POINTER(ArrowArray)),
    ("release", c_void_p), ("private_data", c_void_p)]

_GET_SCHEMA = CFUNCTYPE(c_int, c_void_p, c_void_p)
_GET_NEXT = CFUNCTYPE(c_int, c_void_p, c_void_p)
_LAST_ERROR = CFUNCTYPE(c_char_p, c_void_p)
_RELEASE = CFUNCTYPE(None, c_void_p)


class ArrowArrayStream(Structure):
    _fields_ = [("get_schema", _GET_SCHEMA), ("get_next", _GET_NEXT),
                ("get_last_error", _LAST_ERROR), ("release", _RELEASE),
                ("private_data", c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [c_void_p, c_char_p, c_void_p]
_CAPSULE_NAME = b"arrow_array_stream"


def release(array):
    """Releases an exported array that was not handed over."""
    if array.release:
        _RELEASE(array.release)(ctypes.addressof(array))


class HandStream:
    def __init__(self, schema, batches, alter=None):
        self.schema = schema
        self.arrays = []
        self._kept = []
        self.given = 0
        for i, b in enumerate(batches):
            a = ArrowArray()
            b._export_to_c(ctypes.addressof(a))
            self.arrays.append(a)
            if alter is not None:
                alter(self, i, a)
        # The callbacks are kept on self: ctypes frees a callback's thunk
        # with its Python object.
        self._cb = (_GET_SCHEMA(self._get_schema), _GET_NEXT(self._get_next),
                    _LAST_ERROR(lambda s: None), _RELEASE(self._release))
        self.stream = ArrowArrayStream(*self._cb, None)

    def keep(self, x):
        self._kept.append(x)
        return x

    def _get_schema(self, stream, out):
        self.schema._export_to_c(out)
        return 0

    def _get_next(self, stream, out):
        if self.given == len(self.arrays):
            ctypes.memset(out, 0, ctypes.sizeof(ArrowArray))  # the end
            return 0
        a = self.arrays[self.given]
        self.given += 1
        ctypes.memmove(out, ctypes.addressof(a), ctypes.sizeof(ArrowArray))
        a.release = None  # moved: the consumer releases it
        return 0

    def _release(self, stream):
        ctypes.cast(stream, POINTER(ArrowArrayStream)).contents.release = _RELEASE()

    def __arrow_c_stream__(self, requested_schema=None):
        return _capsule_new(ctypes.addressof(self.stream), _CAPSULE_NAME, None)

    def close(self):
        for a in self.arrays:
            release(a)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def child(array, i):
    """Column i of an exported batch, as an ArrowArray over its memory."""
    return array.children[i].contents


def point_buffer(stream, array, k, values):
    """Points buffer k of `array` at a copy of `values` (a NumPy array),
    kept alive by `stream`."""
    import numpy as np
    v = stream.keep(np.ascontiguousarray(values))
    array.buffers[k] = v.ctypes.data
