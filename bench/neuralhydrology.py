"""NeuralHydrology's own Dataset in a torch DataLoader against stoker's
Loader, for the same training samples, normalised the same way.

The data (made once under bench/out/neuralhydrology/, untimed): --basins
CAMELS-like basins of --years daily years (examples/neuralhydrology_lstm.py
demo_frames: 5 forcings, discharge, 5 static attributes; a few NaN inputs,
3% NaN discharge and month-long holes, late starts, gaps in time), packed
by stoker.write.  The training period is the second year to the last, the
window (seq_length) --window days, predict_last_n 1.

Contenders, every one in each repetition, rotating order, in this process
(torch held to one thread, so that no contender's OpenMP threads fight
another's for the two cores); medians of --reps:

    NeuralHydrology, workers W  its BaseDataset (built once, untimed here:
                                its build time is reported apart) in
                                DataLoader(batch_size, shuffle=True,
                                num_workers=W, collate_fn=ds.collate_fn),
                                as its trainer makes it; W = 0 (its
                                default) and 2
    stoker                      examples/neuralhydrology_lstm.py's
                                open_loader (random order) and Normaliser
                                on the CPU: batches shaped and normalised
                                as NeuralHydrology's
    stoker, not normalised      the same Loader's batches as read (the
                                loader's own rate)

A repetition makes a fresh iterator (a fresh Loader), times its first batch
(start-up: workers forked, or the Loader opened with its validity rules
counted) and then the next --nh-batches (NeuralHydrology) or
--stk-batches (stoker) batches; samples/s counts those.  Warm: stoker's
shards are read once before, and NeuralHydrology holds its data in memory.

    python bench/neuralhydrology.py [--basins 150] [--years 15] [--reps 7]

Writes the "neuralhydrology" section of docs/BENCHMARKS.md.
"""
import argparse
import importlib.metadata
import importlib.util
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402

# (This file has the package's name: its folder, first on the path when it
# runs as a script, would make "import neuralhydrology" import it.)
sys.path = [p for p in sys.path if Path(p or ".").resolve() != HERE]


def example():
    spec = importlib.util.spec_from_file_location(
        "neuralhydrology_lstm", common.ROOT / "examples" / "neuralhydrology_lstm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_nh(dl, batches):
    """(seconds to the first batch, seconds for the next `batches`)."""
    t0 = time.perf_counter()
    it = iter(dl)
    next(it)
    t1 = time.perf_counter()
    for _ in range(batches):
        b = next(it)
        b["x_d"]["prcp"].shape
    t2 = time.perf_counter()
    del it
    return t1 - t0, t2 - t1


def run_stoker(ex, path, start, end, norm, batch, window, batches, seed):
    """As run_nh, for a fresh Loader; norm None: batches as read."""
    norm = norm or (lambda b: {"x_d": {"prcp": b["x"]}})
    t0 = time.perf_counter()
    with ex.open_loader(path, start, end, batch, window, seed=seed) as ld:
        it = iter(ld)
        norm(next(it))
        t1 = time.perf_counter()
        n = 0
        while n < batches:
            for b in it:
                d = norm(b)
                d["x_d"]["prcp"].shape
                n += 1
                if n == batches:
                    break
            else:
                it = iter(ld)
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--basins", type=int, default=150)
    ap.add_argument("--years", type=int, default=15)
    ap.add_argument("--window", type=int, default=365)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--nh-batches", type=int, default=100)
    ap.add_argument("--stk-batches", type=int, default=800)
    ap.add_argument("--no-write", action="store_true", help="print, leave BENCHMARKS.md")
    a = ap.parse_args()
    try:
        import neuralhydrology  # noqa: F401
    except ImportError:
        print("bench/neuralhydrology.py: skipped: the neuralhydrology package is not installed "
              "(pip install neuralhydrology)", file=sys.stderr)
        return
    import torch
    import stoker
    torch.set_num_threads(1)
    ex = example()
    out = common.OUT / "neuralhydrology"
    path = out / "camels.stk"
    t0 = time.perf_counter()
    frames, attrs = ex.demo_frames(a.basins, a.years, seed=0)
    print(f"frames: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    tag = out / f"made-{a.basins}-{a.years}"
    if not tag.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        ex.write_dataset(frames, attrs, path)
        tag.touch()
    start, end = "2001-01-01", f"{2000 + a.years - 1}-12-31"
    rows = sum(len(f) for f in frames.values())

    t0 = time.perf_counter()
    cfg = ex.config(start, end, seq_length=a.window, basins=list(frames),
                    run_dir=str(out / "nh-run"), batch_size=a.batch)
    ds = ex.neuralhydrology_dataset(frames, attrs, cfg)
    nh_build = time.perf_counter() - t0
    print(f"NeuralHydrology's Dataset: {len(ds):,} samples in {nh_build:.1f} s", file=sys.stderr)

    for p in path.glob("*"):
        if p.is_file():
            p.read_bytes()  # warm
    t0 = time.perf_counter()
    norm = ex.Normaliser(path, start, end, a.window)
    stats_s = time.perf_counter() - t0
    with ex.open_loader(path, start, end, a.batch, a.window) as ld:
        n_stk = ld._c.counts()["epoch_samples"]
    assert n_stk == len(ds), (n_stk, len(ds))

    loaders = {w: torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True,
                                              num_workers=w, collate_fn=ds.collate_fn)
               for w in (0, 2)}
    cases = {
        "NeuralHydrology, 0 workers": lambda r: run_nh(loaders[0], a.nh_batches),
        "NeuralHydrology, 2 workers": lambda r: run_nh(loaders[2], a.nh_batches),
        "stoker": lambda r: run_stoker(ex, path, start, end, norm, a.batch, a.window,
                                       a.stk_batches, r),
        "stoker, not normalised": lambda r: run_stoker(ex, path, start, end, None, a.batch,
                                                       a.window, a.stk_batches, r),
    }
    counted = {k: (a.stk_batches if k.startswith("stoker") else a.nh_batches) * a.batch
               for k in cases}
    names = list(cases)
    first = {k: [] for k in names}
    rate = {k: [] for k in names}
    for r in range(a.reps):
        for k in names[r % len(names):] + names[:r % len(names)]:
            f, t = cases[k](r)
            first[k].append(f)
            rate[k].append(counted[k] / t)
            print(f"rep {r} {k}: first batch {f:.3f} s, {rate[k][-1]:,.0f} samples/s",
                  file=sys.stderr)
    med = {k: statistics.median(v) for k, v in rate.items()}
    fmed = {k: statistics.median(v) for k, v in first.items()}
    best_nh = max(med[k] for k in names if not k.startswith("stoker"))
    base = med["NeuralHydrology, 0 workers"]
    lines = [
        "## NeuralHydrology's Dataset against stoker (issue 34)",
        "",
        f"Machine: {common.machine()}; the 2 cores are shared with other work. "
        f"neuralhydrology {importlib.metadata.version('neuralhydrology')}, torch {torch.__version__} (held to "
        f"one thread). {a.basins} CAMELS-like basins, {rows:,} daily rows "
        f"({a.years} years, some starting late) of 5 forcings, discharge and 5 static "
        "attributes, with NaN inputs on a few days, 3% NaN discharge, month-long holes in it "
        "and gaps in time (examples/neuralhydrology_lstm.py demo_frames). Training period "
        f"{start} to {end}, seq_length {a.window}, predict_last_n 1: {len(ds):,} samples, "
        "the same set in both (checked). Batches of "
        f"{a.batch}, shuffled, normalised by NeuralHydrology's scaler (stoker: stoker.stats, "
        "applied on the CPU by the example's Normaliser, batches in NeuralHydrology's shape). "
        "Warm (stoker's shards in the page cache; NeuralHydrology holds its data in memory). "
        f"Every contender in each of {a.reps} repetitions in rotating order, in one process; "
        f"rates over {a.nh_batches} batches (NeuralHydrology) or {a.stk_batches} (stoker) "
        "after the first; medians. Produced by `make bench`, which runs "
        f"`python bench/neuralhydrology.py` (here --basins {a.basins} --years {a.years} "
        f"--window {a.window} --batch {a.batch} --reps {a.reps}).",
        "",
        "| contender | samples/s | ratio to NeuralHydrology, 0 workers | first batch s |",
        "|---|---:|---:|---:|",
    ]
    for k in names:
        lines.append(f"| {k} | {med[k]:,.0f} | "
                     f"{'baseline' if k == names[0] else f'**{med[k] / base:.2f}**'} | "
                     f"{fmed[k]:.3f} |")
    lines += [
        "",
        f"Before its first batch NeuralHydrology builds its Dataset ({nh_build:.1f} s here, "
        "from frames in memory rather than its files: loading them into xarray, the scaler, the per-basin stds, validating every "
        "sample), once a run; stoker's counterpart is stoker.stats "
        f"({stats_s:.2f} s) and the Loader's open, which counts the validity rules and is "
        "inside its first-batch time. NeuralHydrology's first batch with workers includes "
        "forking them.",
        "",
        f"stoker delivers {med['stoker'] / best_nh:.1f}x the samples/s of NeuralHydrology's "
        "fastest setting here. Most of its time goes to the normalisation (torch on one "
        "thread: a subtraction and a division over every input and target, into new "
        "tensors): \"not normalised\" is the same Loader's batches as read, "
        f"{med['stoker, not normalised'] / med['stoker']:.1f}x as many. NeuralHydrology's "
        "workers share the two cores with the process they feed and hand every batch over "
        "through shared memory, which costs more here than the work they take off it.",
        "",
        "All repetitions (samples/s): " + "; ".join(
            f"{k}: " + ", ".join(f"{x:,.0f}" for x in rate[k]) for k in names),
        "",
        "First batch (s): " + "; ".join(
            f"{k}: " + ", ".join(f"{x:.3f}" for x in first[k]) for k in names),
    ]
    text = "\n".join(lines)
    print(text)
    if not a.no_write:
        common.write_section("neuralhydrology", text)


if __name__ == "__main__":
    main()
