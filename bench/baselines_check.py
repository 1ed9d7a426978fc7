"""Checks that the in-process baselines (bench/baselines.py) deliver the
suite's samples: for each workload and each of numpy, tdn, spdl and grain,
(and grain with Grain's own shuffle) the first two batches are compared, sample for sample, with the workload's
source data (Parquet, WAV, HDF5) at the sample numbers each batch names.
Not a timing: run it after changing baselines.py or the suite's writers.

    python bench/baselines_check.py [--workloads basins,events] [--full]
"""
import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import baselines  # noqa: E402
import workloads as W  # noqa: E402


def source_sample(p, d, i, cache):
    """Sample i as the source holds it: a dict of arrays."""
    name = p["workload"]
    if name == "basins":
        import pyarrow.parquet as pq
        if "first" not in cache:
            rows = 365 * W._basin_years(p)
            nwin = rows - W.WINDOW + 1
            cache["first"] = np.concatenate([[0], np.cumsum(nwin)])
        b = int(np.searchsorted(cache["first"], i, side="right") - 1)
        t = int(i - cache["first"][b])
        if b not in cache:
            tb = pq.read_table(d / "src" / f"basin_{b:05d}.parquet", columns=W.FEATURES + ["q"])
            cache[b] = (np.stack([tb.column(c).to_numpy() for c in W.FEATURES], axis=1),
                        tb.column("q").to_numpy())
        x, q = cache[b]
        return {"x": x[t:t + W.WINDOW], "y": q[t:t + W.WINDOW]}
    if name == "events":
        if "recs" not in cache:
            cache["recs"] = [r["x"] for r in W.all_records(p, d)]
        return {"x": cache["recs"][i]}
    if name == "audio":
        import soundfile as sf
        return {"pcm": sf.read(W.clip_path(d / "src", i), dtype="int16")[0]}
    import h5py
    if name == "spectro":
        with h5py.File(d / "src" / "segments.h5", "r") as h:
            return {"x": h["segs"][i], "y": h["labels"][i]}
    with h5py.File(d / "src" / "bloom.h5", "r") as h:
        return {"bits": np.frombuffer(h["bloomfilter"][i], np.uint8) - ord("0")}


def samples_of(b):
    """The batch's samples, one dict per sample number."""
    for j, i in enumerate(b["index"]):
        out = {}
        for k, v in b.items():
            if k == "index" or k.endswith("_offsets"):
                continue
            off = b.get(k + "_offsets")
            out[k] = v[off[j]:off[j + 1]] if off is not None else v[j]
        yield int(i), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="basins,events,audio,spectro,bits")
    ap.add_argument("--full", action="store_true")
    a = ap.parse_args()
    bad = 0
    for name in a.workloads.split(","):
        p, d = W.prepare(name, "full" if a.full else "quick")
        ds = baselines.open_dataset(d / "npy")
        ar = str(d / "arrayrecord" / "data.array_record")
        cache = {}
        for system, kw in [(s, {}) for s in baselines.SYSTEMS] + [("grain", {"shuffle": "grain"})]:
            it = baselines.batches(system, ar if system == "grain" else ds, W.BATCH[name], seed=7, **kw)
            checked = 0
            for b in itertools.islice(it, 2):
                assert len(b["index"]) == W.BATCH[name], (system, len(b["index"]))
                for i, got in samples_of(b):
                    want = source_sample(p, d, i, cache)
                    for k, v in want.items():
                        if not (got[k].dtype == np.asarray(v).dtype and np.array_equal(got[k], v)):
                            print(f"{name} {system}: sample {i} field {k} differs")
                            bad += 1
                    checked += 1
            shapes = {k: (v.shape, str(v.dtype)) for k, v in b.items() if k != "index"}
            label = system + (" (Grain's shuffle)" if kw else "")
            print(f"{name:8s} {label:24s} {checked} samples equal the source; last batch {shapes}")
    print("baselines_check: " + ("all equal" if not bad else f"{bad} differences"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
