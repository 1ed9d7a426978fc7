"""The five users' workloads: deterministic generators, and the same data
converted to every contender's format (untimed).

Each workload writes its data once under bench/out/suite/NAME-KEY/, where KEY
hashes the parameters, so a second run with the same size reuses it:

  src/        the data the way its user keeps it (Parquet per basin,
              Parquet files of events, WAV files, one HDF5 file)
  stoker.stk  packed by `stoker pack` or stoker.write
  wds/        WebDataset tar shards (one .npy member per field)
  mds/        MosaicML Streaming MDS shards
  litdata/    LitData chunks (litdata.optimize)
  npy/        flat raw files read as NumPy memmaps, with offsets for ragged
              records and per-basin row offsets for windows (bench/baselines.py)
  arrayrecord/  ArrayRecord file of the same samples, for Grain (bench/baselines.py)

Every format holds the same arrays; nothing is downloaded.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from common import OUT, STOKER

SUITE = OUT / "suite"
FEATURES = [f"f{i:02d}" for i in range(16)]
SR = 16000

# Sizes: full is the users' full scale, quick a few minutes' worth.
SIZES = {
    "basins": {"quick": {"basins": 200}, "full": {"basins": 10000}},
    "events": {"quick": {"events": 40000, "files": 30}, "full": {"events": 900000, "files": 660}},
    "audio": {"quick": {"clips": 6000}, "full": {"clips": 51000}},
    "spectro": {"quick": {"files": 2000}, "full": {"files": 7913}},
    "bits": {"quick": {"rows": 50000}, "full": {"rows": 1000000}},
}
BATCH = {"basins": 256, "events": 256, "audio": 256, "spectro": 5632, "bits": 1024}
WINDOW = 365
SEGS_PER_FILE, SEG_SHAPE = 64, (64, 4)   # 1 KiB float32 segments
BITS = 1024


def params(name, mode):
    return dict(SIZES[name][mode], workload=name, seed=1)


def wl_dir(p):
    key = hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest()[:10]
    return SUITE / f"{p['workload']}-{key}"


# -- sources: the data as each user keeps it -------------------------------

def _basin_years(p):
    return np.random.default_rng([p["seed"], 0]).integers(10, 31, size=p["basins"])


def gen_basins(p, d):
    import pyarrow as pa
    import pyarrow.parquet as pq
    years = _basin_years(p)
    d.mkdir(parents=True, exist_ok=True)
    for b in range(p["basins"]):
        days = 365 * int(years[b])
        rng = np.random.default_rng([p["seed"], 1, b])
        t = np.arange(days)
        season = np.sin(2 * np.pi * t / 365.25 + rng.uniform(0, 2 * np.pi)).astype(np.float32)
        cols = {"basin": pa.array(np.full(days, b, dtype=np.int32)),
                "date": pa.array((np.datetime64("1980-01-01") + t).astype("datetime64[D]"))}
        noise = rng.standard_normal((len(FEATURES), days), dtype=np.float32)
        for k, name in enumerate(FEATURES):
            cols[name] = (1 + 0.5 * season * (k + 1) / 16 + 0.1 * noise[k]).astype(np.float32)
        cols["q"] = (0.3 * cols["f00"] + 0.2 * np.roll(cols["f01"], 3)).astype(np.float32)
        pq.write_table(pa.table(cols), d / f"basin_{b:05d}.parquet")


def event_lengths(p):
    rng = np.random.default_rng([p["seed"], 0])
    return rng.integers(10, 501, size=p["events"]).astype(np.int64)


def event_files(p):
    """Events per file: as even a split as the count allows."""
    per = np.full(p["files"], p["events"] // p["files"])
    per[: p["events"] % p["files"]] += 1
    return np.concatenate([[0], np.cumsum(per)])


def gen_events(p, d):
    import pyarrow as pa
    import pyarrow.parquet as pq
    d.mkdir(parents=True, exist_ok=True)
    lens, bounds = event_lengths(p), event_files(p)
    for f in range(p["files"]):
        a, b = bounds[f], bounds[f + 1]
        n = int(lens[a:b].sum())
        rng = np.random.default_rng([p["seed"], 1, f])
        vals = rng.standard_normal((6, n), dtype=np.float32)
        cols = {"event_id": pa.array(np.repeat(np.arange(a, b), lens[a:b]))}
        for k in range(6):
            cols[f"c{k}"] = vals[k]
        pq.write_table(pa.table(cols), d / f"events_{f:04d}.parquet", row_group_size=1 << 20)
    # The per-file event counts and row offsets: the metadata such a dataset
    # keeps next to its files so that an index does not need a full scan.
    np.savez(d / "index.npz", lens=lens, bounds=bounds)


def clip_lengths(p):
    rng = np.random.default_rng([p["seed"], 0])
    return (rng.uniform(1, 5, size=p["clips"]) * SR).astype(np.int64)


def clip_path(d, i):
    return d / f"{i // 1000:03d}" / f"clip_{i:06d}.wav"


def gen_audio(p, d):
    import soundfile as sf
    lens = clip_lengths(p)
    for i in range(p["clips"]):
        rng = np.random.default_rng([p["seed"], 1, i])
        f = clip_path(d, i)
        f.parent.mkdir(parents=True, exist_ok=True)
        t = np.arange(lens[i], dtype=np.float32) / SR
        x = 0.3 * np.sin(2 * np.pi * rng.uniform(100, 2000) * t) + 0.05 * rng.standard_normal(lens[i])
        sf.write(f, (x * 32767).astype(np.int16), SR, subtype="PCM_16")


def gen_spectro(p, d):
    import h5py
    d.mkdir(parents=True, exist_ok=True)
    n = p["files"] * SEGS_PER_FILE
    with h5py.File(d / "segments.h5", "w") as h:
        segs = h.create_dataset("segs", shape=(n, *SEG_SHAPE), dtype="f4",
                                chunks=(256, *SEG_SHAPE))  # chunked, uncompressed
        labels = np.random.default_rng([p["seed"], 0]).integers(0, 2, size=p["files"])
        h.create_dataset("labels", data=np.repeat(labels, SEGS_PER_FILE).astype(np.int64))
        h.create_dataset("file_ids", data=np.repeat(np.arange(p["files"]), SEGS_PER_FILE))
        step = 65536
        for a in range(0, n, step):
            rng = np.random.default_rng([p["seed"], 1, a])
            segs[a:a + step] = rng.standard_normal((min(step, n - a), *SEG_SHAPE), dtype=np.float32)


def gen_bits(p, d):
    import h5py
    d.mkdir(parents=True, exist_ok=True)
    with h5py.File(d / "bloom.h5", "w") as h:
        bf = h.create_dataset("bloomfilter", shape=(p["rows"],), dtype=f"S{BITS}")
        h.create_dataset("uid", data=np.arange(p["rows"], dtype=np.int64))
        step = 100000
        for a in range(0, p["rows"], step):
            rng = np.random.default_rng([p["seed"], 1, a])
            bits = (rng.random((min(step, p["rows"] - a), BITS)) < 0.3).astype(np.uint8)
            bf[a:a + len(bits)] = (bits + ord("0")).view(f"S{BITS}").ravel()


GEN = {"basins": gen_basins, "events": gen_events, "audio": gen_audio, "spectro": gen_spectro,
       "bits": gen_bits}


# -- records: the same samples, read back from the source ---------------------

def parts(p):
    """Units of the source that a converter takes one at a time."""
    n = {"basins": p.get("basins"), "events": p.get("files"), "audio": (p.get("clips", 0) + 999) // 1000,
         "spectro": 16, "bits": 16}[p["workload"]]
    return list(range(n))


def records(p, d, part):
    """The samples of one part, as dicts of NumPy arrays (every format stores these)."""
    name, src = p["workload"], d / "src"
    if name == "basins":
        import pyarrow.parquet as pq
        t = pq.read_table(src / f"basin_{part:05d}.parquet", columns=FEATURES)
        yield {"x": np.stack([t.column(c).to_numpy() for c in FEATURES], axis=1)}
    elif name == "events":
        import pyarrow.parquet as pq
        t = pq.read_table(src / f"events_{part:04d}.parquet")
        vals = np.stack([t.column(f"c{k}").to_numpy() for k in range(6)], axis=1)
        lens = event_lengths(p)[event_files(p)[part]:event_files(p)[part + 1]]
        off = np.concatenate([[0], np.cumsum(lens)])
        for i in range(len(lens)):
            yield {"x": vals[off[i]:off[i + 1]]}
    elif name == "audio":
        import soundfile as sf
        for i in range(part * 1000, min((part + 1) * 1000, p["clips"])):
            pcm, _ = sf.read(clip_path(src, i), dtype="int16")
            yield {"pcm": pcm}
    else:
        import h5py
        fname, key = ("segments.h5", "segs") if name == "spectro" else ("bloom.h5", "bloomfilter")
        with h5py.File(src / fname, "r") as h:
            n = len(h[key])
            a, b = n * part // 16, n * (part + 1) // 16
            if name == "spectro":
                x, y = h["segs"][a:b], h["labels"][a:b]
                for i in range(b - a):
                    yield {"x": x[i], "y": y[i]}
            else:
                raw = h["bloomfilter"][a:b]
                bits = np.frombuffer(raw.tobytes(), np.uint8).reshape(b - a, BITS) - ord("0")
                for i in range(b - a):
                    yield {"bits": bits[i]}


def all_records(p, d):
    for part in parts(p):
        yield from records(p, d, part)


# -- conversions --------------------------------------------------------------

def to_stoker(p, d):
    out = d / "stoker.stk"
    if p["workload"] == "basins":
        env = dict(os.environ, STOKER_PYTHON=sys.executable)
        subprocess.run([str(STOKER), "pack", "--from", "parquet", str(d / "src"), "--group-by", "basin",
                        "--order-by", "date", "--field", "x=" + ",".join(FEATURES), "--field", "y=q",
                        "-o", str(out), "--force", "--no-sync", "-q"], check=True, env=env)
        return
    import stoker
    if p["workload"] in ("spectro", "bits"):
        import h5py
        with h5py.File(d / "src" / ("segments.h5" if p["workload"] == "spectro" else "bloom.h5")) as h:
            if p["workload"] == "spectro":
                src = {"x": h["segs"][:], "y": h["labels"][:]}
            else:
                raw = h["bloomfilter"][:]
                src = {"bits": np.frombuffer(raw.tobytes(), np.uint8).reshape(len(raw), BITS) - ord("0")}
        stoker.write(out, src, overwrite=True, sync=False)
    else:
        field = "x" if p["workload"] == "events" else "pcm"
        stoker.write(out, all_records(p, d), overwrite=True, sync=False, ragged=[field])


def to_wds(p, d):
    import webdataset as wds
    out = d / "wds"
    out.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(out / "shard-%05d.tar"), maxsize=64 << 20, maxcount=10**7, verbose=0) as w:
        for i, rec in enumerate(all_records(p, d)):
            w.write({"__key__": f"{i:09d}", **{f"{k}.npy": np.asarray(v) for k, v in rec.items()}})


def _mds_columns(name):
    return {"basins": {"x": "ndarray:float32"}, "events": {"x": "ndarray:float32"},
            "audio": {"pcm": "ndarray:int16"},
            "spectro": {"x": "ndarray:float32:" + ",".join(map(str, SEG_SHAPE)), "y": "int"},
            "bits": {"bits": f"ndarray:uint8:{BITS}"}}[name]


def to_mds(p, d):
    import peerimport
    streaming = peerimport.streaming()
    out = d / "mds"
    shutil.rmtree(out, ignore_errors=True)
    with streaming.MDSWriter(out=str(out), columns=_mds_columns(p["workload"]),
                             size_limit=64 << 20) as w:
        for rec in all_records(p, d):
            w.write({k: (int(v) if k == "y" else v) for k, v in rec.items()})


def _lit_fn(item):
    """litdata.optimize's function (top level, so that its workers can import it)."""
    p, d, part = item
    yield from records(p, Path(d), part)


def to_litdata(p, d):
    import litdata
    out = d / "litdata"
    shutil.rmtree(out, ignore_errors=True)
    litdata.optimize(fn=_lit_fn, inputs=[(p, str(d), part) for part in parts(p)], output_dir=str(out),
                     chunk_bytes="64MB", num_workers=2, mode="overwrite", verbose=False,
                     start_method="fork")


def _h5_chunks(path, key, step=65536):
    import h5py
    with h5py.File(path, "r") as h:
        n = len(h[key])
        for a in range(0, n, step):
            yield h[key][a:a + step]


def to_npy(p, d):
    """The baselines' raw layout (bench/baselines.py): one flat file per field."""
    import baselines
    name, out = p["workload"], d / "npy"
    shutil.rmtree(out, ignore_errors=True)
    if name == "basins":
        import pyarrow.parquet as pq

        def series():
            for b in range(p["basins"]):
                t = pq.read_table(d / "src" / f"basin_{b:05d}.parquet", columns=FEATURES + ["q"])
                yield {"x": np.stack([t.column(c).to_numpy() for c in FEATURES], axis=1),
                       "y": t.column("q").to_numpy()}
        baselines.write_series(out, series(), WINDOW)
    elif name in ("events", "audio"):
        key = "x" if name == "events" else "pcm"
        baselines.write_ragged(out, (r[key] for r in all_records(p, d)), name=key)
    elif name == "spectro":
        h5 = d / "src" / "segments.h5"
        baselines.write_fixed(out, {"x": _h5_chunks(h5, "segs"), "y": _h5_chunks(h5, "labels")})
    else:
        def bits():
            for raw in _h5_chunks(d / "src" / "bloom.h5", "bloomfilter"):
                yield np.frombuffer(raw.tobytes(), np.uint8).reshape(len(raw), BITS) - ord("0")
        baselines.write_fixed(out, {"bits": bits()})


def to_arrayrecord(p, d):
    """The same samples as one ArrayRecord file, made from the raw layout."""
    import baselines
    out = d / "arrayrecord"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    baselines.write_array_record(baselines.open_dataset(d / "npy"), out / "data.array_record")


FORMATS = {"stoker": to_stoker, "wds": to_wds, "mds": to_mds, "litdata": to_litdata, "npy": to_npy,
           "arrayrecord": to_arrayrecord}


def prepare(name, mode, formats=("stoker", "wds", "mds", "litdata", "npy", "arrayrecord"), log=print):
    """Generates a workload's source data and its conversions, each once."""
    p = params(name, mode)
    d = wl_dir(p)
    d.mkdir(parents=True, exist_ok=True)
    (d / "params.json").write_text(json.dumps(p, sort_keys=True))
    steps = [("src", lambda: GEN[name](p, d / "src"))] + [(f, lambda f=f: FORMATS[f](p, d)) for f in formats]
    for step, fn in steps:
        stamp = d / f".done-{step}"
        if stamp.exists():
            continue
        log(f"  {name}: making {step}")
        fn()
        stamp.write_text("ok")
    return p, d


def files_of(d, fmt):
    """The files a contender reads, for evicting them from the page cache."""
    root = {"src": d / "src", "stoker": d / "stoker.stk", "wds": d / "wds", "mds": d / "mds",
            "litdata": d / "litdata", "npy": d / "npy", "arrayrecord": d / "arrayrecord"}[fmt]
    return sorted(str(f) for f in root.rglob("*") if f.is_file())


def payload_bytes(p):
    """Mean bytes of one sample's payload (the arrays a batch delivers)."""
    name = p["workload"]
    if name == "basins":
        return WINDOW * len(FEATURES) * 4
    if name == "events":
        return float(event_lengths(p).mean()) * 6 * 4
    if name == "audio":
        return float(clip_lengths(p).mean()) * 2
    if name == "spectro":
        return int(np.prod(SEG_SHAPE)) * 4
    return BITS
