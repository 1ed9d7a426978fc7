"""Batches on the GPU (Loader(device=...)).

Without a GPU (CI): the options are checked, and asking for a device says
clearly why there is none.  With one: device batches equal the host batches
byte for byte, copied or device-resident; a consumer on a non-default
stream sees complete data; resume and epochs match the host loader; many
epochs leave device memory where it was."""
import numpy as np
import pytest

import stoker

N_GPU, WHY = stoker.gpu_status()


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


TORCH = _torch_cuda()
needs_gpu = pytest.mark.skipif(
    N_GPU == 0 or TORCH is None,
    reason=f"needs an NVIDIA GPU with CUDA-enabled torch; here: {WHY or 'torch has no CUDA'}")


@pytest.fixture
def series(tmp_path):
    rng = np.random.default_rng(3)
    recs = [{"x": rng.standard_normal((int(n), 4)).astype(np.float32),
             "y": np.int64(i)} for i, n in enumerate(rng.integers(12, 40, size=150))]
    path = tmp_path / "s.stk"
    stoker.write(path, recs, ragged=["x"])
    return path


def test_device_option_is_checked(series):
    for bad in ("gpu", "cuda:x", -1, 1.5, True):
        with pytest.raises((ValueError, TypeError)):
            stoker.Loader(series, batch_size=4, device=bad)
    with pytest.raises(ValueError, match="cannot hold GPU memory"):
        stoker.Loader(series, batch_size=4, device="cuda:0", output="numpy")
    with pytest.raises(ValueError, match="gpu_slots"):
        stoker.Loader(series, batch_size=4, device="cuda:0", gpu_slots=1)
    with stoker.Loader(series, batch_size=4, device="cpu") as ld:
        assert ld.device is None and ld.counts()["device"] == -1


@pytest.mark.skipif(N_GPU > 0, reason="this machine has a usable GPU")
def test_without_a_gpu_the_reason_is_given(series):
    assert stoker.gpu_count() == 0
    assert WHY.startswith("no GPU available: ") and len(WHY) > 24
    with pytest.raises(stoker.StokerError, match="no GPU available"):
        stoker.Loader(series, batch_size=4, device="cuda")
    # The host path is unaffected.
    with stoker.Loader(series, batch_size=4) as ld:
        assert len(ld.next()["y"]) == 4


def _on_host(batch):
    return {k: v.cpu().numpy() for k, v in batch.items()}


def _host_batches(path, **kw):
    with stoker.Loader(path, **kw) as ld:
        return [{k: v.copy() for k, v in b.items()} for b in ld]


@needs_gpu
@pytest.mark.parametrize("resident", [0, 1 << 30])
@pytest.mark.parametrize("window", [None, 8])
def test_device_batches_equal_host_batches(series, resident, window):
    kw = dict(batch_size=8, shuffle="random", seed=4, window=window)
    if window:
        kw["fields"] = ["x"]
    want = _host_batches(series, **kw)
    with stoker.Loader(series, device="cuda", resident_budget=resident, **kw) as ld:
        assert ld.counts()["resident"] == (1 if resident else 0)
        got = []
        for b in ld:
            for k, v in b.items():
                assert v.is_cuda
            got.append(_on_host(b))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert set(g) == set(w)
        for k in w:
            np.testing.assert_array_equal(g[k], w[k])


@needs_gpu
def test_consumer_on_a_side_stream_sees_complete_data(series):
    torch = TORCH
    want = _host_batches(series, batch_size=16, shuffle="random", seed=1)
    s = torch.cuda.Stream()
    sums = []
    with stoker.Loader(series, batch_size=16, shuffle="random", seed=1, device="cuda") as ld:
        with torch.cuda.stream(s):
            for b in ld:   # torch.from_dlpack makes stream s wait for the copy
                torch.cuda._sleep(200000)   # keep s busy: the buffer must not be refilled
                sums.append(b["x"].double().sum())
        torch.cuda.synchronize()
    assert len(sums) == len(want)
    for got, w in zip(sums, want):
        assert float(got) == pytest.approx(float(w["x"].astype(np.float64).sum()), rel=1e-9)


def _check_resume_and_epoch(data, epoch, **kw):
    """A device loader over `data` resumed from the state after 3 batches
    gives the next batch again, and its epoch `epoch` is the host's."""
    with stoker.Loader(data, device="cuda", **kw) as ld:
        for _ in range(3):
            ld.next()
        st = ld.state_dict()
        nxt = _on_host(ld.next())
    with stoker.Loader(data, device="cuda", **kw) as ld:
        ld.load_state_dict(st)
        got = _on_host(ld.next())
        assert set(got) == set(nxt)
        for k in nxt:
            np.testing.assert_array_equal(got[k], nxt[k])
        ld.set_epoch(epoch)
        dev = [b["y"].cpu().numpy() for b in ld]
    host = _host_batches(data, epoch=epoch, **kw)
    assert [d.tolist() for d in dev] == [h["y"].tolist() for h in host]


@needs_gpu
def test_resume_and_epochs_on_the_device(series):
    _check_resume_and_epoch(series, 5, batch_size=8, shuffle="random", seed=9)


@needs_gpu
def test_no_device_memory_grows_over_epochs(series):
    torch = TORCH
    with stoker.Loader(series, batch_size=8, shuffle="random", device="cuda") as ld:
        for b in ld:
            pass
        free0, _ = torch.cuda.mem_get_info()
        for e in range(1, 40):
            ld.set_epoch(e)
            for b in ld:
                pass
        torch.cuda.synchronize()
        free1, _ = torch.cuda.mem_get_info()
    assert free1 + (8 << 20) >= free0


@pytest.fixture
def two_series(tmp_path):
    rng = np.random.default_rng(5)
    paths = []
    for k, count in enumerate((120, 70)):
        recs = [{"x": rng.standard_normal((int(n), 4)).astype(np.float32),
                 "y": np.int64(1000 * k + i)} for i, n in enumerate(rng.integers(12, 40, size=count))]
        path = tmp_path / f"m{k}.stk"
        stoker.write(path, recs, ragged=["x"])
        paths.append(str(path))
    return paths


def test_mixture_device_option_is_checked(two_series):
    with pytest.raises(ValueError, match="cannot hold GPU memory"):
        stoker.Loader(two_series, batch_size=4, device="cuda:0", output="numpy")
    with pytest.raises(ValueError, match="gpu_slots"):
        stoker.Loader(two_series, batch_size=4, device="cuda:0", gpu_slots=1)


@pytest.mark.skipif(N_GPU > 0, reason="this machine has a usable GPU")
def test_mixture_without_a_gpu_says_why(two_series):
    with pytest.raises(stoker.StokerError, match="no GPU available"):
        stoker.Loader(two_series, batch_size=4, device="cuda")


def _mix_kw(**kw):
    return dict(batch_size=8, shuffle="random", seed=2, exhaust="cycle", **kw)


@needs_gpu
@pytest.mark.parametrize("homogeneous", [False, True])
def test_mixture_device_batches_equal_host_batches(two_series, homogeneous):
    kw = _mix_kw(homogeneous=homogeneous)
    want = _host_batches(two_series, **kw)
    with stoker.Loader(two_series, device="cuda", **kw) as ld:
        assert ld.device == "cuda:0"
        got = []
        for b in ld:
            assert all(v.is_cuda for v in b.values())
            got.append(_on_host(b))
    assert len(got) == len(want) > 4
    for g, w in zip(got, want):
        assert set(g) == set(w) == {"x", "x_offsets", "y", "source"}
        for k in w:
            np.testing.assert_array_equal(g[k], w[k])
    # Both sources in the stream.
    assert set(np.concatenate([w["source"] for w in want]).tolist()) == {0, 1}


@needs_gpu
def test_mixture_resume_and_epochs_on_the_device(two_series):
    _check_resume_and_epoch(two_series, 4, **_mix_kw())


@needs_gpu
def test_mixture_of_differing_fields_stays_on_the_host(two_series):
    srcs = [stoker.Source(two_series[0], fields=["x", "y"]),
            stoker.Source(two_series[1], fields=["y"])]
    with pytest.raises(ValueError, match="stay in host memory"):
        stoker.Loader(srcs, batch_size=8, homogeneous=True, device="cuda")
