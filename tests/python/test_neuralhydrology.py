"""stoker keeps the training samples NeuralHydrology keeps, with their
values: a small CAMELS-like set of basins (daily dates, NaNs in inputs and
targets, a gap in time, a basin that starts late, an all-NaN stretch of one
target), NeuralHydrology's own BaseDataset run on it for a training period,
and a stoker Loader with neuralhydrology_rules, period= and calendar=True
over the same data packed by stoker.write: the same (basin, end date)
samples, the same input windows, targets of the last predict_last_n steps
(1 and 3) and evolving attribute; and stoker.stats gives its scaler."""
import numpy as np
import pandas as pd
import pytest

pytest.importorskip("neuralhydrology")
pa = pytest.importorskip("pyarrow")

import stoker  # noqa: E402

SEQ = 21
START, END = "2000-02-10", "2000-05-31"
INPUTS = ["prcp", "tmax"]
TARGETS = ["q1", "q2"]
EVOLVING = ["soil"]   # a time-varying attribute: NeuralHydrology tests its last step


def basin_frames(seed=0):
    """{basin: DataFrame indexed by date}: what NeuralHydrology's
    _load_basin_data returns."""
    rng = np.random.default_rng(seed)
    frames = {}
    for b in range(5):
        first = pd.Timestamp("2000-01-01") + pd.Timedelta(days=40 if b == 3 else 0)
        dates = pd.date_range(first, "2000-06-30", freq="D")
        n = len(dates)
        df = pd.DataFrame({
            "prcp": rng.gamma(1.0, 2.0, n), "tmax": rng.normal(15, 5, n),
            "q1": rng.gamma(2.0, 1.0, n), "q2": rng.gamma(2.0, 1.0, n),
            "soil": rng.uniform(0, 1, n),
        }, index=pd.DatetimeIndex(dates, name="date")).astype(np.float32)
        for col, p in (("prcp", 0.01), ("tmax", 0.005), ("q1", 0.15), ("q2", 0.15),
                       ("soil", 0.02)):
            df.loc[rng.random(n) < p, col] = np.nan
        if b == 1:   # a gap in time: 4 days missing from the series
            df = df.drop(df.index[70:74])
        if b == 2:   # a stretch where both targets are NaN, one where only q1 is
            df.iloc[60:68, [2, 3]] = np.nan
            df.iloc[80:90, 2] = np.nan
        if b == 4:   # NaN inputs in the first and last rows
            df.iloc[0, 0] = np.nan
            df.iloc[-1, 1] = np.nan
        frames[f"b{b}"] = df
    return frames


def neuralhydrology_dataset(frames, tmp_path, normalise=False, predict_last_n=1, pieces=None):
    """NeuralHydrology's training Dataset over the frames: values as they
    are (normalise=False), or its own scaler and per-basin target stds
    (normalise=True)."""
    from neuralhydrology.datasetzoo.basedataset import BaseDataset
    from neuralhydrology.utils.config import Config

    class Frames(BaseDataset):
        def _load_basin_data(self, basin):
            # NeuralHydrology needs a series whose step it can infer: the
            # days missing from stoker's rows come as rows of NaN, as they
            # do in CAMELS's files.
            df = frames[basin]
            full = pd.date_range(df.index[0], df.index[-1], freq="D", name="date")
            return df.reindex(full)

        def _load_attributes(self):
            raise AssertionError("no static attributes in this test")

    basin_file = tmp_path / "basins.txt"
    basin_file.write_text("\n".join(frames) + "\n")
    cfg = Config({
        "train_basin_file": str(basin_file), "validation_basin_file": str(basin_file),
        "test_basin_file": str(basin_file),
        "train_start_date": [pd.Timestamp(a).strftime("%d/%m/%Y") for a, _ in pieces or
                             [(START, END)]],
        "train_end_date": [pd.Timestamp(b).strftime("%d/%m/%Y") for _, b in pieces or
                           [(START, END)]],
        "dynamic_inputs": INPUTS, "target_variables": TARGETS, "seq_length": SEQ,
        "evolving_attributes": EVOLVING, "predict_last_n": predict_last_n, "loss": "NSE" if normalise else "MSE", "dataset": "generic",
        "data_dir": str(tmp_path), "verbose": 0, "custom_normalization": {} if normalise else {
            c: {"centering": None, "scaling": None} for c in INPUTS + TARGETS + EVOLVING},
    })
    cfg.train_dir = tmp_path / f"run-{normalise}-{predict_last_n}"
    # (Fresh dicts: BaseDataset's defaults are shared between instances,
    # so a second dataset would take the first one's scaler.)
    return Frames(cfg=cfg, is_train=True, period="train", additional_features=[],
                  id_to_int={}, scaler={})


def neuralhydrology_samples(frames, tmp_path, predict_last_n=1, pieces=None):
    """NeuralHydrology's training samples: {(basin, end date): (x, y's last
    predict_last_n steps, the evolving attribute at the last step)}."""
    ds = neuralhydrology_dataset(frames, tmp_path, predict_last_n=predict_last_n, pieces=pieces)
    out = {}
    for i in range(len(ds)):
        basin, (idx,) = ds.lookup_table[i]
        s = ds[i]
        end = pd.Timestamp(ds._dates[basin][ds.frequencies[0]][idx])
        x = np.stack([s["x_d"][k].numpy()[:, 0] for k in INPUTS], axis=-1)
        out[(basin, end)] = (x, s["y"].numpy()[-predict_last_n:], s["x_s"].numpy())
    return out


def write_basins(frames, path):
    table = pd.concat([f.reset_index().assign(basin=b, bid=int(b[1:]))
                       for b, f in frames.items()], ignore_index=True)
    stoker.write(path, pa.Table.from_pandas(table, preserve_index=False), group_by="basin",
                 order_by="date", fields={"x": INPUTS, "y": TARGETS, "soil": EVOLVING,
                                          "date": "date", "bid": "bid"},
                 static=["bid"])


def stoker_samples(frames, path, predict_last_n=1, pieces=None, **extra):
    write_basins(frames, path)
    # NeuralHydrology's warm-up is seq_length - predict_last_n steps, so
    # its first sample ends predict_last_n - 1 steps into the period.
    period = [((pd.Timestamp(a) + pd.Timedelta(days=predict_last_n - 1)).strftime("%Y-%m-%d"), b)
              for a, b in pieces or [(START, END)]]
    out = {}
    with stoker.Loader(path, 64, fields=["x", "y", "soil", "date", "bid"], window=SEQ,
                       valid=stoker.neuralhydrology_rules("x", "y", predict_last_n,
                                                          evolving="soil"),
                       period=period, order_by="date",
                       calendar=True, shuffle="sequential", **extra) as loader:
        for b in loader:
            for x, y, e, d, bid in zip(b["x"], b["y"], b["soil"], b["date"], b["bid"]):
                key = (f"b{int(np.asarray(bid).ravel()[0])}", pd.Timestamp(d[-1]))
                assert key not in out, key
                out[key] = (np.array(x), np.array(y[-predict_last_n:]), np.array(e[-1]))
    return out


@pytest.mark.parametrize("predict_last_n", [1, 3])
def test_same_samples_and_values(tmp_path, predict_last_n):
    frames = basin_frames()
    want = neuralhydrology_samples(frames, tmp_path, predict_last_n)
    got = stoker_samples(frames, tmp_path / "camels.stk", predict_last_n)
    assert len(want) > 300
    assert set(got) == set(want)
    for key, (x, y, e) in want.items():
        gx, gy, ge = got[key]
        np.testing.assert_array_equal(gx, x, err_msg=str(key))
        np.testing.assert_array_equal(ge, e, err_msg=str(key))
        # (NeuralHydrology blanks the targets before the period; the last
        # predict_last_n steps of every sample lie inside it.)
        np.testing.assert_array_equal(gy, y, err_msg=str(key))
    # The data's traps were met: the gap, the late basin, the target rule
    # (a sample whose q1 alone is NaN at its end is kept).
    assert not any(b == "b1" and pd.Timestamp("2000-03-11") <= d <= pd.Timestamp("2000-04-03")
                   for b, d in want)
    assert min(d for b, d in want if b == "b3") >= pd.Timestamp("2000-02-10") + pd.Timedelta(
        days=SEQ - 1)
    assert any(np.isnan(y[-1, 0]) and not np.isnan(y[-1, 1]) for _, y, _ in want.values())


def test_a_period_of_several_pieces(tmp_path):
    """NeuralHydrology's lists of start and end dates: three pieces, the
    second's warm-up inside the first, the third's after a gap of weeks."""
    pieces = [("2000-02-10", "2000-03-05"), ("2000-03-15", "2000-04-01"),
              ("2000-05-01", "2000-05-31")]
    frames = basin_frames()
    want = neuralhydrology_samples(frames, tmp_path, pieces=pieces)
    got = stoker_samples(frames, tmp_path / "pieces.stk", pieces=pieces)
    assert len(want) > 150 and set(got) == set(want)
    for key, (x, y, e) in want.items():
        np.testing.assert_array_equal(got[key][0], x, err_msg=str(key))
        np.testing.assert_array_equal(got[key][1], y, err_msg=str(key))
    assert not any(pd.Timestamp("2000-04-02") <= d <= pd.Timestamp("2000-04-30")
                   for _, d in want)


def test_old_rule_is_not_neuralhydrology(tmp_path):
    """valid_field="y", valid="notnan" alone (the last step of every target)
    keeps other samples: windows with NaN inputs, across the gap, outside
    the period; and it drops those whose q1 alone is NaN."""
    frames = basin_frames()
    want = neuralhydrology_samples(frames, tmp_path)
    table = pd.concat([f.reset_index().assign(basin=b) for b, f in frames.items()],
                      ignore_index=True)
    path = tmp_path / "old.stk"
    stoker.write(path, pa.Table.from_pandas(table, preserve_index=False), group_by="basin",
                 order_by="date", fields={"x": INPUTS, "y": TARGETS, "date": "date"})
    n = stoker._loader._count(path, 64, fields=["x", "y"], window=SEQ, valid_field="y",
                              valid="notnan")["epoch_samples"]
    assert n != len(want)


def test_statistics_match_neuralhydrologys_scaler(tmp_path):
    """stoker.stats gives NeuralHydrology's feature means and stds (inputs
    over the period and its warm-up, targets over the period) and its
    per-basin target stds (NSE's weights)."""
    frames = basin_frames()
    ds = neuralhydrology_dataset(frames, tmp_path, normalise=True)
    path = tmp_path / "camels.stk"
    write_basins(frames, path)
    warm = pd.Timestamp(START) - pd.Timedelta(days=SEQ - 1)
    xs = stoker.stats(path, "x", period=(warm.strftime("%Y-%m-%d"), END), order_by="date")["x"]
    ys = stoker.stats(path, "y", period=(START, END), order_by="date", by_group=True)["y"]
    center, scale = ds.scaler["xarray_feature_center"], ds.scaler["xarray_feature_scale"]
    for i, c in enumerate(INPUTS):
        np.testing.assert_allclose(xs["mean"][i], float(center[c]), rtol=1e-5)
        np.testing.assert_allclose(xs["std"][i], float(scale[c]), rtol=1e-5)
    for i, c in enumerate(TARGETS):
        np.testing.assert_allclose(ys["mean"][i], float(center[c]), rtol=1e-5)
        np.testing.assert_allclose(ys["std"][i], float(scale[c]), rtol=1e-5)
    with stoker.Loader(path, 16, fields=["bid"], shuffle="sequential") as ld:
        bids = [int(b) for batch in ld for b in np.asarray(batch["bid"]).ravel()]
    for r, bid in enumerate(bids):
        want = ds._per_basin_target_stds[f"b{bid}"].numpy().ravel()
        np.testing.assert_allclose(ys["record_std"][r], want, rtol=1e-5)


def _example():
    """examples/neuralhydrology_lstm.py as a module."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "examples" / "neuralhydrology_lstm.py"
    spec = importlib.util.spec_from_file_location("neuralhydrology_lstm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_example_feeds_cudalstm_neuralhydrologys_tensors(tmp_path):
    """examples/neuralhydrology_lstm.py: the normalised tensors it gives
    CudaLSTM (inputs by name, static attributes, targets, the basin's
    target std) are those NeuralHydrology's own Dataset gives after its
    scaler, for the same (basin, end date) samples, every one of them; and
    its training loop runs CudaLSTM with NeuralHydrology's NSE loss."""
    ex = _example()
    frames, attrs = ex.demo_frames(basins=6, years=3, seed=1)
    start, end, seq = "2001-01-01", "2002-12-31", 365
    cfg = ex.config(start, end, seq_length=seq, basins=list(frames), run_dir=tmp_path)
    ds = ex.neuralhydrology_dataset(frames, attrs, cfg)
    want = {}
    for i in range(len(ds)):
        basin, (idx,) = ds.lookup_table[i]
        s = ds[i]
        key = (basin, pd.Timestamp(ds._dates[basin][ds.frequencies[0]][idx]))
        want[key] = (np.concatenate([s["x_d"][k].numpy() for k in ex.INPUTS], axis=-1),
                     s["x_s"].numpy(), s["y"].numpy(), s["per_basin_target_stds"].numpy())

    path = ex.write_dataset(frames, attrs, tmp_path / "camels.stk")
    norm = ex.Normaliser(path, start, end, seq)
    got = {}
    with ex.open_loader(path, start, end, 64, seq, seed=3) as loader:
        for batch in loader:
            data = norm(batch)
            assert set(data["x_d"]) == set(ex.INPUTS)
            assert data["y"].shape[1:] == (seq, len(ex.TARGETS))
            for j, bid in enumerate(data["bid"].tolist()):
                key = (f"{bid:08d}", pd.Timestamp(int(data["date"][j, -1]), unit="D"))
                assert key not in got, key
                got[key] = (np.concatenate([data["x_d"][k][j].numpy() for k in ex.INPUTS],
                                           axis=-1), data["x_s"][j].numpy(),
                            data["y"][j].numpy(), data["per_basin_target_stds"][j].numpy())
    assert len(want) > 2000
    assert set(got) == set(want)
    # NaN targets inside windows (the warm-up's and missing days) come
    # through as NeuralHydrology gives them.
    assert any(np.isnan(y[-30:]).any() for _, _, y, _ in want.values())
    keys = sorted(want)
    for part, name in enumerate(["x_d", "x_s", "y", "per_basin_target_stds"]):
        w = np.stack([want[k][part] for k in keys])
        g = np.stack([got[k][part] for k in keys])
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)

    losses = ex.train(path, start, end, steps=3, seq_length=seq, batch_size=32, hidden_size=8,
                      log=None)
    assert len(losses) == 3 and np.isfinite(losses).all()
