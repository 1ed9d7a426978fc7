"""NeuralHydrology's CudaLSTM trained from stoker batches.

    python examples/neuralhydrology_lstm.py DATASET [--steps 50] [--device cuda]
    python examples/neuralhydrology_lstm.py --make-demo-data DIR [--steps 50]

stoker keeps the training samples NeuralHydrology's Dataset keeps
(``neuralhydrology_rules`` with ``period=`` and ``calendar=True``) and
``stoker.stats`` gives its scaler, so a training loop needs no
NeuralHydrology Dataset or DataLoader: each stoker batch is normalised (on
the GPU when the loader delivers there, else on the CPU) and handed to
NeuralHydrology's own model and loss in the form its DataLoader gives them,
``{"x_d": {input: [B, T, 1]}, "x_s": [B, attributes], "y": [B, T, targets],
"per_basin_target_stds": [B, 1, targets]}``.

The dataset's layout is the demo's (``--make-demo-data`` writes one): one
record a basin written by ``stoker.write(..., group_by="basin",
order_by="date")`` with the fields ``x`` (the dynamic inputs, INPUTS in
order), ``y`` (TARGETS), ``date``, and the static ``attrs`` (ATTRIBUTES,
sorted by name as NeuralHydrology orders them) and ``bid`` (an integer
basin id).  ``neuralhydrology_dataset`` builds NeuralHydrology's own
Dataset over the demo's frames, for comparison: tests/python/
test_neuralhydrology.py checks that the tensors given to the model here are
the ones it gives, sample for sample, and bench/neuralhydrology.py times
the two.
"""
import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import stoker

INPUTS = ["prcp", "srad", "tmax", "tmin", "vp"]
TARGETS = ["qobs"]
ATTRIBUTES = ["area", "aridity", "elev_mean", "frac_forest", "p_mean"]


def demo_frames(basins=20, years=6, seed=0):
    """A CAMELS-like set of basins: ({basin: DataFrame of INPUTS and
    TARGETS indexed by date}, DataFrame of ATTRIBUTES indexed by basin).
    Daily series from 2000-01-01 (some basins start later), discharge from a
    leaky reservoir fed by the rain, NaNs: a few single days of one input,
    3% of the discharge and a month-long hole in some basins' discharge,
    and a 5-day gap in time in every tenth basin."""
    rng = np.random.default_rng(seed)
    names = [f"{1000000 + 7919 * i:08d}" for i in range(basins)]
    attrs = pd.DataFrame({
        "area": rng.lognormal(6, 1, basins), "aridity": rng.uniform(0.2, 3, basins),
        "elev_mean": rng.uniform(10, 3000, basins), "frac_forest": rng.uniform(0, 1, basins),
        "p_mean": rng.uniform(0.5, 8, basins)}, index=pd.Index(names, name="basin"))
    frames = {}
    for i, b in enumerate(names):
        first = pd.Timestamp("2000-01-01") + pd.Timedelta(days=int(rng.integers(0, 400))
                                                          if i % 7 == 3 else 0)
        dates = pd.date_range(first, pd.Timestamp(f"{2000 + years - 1}-12-31"), freq="D")
        n = len(dates)
        doy = dates.day_of_year.to_numpy()
        season = np.sin(2 * np.pi * (doy - 80) / 365.25)
        prcp = rng.gamma(0.6, attrs.p_mean.iloc[i] / 0.6, n) * (rng.random(n) < 0.5)
        tmax = 12 + 10 * season + rng.normal(0, 3, n)
        tmin = tmax - rng.uniform(5, 12, n)
        srad = 200 + 120 * season + rng.normal(0, 30, n)
        vp = 600 + 400 * season + rng.normal(0, 80, n)
        k = 0.05 + 0.1 * attrs.frac_forest.iloc[i]
        store = np.empty(n)
        s = 10.0
        for t in range(n):      # (a leaky reservoir: today's store leaks k of itself)
            s = s * (1 - k) + max(prcp[t] - 0.1 * max(tmax[t], 0), 0)
            store[t] = s
        q = k * store * (1 + rng.normal(0, 0.05, n))
        df = pd.DataFrame({"prcp": prcp, "srad": srad, "tmax": tmax, "tmin": tmin, "vp": vp,
                           "qobs": q}, index=pd.DatetimeIndex(dates, name="date"))
        df = df.astype(np.float32)
        for _ in range(int(rng.integers(0, 3))):
            df.iloc[int(rng.integers(0, n)), int(rng.integers(0, len(INPUTS)))] = np.nan
        df.loc[rng.random(n) < 0.03, "qobs"] = np.nan
        if i % 4 == 1:
            at = int(rng.integers(0, n - 30))
            df.iloc[at:at + 30, df.columns.get_loc("qobs")] = np.nan
        if i % 10 == 5:
            at = int(rng.integers(400, n - 400))
            df = df.drop(df.index[at:at + 5])
        frames[b] = df
    return frames, attrs


def write_dataset(frames, attrs, path):
    """The frames as a stoker dataset in the layout this example reads."""
    import pyarrow as pa
    table = pd.concat([f.reset_index().assign(basin=b, bid=np.int64(b),
                                              **{a: np.float32(attrs.loc[b, a])
                                                 for a in ATTRIBUTES})
                       for b, f in frames.items()], ignore_index=True)
    table = pa.Table.from_pandas(table, preserve_index=False)
    # Dates as days (date32): a batch's "date" is then days since 1970.
    table = table.set_column(table.schema.get_field_index("date"), "date",
                             table["date"].cast(pa.date32()))
    stoker.write(path, table, group_by="basin",
                 order_by="date", fields={"x": INPUTS, "y": TARGETS, "attrs": ATTRIBUTES,
                                          "date": "date", "bid": "bid"},
                 static=["attrs", "bid"], overwrite=True)
    return path


def config(start, end, seq_length=365, predict_last_n=1, hidden_size=64, basins=(),
           run_dir=None, **extra):
    """NeuralHydrology's run configuration for a CudaLSTM on this layout
    (what its YAML file would hold), built in code. ``start`` and ``end``
    are the training period's first and last days ("2001-01-01"); the
    basins are those its own Dataset would read (the model needs none)."""
    from neuralhydrology.utils.config import Config
    run_dir = run_dir or tempfile.mkdtemp(prefix="nh-run-")
    os.makedirs(run_dir, exist_ok=True)
    basin_file = os.path.join(run_dir, "basins.txt")
    with open(basin_file, "w") as f:
        f.write("".join(f"{b}\n" for b in basins))
    day = [pd.Timestamp(start).strftime("%d/%m/%Y")], [pd.Timestamp(end).strftime("%d/%m/%Y")]
    cfg = Config({
        "model": "cudalstm", "hidden_size": hidden_size, "initial_forget_bias": 3,
        "output_dropout": 0.0, "head": "regression", "output_activation": "linear",
        "optimizer": "Adam", "learning_rate": 1e-3, "loss": "NSE", "batch_size": 256,
        "dynamic_inputs": INPUTS, "target_variables": TARGETS, "static_attributes": ATTRIBUTES,
        "seq_length": seq_length, "predict_last_n": predict_last_n, "dataset": "generic",
        "data_dir": run_dir, "train_basin_file": basin_file,
        "validation_basin_file": basin_file, "test_basin_file": basin_file,
        "train_start_date": day[0], "train_end_date": day[1],
        "device": "cpu", "verbose": 0, **extra,
    })
    cfg.train_dir = Path(run_dir) / "run"
    return cfg


def _days(d, n):
    return (pd.Timestamp(d) + pd.Timedelta(days=n)).strftime("%Y-%m-%d")


class Normaliser:
    """NeuralHydrology's scaler from stoker.stats, as tensors on ``device``:
    inputs by their mean and std over the period and its warm-up, targets
    over the period (blanked before it, as NeuralHydrology does), attributes by
    their mean and std over the basins (pandas': ddof 1), and each basin's
    target std over the period (the NSE loss's weights), found by ``bid``."""

    def __init__(self, path, start, end, seq_length=365, predict_last_n=1, device="cpu"):
        warm = _days(start, -(seq_length - predict_last_n))
        x = stoker.stats(path, "x", period=(warm, end), order_by="date")["x"]
        y = stoker.stats(path, "y", period=(start, end), order_by="date", by_group=True)["y"]
        a = stoker.stats(path, "attrs", ddof=1)["attrs"]
        with stoker.Loader(path, 1024, fields=["bid"], shuffle="sequential") as ld:
            bids = np.concatenate([np.asarray(b["bid"]).reshape(-1) for b in ld])
        order = np.argsort(bids)

        def t(v):
            return torch.as_tensor(np.asarray(v, np.float32), device=device)
        self.x_mean, self.x_std = t(x["mean"]).reshape(-1), t(x["std"]).reshape(-1)
        self.y_mean, self.y_std = t(y["mean"]).reshape(-1), t(y["std"]).reshape(-1)
        self.a_mean, self.a_std = t(a["mean"]).reshape(-1), t(a["std"]).reshape(-1)
        self.bids = torch.as_tensor(bids[order], device=device)
        self.start = (pd.Timestamp(start) - pd.Timestamp("1970-01-01")).days
        self.basin_std = t(y["record_std"].reshape(len(bids), -1)[order])

    def __call__(self, batch):
        """One stoker batch (torch tensors) as NeuralHydrology's model and
        loss take it; "bid" and "date" ride along (the model ignores them)."""
        bid = batch["bid"].reshape(-1)
        b, t = len(bid), batch["x"].shape[1]
        # (A field of one column comes as [B, T]: NeuralHydrology wants
        # the column's axis. The subtraction makes new tensors, which the
        # division then works in.)
        x = batch["x"].reshape(b, t, -1) - self.x_mean
        x /= self.x_std
        y = batch["y"].reshape(b, t, -1) - self.y_mean
        y /= self.y_std
        # NeuralHydrology blanks the targets of the warm-up, before the
        # period (its loss reads only the last predict_last_n).
        y.masked_fill_((batch["date"] < self.start).reshape(b, t, 1), torch.nan)
        rec = torch.searchsorted(self.bids, bid)
        return {
            "x_d": {name: x[..., i:i + 1] for i, name in enumerate(INPUTS)},
            "x_s": (batch["attrs"].reshape(b, -1) - self.a_mean) / self.a_std,
            "y": y,
            "per_basin_target_stds": self.basin_std[rec].unsqueeze(1),
            "bid": bid, "date": batch["date"],
        }


def open_loader(path, start, end, batch_size=256, seq_length=365, predict_last_n=1,
                device=None, shuffle="random", seed=0, **kw):
    """A stoker Loader of NeuralHydrology's training samples for the period
    [start, end]: windows of seq_length days whose inputs have no NaN and
    whose targets have a value in the last predict_last_n days, within the
    period, not across a gap in time."""
    return stoker.Loader(
        path, batch_size, fields=["x", "y", "attrs", "bid", "date"], window=seq_length,
        valid=stoker.neuralhydrology_rules("x", "y", predict_last_n),
        period=(_days(start, predict_last_n - 1), end), order_by="date", calendar=True,
        shuffle=shuffle, seed=seed, output="torch", device=device, **kw)


def train(path, start, end, steps=50, seq_length=365, batch_size=256, device=None,
          hidden_size=64, seed=0, log=print):
    """``steps`` optimiser steps of NeuralHydrology's CudaLSTM with its NSE
    loss, fed by stoker; returns the losses."""
    from neuralhydrology.modelzoo.cudalstm import CudaLSTM
    from neuralhydrology.training import get_loss_obj
    torch.manual_seed(seed)
    dev = torch.device(device or "cpu")
    loader_threads = 0
    if dev.type == "cpu":
        # Half the cores to the model, half to stoker's threads: torch's
        # OpenMP threads wait for one another at every operation, so one of
        # them sharing a core with a loader thread stalls them all (on two
        # busy cores a step took 5-15 s with two torch threads, 0.1 s with one).
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
        loader_threads = max(1, (os.cpu_count() or 2) - torch.get_num_threads())
    cfg = config(start, end, seq_length=seq_length, hidden_size=hidden_size,
                 device=str(dev))
    model = CudaLSTM(cfg).to(dev)
    loss_obj = get_loss_obj(cfg).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate[0])
    norm = Normaliser(path, start, end, seq_length, device=dev)
    losses = []
    with open_loader(path, start, end, batch_size, seq_length, device=device, seed=seed,
                     threads=loader_threads) as loader:
        while len(losses) < steps:
            for batch in loader:
                data = norm(batch)
                loss, _ = loss_obj(model(data), data)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                if log and len(losses) % 10 == 0:
                    log(f"step {len(losses)}: NSE loss {np.mean(losses[-10:]):.4f}")
                if len(losses) == steps:
                    break
    return losses


def neuralhydrology_dataset(frames, attrs, cfg):
    """NeuralHydrology's own training Dataset (its BaseDataset) over the
    demo's frames, with its scaler: what it would give from CAMELS's files,
    days missing from a series given as rows of NaN as those files have
    them."""
    from neuralhydrology.datasetzoo.basedataset import BaseDataset

    class Frames(BaseDataset):
        def _load_basin_data(self, basin):
            df = frames[basin]
            return df.reindex(pd.date_range(df.index[0], df.index[-1], freq="D", name="date"))

        def _load_attributes(self):
            return attrs

    # (Fresh dicts: BaseDataset's defaults are shared between instances.)
    return Frames(cfg=cfg, is_train=True, period="train", additional_features=[],
                  id_to_int={}, scaler={})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", nargs="?")
    ap.add_argument("--make-demo-data", metavar="DIR",
                    help="write a demo dataset of --basins basins at DIR and train on it")
    ap.add_argument("--basins", type=int, default=20)
    ap.add_argument("--years", type=int, default=6)
    ap.add_argument("--start", default="2001-01-01", help="the training period's first day")
    ap.add_argument("--end", default=None, help="its last day (default: the demo's last)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--seq-length", type=int, default=365)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--device", default=None, help="cuda: batches delivered and normalised "
                    "on the GPU (default: the CPU)")
    a = ap.parse_args()
    if bool(a.dataset) == bool(a.make_demo_data):
        ap.error("give a DATASET or --make-demo-data DIR")
    path = a.dataset
    end = a.end or f"{2000 + a.years - 1}-12-31"
    if a.make_demo_data:
        path = write_dataset(*demo_frames(a.basins, a.years), a.make_demo_data)
    losses = train(path, a.start, end, steps=a.steps, seq_length=a.seq_length,
                   batch_size=a.batch_size, device=a.device)
    print(f"{len(losses)} steps: NSE loss {np.mean(losses[:5]):.4f} over the first 5, "
          f"{np.mean(losses[-5:]):.4f} over the last 5")


if __name__ == "__main__":
    main()
