"""stoker.stats: each element's mean and std over every row of a field,
NaN left out, equal NumPy's nanmean/nanstd over the rows written, for the
whole dataset, per record (a record of NaN only gives NaN), over a period of
a time field and with ddof=1; a per-record float field counts one row a
record; mistakes are named."""
import numpy as np
import pytest

import stoker


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(3)
    recs = []
    for r in range(17):
        n = int(rng.integers(1, 300))
        x = (rng.normal(size=(n, 3)) * 1e3 + 1e6).astype(np.float32)
        x[rng.random((n, 3)) < 0.2] = np.nan
        if r == 5:
            x[:] = np.nan
        t = np.arange(n, dtype=np.int64) * 10 + r
        recs.append({"x": x, "t": t, "area": np.float64(r * 1.5)})
    path = tmp_path_factory.mktemp("stats") / "s.stk"
    stoker.write(path, recs, ragged=["x", "t"])
    return path, recs


def test_whole_and_per_record(data):
    path, recs = data
    s = stoker.stats(path, "x", by_group=True)["x"]
    rows = np.concatenate([r["x"] for r in recs]).astype(np.float64)
    np.testing.assert_allclose(s["mean"], np.nanmean(rows, axis=0), rtol=1e-12)
    np.testing.assert_allclose(s["std"], np.nanstd(rows, axis=0), rtol=1e-9)
    assert (s["count"] == (~np.isnan(rows)).sum(axis=0)).all()
    assert s["record_mean"].shape == (17, 3)
    for i, r in enumerate(recs):
        v = r["x"].astype(np.float64)
        if i == 5:
            assert np.isnan(s["record_mean"][i]).all() and (s["record_count"][i] == 0).all()
            continue
        np.testing.assert_allclose(s["record_mean"][i], np.nanmean(v, axis=0), rtol=1e-12)
        np.testing.assert_allclose(s["record_std"][i], np.nanstd(v, axis=0), rtol=1e-9)
    s1 = stoker.stats(path, "x", ddof=1)["x"]
    np.testing.assert_allclose(s1["std"], np.nanstd(rows, axis=0, ddof=1), rtol=1e-9)


def test_period(data):
    path, recs = data
    s = stoker.stats(path, "x", period=(500, 1200), order_by="t")["x"]
    rows = np.concatenate([r["x"][(r["t"] >= 500) & (r["t"] <= 1200)]
                           for r in recs]).astype(np.float64)
    np.testing.assert_allclose(s["mean"], np.nanmean(rows, axis=0), rtol=1e-12)
    np.testing.assert_allclose(s["std"], np.nanstd(rows, axis=0), rtol=1e-9)


def test_default_fields_and_per_record_values(data):
    path, recs = data
    s = stoker.stats(path)
    assert set(s) == {"x", "area"}
    np.testing.assert_allclose(s["area"]["mean"], np.mean([r["area"] for r in recs]))


@pytest.mark.parametrize("kw,needle", [
    (dict(fields="t"), "float"),
    (dict(fields="nope"), "nope"),
    (dict(fields="x", period=(0, 1)), "order_by"),
    (dict(fields="area", period=(0, 1), order_by="t"), "rows"),
])
def test_mistakes(data, kw, needle):
    path, _ = data
    with pytest.raises(stoker.InvalidArgument) as e:
        stoker.stats(path, **kw)
    assert needle in str(e.value)
