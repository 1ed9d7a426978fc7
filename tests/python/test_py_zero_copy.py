"""Batches reach the caller without a copy, and a batch's memory is reused
only once nothing points into it any more."""

import gc

import numpy as np
import pytest
import torch

import stoker
from stoker import _stoker

pytestmark = pytest.mark.usefixtures("no_dist_env")


def ptr(a):
    return a.__array_interface__["data"][0]


def test_dlpack_output_is_zero_copy(ids_ds):
    path, src = ids_ds
    with stoker.Loader(path, batch_size=8, shuffle="random", output="dlpack", prefetch=2) as ld:
        b = ld.next()
        ids = ld.sample_ids()
        assert set(b) == {"id", "x"}
        for name, arr in b.items():
            assert isinstance(arr, _stoker.Array)
            p = arr.data_ptr
            assert isinstance(p, int) and p != 0
            a = np.from_dlpack(arr)
            t = torch.from_dlpack(arr)
            assert ptr(a) == p
            assert t.data_ptr() == p
            # The buffer protocol: the same memory again, every time.
            assert ptr(np.asarray(arr)) == p
            assert ptr(np.asarray(arr)) == ptr(np.asarray(arr))
            assert tuple(a.shape) == tuple(arr.shape) == tuple(t.shape)
            np.testing.assert_array_equal(a, src[name][ids])
        # One memory: a write through the NumPy view shows in the tensor.
        a = np.from_dlpack(b["x"])
        t = torch.from_dlpack(b["x"])
        a[0, 0, 0] = -12345.0
        assert t[0, 0, 0].item() == -12345.0


@pytest.mark.parametrize("kind", ["legacy", "versioned"])
def test_dlpack_capsules(ids_ds, kind):
    path, src = ids_ds
    with stoker.Loader(path, batch_size=4, shuffle="sequential", output="dlpack") as ld:
        arr = ld.next()["x"]
        assert arr.__dlpack_device__() == (1, 0)
        if kind == "legacy":
            cap = arr.__dlpack__()
            assert "dltensor" in repr(cap) and "dltensor_versioned" not in repr(cap)
        else:
            cap = arr.__dlpack__(max_version=(1, 0))
            assert "dltensor_versioned" in repr(cap)
        # torch consumes either capsule kind, at the Array's address.
        t = torch.utils.dlpack.from_dlpack(cap)
        assert t.data_ptr() == arr.data_ptr
        assert t.dtype == torch.float32 and tuple(t.shape) == (4, 5, 3)
        np.testing.assert_array_equal(t.numpy(), src["x"][:4])
        # An unused capsule is freed without harm.
        del t
        arr.__dlpack__(max_version=(1, 0))
        arr.__dlpack__()
        gc.collect()


def test_dlpack_refuses_copy_and_other_devices(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=4, output="dlpack") as ld:
        arr = ld.next()["id"]
        with pytest.raises(BufferError):
            arr.__dlpack__(copy=True)
        with pytest.raises(BufferError):
            arr.__dlpack__(dl_device=(2, 0))
        assert "dltensor" in repr(arr.__dlpack__(dl_device=(1, 0), copy=False))


def test_numpy_output_views_the_batch_buffer(ids_ds):
    path, src = ids_ds
    with stoker.Loader(path, batch_size=8, shuffle="sequential", prefetch=3) as ld:
        b = ld.next()
        for name, a in b.items():
            assert isinstance(a, np.ndarray)
            assert not a.flags.owndata
            assert a.flags.c_contiguous
            # Its memory belongs to a stoker Array (through a memoryview).
            base = a.base
            assert isinstance(base, memoryview) and isinstance(base.obj, _stoker.Array)
            assert base.obj.data_ptr == ptr(a)
            assert ptr(np.asarray(a)) == ptr(a)
            assert torch.as_tensor(a).data_ptr() == ptr(a)
            np.testing.assert_array_equal(a, src[name][:8])


@pytest.mark.parametrize("output", ["numpy", "torch", "dlpack"])
def test_successive_batches_reuse_a_few_ring_buffers(ids_ds, output):
    path, src = ids_ds
    with stoker.Loader(path, batch_size=8, shuffle="random", prefetch=3, output=output) as ld:
        slots = ld.stats()["ring_slots"]
        assert slots == 3
        seen, n = [], 0
        for b in ld:
            x = b["x"]
            p = (x.data_ptr() if output == "torch" else
                 x.data_ptr if output == "dlpack" else ptr(x))
            seen.append(p)
            want = src["x"][ld.sample_ids()]
            got = x.numpy() if output == "torch" else np.asarray(x)
            np.testing.assert_array_equal(got, want)
            n += 1
        assert n == 30
        assert len(set(seen)) <= slots
        # Released buffers come back: every pointer shows up again.
        assert all(seen.count(p) > 1 for p in set(seen))


@pytest.mark.parametrize("prefetch", [2, 3])
def test_kept_batch_stays_valid_while_the_ring_turns(ids_ds, prefetch):
    path, src = ids_ds
    with stoker.Loader(path, batch_size=8, shuffle="random", seed=7, prefetch=prefetch) as ld:
        keep = ld.next()
        keep_ids = ld.sample_ids()
        keep_t = torch.from_numpy(keep["x"])
        kept_ptr = ptr(keep["x"])
        later = []
        # Well past the ring size; each batch is dropped before the next.
        for _ in range(25):
            b = ld.next()
            assert b is not None
            later.append(ptr(b["x"]))
            np.testing.assert_array_equal(b["x"], src["x"][ld.sample_ids()])
            del b
        # The kept batch's buffer was never handed out again...
        assert kept_ptr not in later
        # ...and still holds its own samples.
        np.testing.assert_array_equal(keep["x"], src["x"][keep_ids])
        np.testing.assert_array_equal(keep["id"], keep_ids.astype(np.int64))
        np.testing.assert_array_equal(keep_t.numpy(), src["x"][keep_ids])
        # The ring works with one slot fewer: later batches share the rest.
        assert len(set(later)) <= prefetch - 1


def test_a_tensor_alone_keeps_the_batch(ids_ds):
    path, src = ids_ds
    with stoker.Loader(path, batch_size=8, shuffle="random", seed=3, prefetch=2,
                       output="dlpack") as ld:
        b = ld.next()
        ids = ld.sample_ids()
        t = torch.from_dlpack(b["x"])
        p = t.data_ptr()
        del b
        gc.collect()
        later = []
        for _ in range(20):
            nb = ld.next()
            later.append(nb["x"].data_ptr)
            del nb
        assert p not in later
        np.testing.assert_array_equal(t.numpy(), src["x"][ids])
        # Once the tensor is gone, its buffer returns to the ring.
        del t
        gc.collect()
        again = []
        for _ in range(6):
            nb = ld.next()
            again.append(nb["x"].data_ptr)
            del nb
        assert p in again


def test_kept_batch_in_a_for_loop(ids_ds):
    """The loop variable holds the previous batch while the next is asked
    for, so keeping one more batch needs a ring of three."""
    path, src = ids_ds
    with stoker.Loader(path, batch_size=8, shuffle="random", prefetch=3, output="torch") as ld:
        it = iter(ld)
        keep = next(it)
        keep_ids = ld.sample_ids()
        keep_copy = keep["x"].clone()
        count = 1
        for b in it:
            assert b["x"].data_ptr() != keep["x"].data_ptr()
            count += 1
        assert count == 30
        assert torch.equal(keep["x"], keep_copy)
        np.testing.assert_array_equal(keep["x"].numpy(), src["x"][keep_ids])


def test_holding_every_batch_of_an_epoch_is_safe(ids_ds):
    # Keeping more batches than the ring has buffers grows the ring: every
    # kept batch stays valid and holds its own values.
    path, src = ids_ds
    with stoker.Loader(path, batch_size=8, prefetch=2, shuffle="random", seed=4) as ld:
        kept = []
        for b in ld:
            kept.append((b, ld.sample_ids().copy()))
        assert len(kept) == len(ld)
        assert len({b["x"].__array_interface__["data"][0] for b, _ in kept}) == len(kept)
        for b, ids in kept:
            np.testing.assert_array_equal(b["x"], src["x"][ids])
        assert ld.stats()["ring_slots"] >= len(kept)


def test_dropped_batch_buffer_is_reused(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=8, shuffle="sequential", prefetch=2) as ld:
        first = ptr(ld.next()["x"])  # dropped at once
        later = [ptr(ld.next()["x"]) for _ in range(4)]
        assert first in later


def test_close_keeps_held_batches_valid(ids_ds):
    path, src = ids_ds
    ld = stoker.Loader(path, batch_size=8, shuffle="random", seed=1, prefetch=2)
    b = ld.next()
    ids = ld.sample_ids()
    t = torch.from_numpy(b["x"])
    ld.close()
    assert ld.closed
    with pytest.raises(ValueError, match="closed"):
        ld.next()
    with pytest.raises(ValueError, match="closed"):
        next(iter(ld))
    with pytest.raises(ValueError, match="closed"):
        ld.state_dict()
    gc.collect()
    np.testing.assert_array_equal(b["x"], src["x"][ids])
    np.testing.assert_array_equal(t.numpy(), src["x"][ids])
    del b
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), src["x"][ids])
    del t
    gc.collect()
    assert ld.closed
    with pytest.raises(ValueError, match="closed"):
        ld.next()
    ld.close()  # again: harmless


def test_close_without_batches(ids_ds):
    path, _ = ids_ds
    ld = stoker.Loader(path, batch_size=8)
    ld.close()
    assert ld.closed
    with pytest.raises(ValueError, match="closed"):
        for _ in ld:
            pass
