"""stoker on the GPU, against the hardware and the user's DataLoader.

On a machine with an NVIDIA GPU and CUDA-enabled torch, in one run:
  1. host-to-device: stoker's batches arriving on the device (Loader(device=
     "cuda"), windows of 365 days x 16 features, batches of 256) against
     cudaMemcpyAsync of the same bytes from page-locked memory (torch's
     non_blocking copy of a pinned tensor), GB/s, alternating, medians;
  2. training: a small LSTM on the basin-windows workload, the GPU's busy
     share (CUDA events around every step: the time between one step's end
     and the next one's start is the GPU waiting for data), fed by stoker and
     by the user's DataLoader (bench/contenders.py's basin windows: a
     map-style Dataset cutting each window from its basin's Parquet file,
     read with polars and kept in a file cache behind one lock, 10 workers);
  3. device-resident batches: samples/s with the dataset assembled on the GPU,
     beside copied batches;
  4. a mixture on the device: the basins packed as three datasets (every
     third basin each) and mixed at their sizes' weights, against the one
     dataset, batches on the device and in host memory.
Without a GPU it writes the section saying so: no figure is estimated.

    python bench/gpu.py [--reps N]
"""
import argparse
import os
import sys
import time

import numpy as np

from common import OUT, machine, median, write_section
import workloads as W

TITLE = "## On the GPU (issue: GPU)"


def not_measured(why):
    text = "\n".join([
        TITLE, "",
        f"Machine: {machine()}.", "",
        f"**Not measured**: {why}. These figures need a machine with an NVIDIA GPU; "
        "`make bench` there runs bench/gpu.py and fills this section. None is estimated.", "",
        "| figure | value |", "|---|---:|",
        "| stoker batches host-to-device / cudaMemcpyAsync from pinned memory | not measured |",
        "| GPU busy share, LSTM on basin windows, fed by stoker | not measured |",
        "| GPU busy share, same model, fed by the user's DataLoader | not measured |",
        "| device-resident batches, samples/s | not measured |",
    ])
    print(text)
    write_section("gpu", text)


def h2d_baseline(torch, nbytes, n):
    src = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        dst.copy_(src, non_blocking=True)
        s.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            dst.copy_(src, non_blocking=True)
        s.synchronize()
    return nbytes * n / (time.perf_counter() - t) / 1e9


def mixture_parts(p, d, k=3):
    """The basins as k datasets, basin b in part b % k (packed as the one
    dataset is, from links to its Parquet files); their paths and samples."""
    import stoker
    paths = []
    for j in range(k):
        dj = d / f"mixpart{j}"
        out = dj / "stoker.stk"
        if not (dj / ".done").exists():
            src = dj / "src"
            src.mkdir(parents=True, exist_ok=True)
            for b in range(j, p["basins"], k):
                f = src / f"basin_{b:05d}.parquet"
                if not f.exists():
                    f.symlink_to(d / "src" / f.name)
            W.to_stoker(p, dj)
            (dj / ".done").write_text("ok")
        paths.append(str(out))
    sizes = []
    for path in paths:
        with stoker.Loader(path, batch_size=256, window=W.WINDOW, fields=["x", "y"]) as ld:
            sizes.append(ld.counts()["epoch_samples"])
    return paths, sizes


def mixture_sources(paths, sizes):
    import stoker
    return [stoker.Source(q, float(n), window=W.WINDOW, fields=["x", "y"])
            for q, n in zip(paths, sizes)]


def stoker_rate(torch, path, n, device="cuda", **kw):
    """(GB/s of batch data on the device, samples/s) over n batches; with
    device=None, of host batches (the same loader without its GPU stage).
    `path` may be a mixture's list of sources."""
    import stoker
    if isinstance(path, list):
        kw = dict(kw, exhaust="all", source_field=None)
    else:
        kw = dict(kw, window=W.WINDOW, fields=["x", "y"])
    with stoker.Loader(path, batch_size=256, shuffle="random", device=device, **kw) as ld:
        it = iter(ld)
        b = next(it)
        torch.cuda.synchronize()
        t = time.perf_counter()
        nbytes = samples = 0
        for _ in range(n):
            b = next(it, None)
            if b is None:
                ld.set_epoch(ld.epoch + 1)
                it = iter(ld)
                b = next(it)
            nbytes += sum(v.numel() * v.element_size() for v in b.values())
            samples += b["x"].shape[0]
            # The consumer's stream has waited for the copy; touching the
            # data makes the figure the rate at which batches are usable.
            b["x"].view(-1)[:1].add_(0)
        torch.cuda.synchronize()
        el = time.perf_counter() - t
    return nbytes / el / 1e9, samples / el


class LSTM:
    def __init__(self, torch):
        nn = torch.nn
        self.torch = torch
        self.net = nn.LSTM(len(W.FEATURES), 64, batch_first=True).cuda()
        self.head = nn.Linear(64, 1).cuda()
        self.opt = torch.optim.Adam(list(self.net.parameters()) + list(self.head.parameters()))

    def step(self, x, y):
        out, _ = self.net(x)
        loss = ((self.head(out[:, -1]).squeeze(-1) - y) ** 2).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


def busy_share(torch, batches, steps):
    """Trains on `batches` (an iterator of (x, y) on the device) for `steps`
    steps after 5 warm-up steps; returns (GPU busy share, steps/s)."""
    model = LSTM(torch)
    for _ in range(5):
        model.step(*next(batches))
    torch.cuda.synchronize()
    ev = []
    t = time.perf_counter()
    for _ in range(steps):
        x, y = next(batches)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        model.step(x, y)
        b.record()
        ev.append((a, b))
    torch.cuda.synchronize()
    el = time.perf_counter() - t
    busy = sum(a.elapsed_time(b) for a, b in ev)
    span = ev[0][0].elapsed_time(ev[-1][1])
    return busy / span, steps / el


def stoker_batches(torch, path):
    import stoker
    ld = stoker.Loader(path, batch_size=256, window=W.WINDOW, fields=["x", "y"],
                       shuffle="random", device="cuda")
    while True:
        for b in ld:
            y = b["y"]
            yield b["x"], y.reshape(y.shape[0], W.WINDOW, -1)[:, -1, 0]


def report_batches(torch, p, d):
    import contenders
    Ds, Sampler = contenders.basin_report_classes(torch, p, d)
    ds = Ds()
    dl = torch.utils.data.DataLoader(ds, batch_sampler=Sampler(ds, W.BATCH["basins"]),
                                     num_workers=10)
    for x, y in dl:
        yield x.cuda(non_blocking=True), y.cuda(non_blocking=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    import stoker
    n_gpu, why = stoker.gpu_status()
    try:
        import torch
        torch_cuda = torch.cuda.is_available()
    except ImportError:
        torch, torch_cuda = None, False
    if n_gpu == 0:
        return not_measured(why)
    if not torch_cuda:
        return not_measured("torch here has no CUDA (the CPU build); stoker itself sees "
                            f"{n_gpu} GPU(s)")
    p, d = W.prepare("basins", "quick", formats=("stoker",))
    path = d / "stoker.stk"
    gpu_name = torch.cuda.get_device_name(0)
    batch_bytes = 256 * W.WINDOW * (len(W.FEATURES) + 1) * 4
    mparts, msizes = mixture_parts(p, d)
    mix = mixture_sources(mparts, msizes)
    res = {"memcpy": [], "host": [], "copied": [], "copied4": [], "resident": [],
           "copied_sps": [], "resident_sps": [], "mix_copied": [], "mix_host": []}
    for _ in range(a.reps):
        res["memcpy"].append(h2d_baseline(torch, batch_bytes, 400))
        res["host"].append(stoker_rate(torch, path, 400, device=None, output="torch")[0])
        res["copied4"].append(stoker_rate(torch, path, 400, threads=4)[0])
        g, sps = stoker_rate(torch, path, 400)
        res["copied"].append(g)
        res["copied_sps"].append(sps)
        g, sps = stoker_rate(torch, path, 400, resident_budget=8 << 30)
        res["resident"].append(g)
        res["resident_sps"].append(sps)
        res["mix_copied"].append(stoker_rate(torch, mix, 400)[0])
        res["mix_host"].append(stoker_rate(torch, mix, 400, device=None, output="torch")[0])
    busy = {"stoker": [], "report": []}
    steps = {"stoker": [], "report": []}
    for _ in range(a.reps):
        b, s = busy_share(torch, stoker_batches(torch, path), 200)
        busy["stoker"].append(b)
        steps["stoker"].append(s)
        b, s = busy_share(torch, report_batches(torch, p, d), 60)
        busy["report"].append(b)
        steps["report"].append(s)
    m = {k: median(v) for k, v in res.items()}
    text = "\n".join([
        TITLE, "",
        f"Machine: {machine()}; GPU: {gpu_name}. bench/gpu.py, {a.reps} repetitions alternating, "
        f"medians. Basin windows ({p['basins']} basins, quick mode): windows of 365 days x 16 "
        "features plus the target, batches of 256, `random`. The user's DataLoader is the basin "
        "windows' user's loader of the suite above: a map-style Dataset cutting each window from "
        "its basin's Parquet file, read with polars and kept in a file cache behind one lock, in "
        "a DataLoader with 10 workers.", "",
        "| figure | stoker | baseline (same run) | ratio |", "|---|---:|---:|---:|",
        f"| batches arriving on the device, GB/s | {m['copied']:.2f} | cudaMemcpyAsync of "
        f"{batch_bytes / 2**20:.1f} MiB from pinned memory: {m['memcpy']:.2f} | "
        f"**{m['copied'] / m['memcpy']:.2f}** |",
        f"| the same loader's host batches (no GPU stage), GB/s | {m['host']:.2f} | batches "
        f"arriving on the device: {m['copied']:.2f} | {m['copied'] / m['host']:.2f} |",
        f"| batches arriving on the device, 4 threads, GB/s | {m['copied4']:.2f} | default "
        f"threads ({min(os.cpu_count(), 8)}): {m['copied']:.2f} | {m['copied4'] / m['copied']:.2f} |",
        f"| GPU busy share, 1-layer LSTM (64) | {median(busy['stoker']):.3f} | the user's "
        f"DataLoader: {median(busy['report']):.3f} | |",
        f"| training steps/s | {median(steps['stoker']):.1f} | the user's DataLoader: "
        f"{median(steps['report']):.1f} | {median(steps['stoker']) / median(steps['report']):.1f}x |",
        f"| device-resident batches, samples/s | {m['resident_sps']:,.0f} | copied batches: "
        f"{m['copied_sps']:,.0f} | {m['resident_sps'] / m['copied_sps']:.1f}x |",
        f"| a 3-source mixture of the same basins, batches on the device, GB/s | "
        f"{m['mix_copied']:.2f} | the one dataset: {m['copied']:.2f} | "
        f"**{m['mix_copied'] / m['copied']:.2f}** |",
        f"| the same mixture, host batches, GB/s | {m['mix_host']:.2f} | the one dataset: "
        f"{m['host']:.2f} | {m['mix_host'] / m['host']:.2f} |", "",
        "All runs: " + "; ".join(f"{k}: " + ", ".join(f"{x:.3g}" for x in v)
                                 for k, v in list(res.items()) + list(busy.items())),
    ])
    print(text)
    write_section("gpu", text)


if __name__ == "__main__":
    sys.exit(main())
