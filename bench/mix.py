"""The cost of mixing: a 3-source mixture against one dataset holding the
same samples, side by side in one run (warm: every shard in the page
cache), medians of several repetitions with the contenders in turn.

Contenders, one epoch each, batches taken and dropped as a training loop
would, in random order and in block order:
  - one dataset of all the samples (stoker.Loader), with its default
    threads and with one (the better of the two is the baseline);
  - the same samples as three datasets of 4:2:1 records, mixed at their
    sizes' weights with exhaust="all" (every sample once), batches mixing
    the sources (drawn: the mixture's workers read each source's samples
    straight into the batch);
  - the same three, homogeneous batches (each of one source).
Two record sizes: 256 B (the per-batch work dominates) and 16 KiB (the
copy does).  Writes its section of BENCHMARKS.md.
"""
import argparse
import os
import resource
import time

import numpy as np

from common import OUT, machine, median, write_section

import stoker


def make(d, n, rec_bytes, parts):
    k = rec_bytes // 4
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, k - 2), dtype=np.float32)
    y = np.arange(n, dtype=np.int64)
    stoker.write(d / "all", {"x": x, "y": y}, overwrite=True)
    paths, lo = [], 0
    for i, w in enumerate(parts):
        hi = lo + n * w // sum(parts)
        stoker.write(d / f"part{i}", {"x": x[lo:hi], "y": y[lo:hi]}, overwrite=True)
        paths.append(d / f"part{i}")
        lo = hi
    return d / "all", paths


def cpu_seconds():
    """CPU time of this process so far (every thread, user and system)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def thread_cpu_ns():
    """CPU time of each thread of this process, by thread id (Linux: the
    thread's CPU-time clock, made from its id)."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            out[int(t)] = time.clock_gettime_ns((~int(t) << 3) | 6)
        except OSError:  # a thread that ended
            pass
    return out


def loader_threads():
    """The ids of stoker's threads (named "stk-..."), as they are now."""
    ids = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                if f.read().startswith("stk-"):
                    ids.append(int(t))
        except OSError:
            pass
    return ids


def epoch_rate(make_loader):
    """Samples per second over one epoch, and CPU nanoseconds per sample:
    the whole process's, and the loader's own threads' (its workers: no
    consumer, waiting or spinning in it)."""
    with make_loader() as ld:
        next(iter(ld))  # start-up (threads, first reads) left out of both
        ld.set_epoch(0)
        t0 = time.perf_counter()
        c0 = cpu_seconds()
        w0 = thread_cpu_ns()
        n = 0
        for b in ld:
            n += len(b["y"])
        el = time.perf_counter() - t0
        cpu = cpu_seconds() - c0
        w1 = thread_cpu_ns()
        work = sum(w1[t] - w0.get(t, 0) for t in loader_threads() if t in w1)
    return n / el, cpu / n * 1e9, work / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--small", type=int, default=700_000)
    ap.add_argument("--large", type=int, default=35_000)
    a = ap.parse_args()
    d = OUT / "mix"
    cases = [("256 B", 256, a.small), ("16 KiB", 16384, a.large)]
    lines = []
    raw = []
    for label, rb, n in cases:
        one, parts = make(d / label.replace(" ", ""), n, rb, (4, 2, 1))
        B = 256
        for order in ("random", "block"):
            def mixture(homogeneous, threads=0, order=order):
                return stoker.Loader([stoker.Source(p, w) for p, w in zip(parts, (4, 2, 1))], B,
                                     exhaust="all", shuffle=order, homogeneous=homogeneous,
                                     threads=threads)
            contenders = {
                "one dataset": lambda order=order: stoker.Loader(one, B, shuffle=order),
                "one dataset, 1 thread": lambda order=order: stoker.Loader(
                    one, B, shuffle=order, threads=1),
                "1 source (the whole dataset) as a mixture": lambda order=order: stoker.Loader(
                    [stoker.Source(one, 1)], B, shuffle=order),
                "3 sources, mixed batches": lambda: mixture(False),
                "3 sources, mixed batches, 1 thread": lambda: mixture(False, 1),
                "3 sources, homogeneous": lambda: mixture(True),
            }
            res = {k: [] for k in contenders}
            cpu = {k: [] for k in contenders}
            work = {k: [] for k in contenders}
            for _ in range(a.reps):
                for k, mk in contenders.items():
                    r, c, w = epoch_rate(mk)
                    res[k].append(r)
                    cpu[k].append(c)
                    work[k].append(w)
            # Against the single dataset at its better setting (its default
            # thread count, or one thread, which leaves the consumer a core);
            # CPU time against the single dataset's at the same setting.
            base = max(median(res["one dataset"]), median(res["one dataset, 1 thread"]))
            for k, v in res.items():
                m = median(v)
                c = median(cpu[k])
                like = "one dataset, 1 thread" if "1 thread" in k else "one dataset"
                c1 = median(cpu[like])
                w, w1 = median(work[k]), median(work[like])
                lines.append(f"| {label} | {order} | {k} | {m / 1e6:.2f} | {m / base:.2f} | "
                             f"{c:.0f} | {c / c1:.2f} | {w:.0f} | {w / w1:.2f} |")
                raw.append(f"{label} {order} {k}: " + ", ".join(f"{x / 1e6:.2f}" for x in v))
    text = f"""## Mixing several datasets (issue: mixing)

Machine: {machine()}. Medians of {a.reps} repetitions, the contenders in turn in each. Produced by `make bench` (bench/mix.py).

The same samples (x float32 and a label y; {a.small:,} records of 256 B, and {a.large:,} of 16 KiB) as one dataset and as three datasets of 4:2:1 of them, mixed at those weights with `exhaust="all"` (so each epoch reads every sample once, as the single dataset's does). Warm (all in the page cache), random or block order, batches of 256, one epoch after a first batch of start-up; M samples/s.

| records | order | way | M samples/s | against one dataset (its better setting) | CPU ns a sample | against one dataset (same threads) | workers' CPU ns a sample | against one dataset (same threads) |
|---|---|---|---:|---:|---:|---:|---:|---:|
""" + "\n".join(lines) + """

The mixture of one source, the whole dataset, isolates what mixing itself costs (the schedule, the walk over each batch's places, a draw per source); three datasets also cost what three datasets do: their random orders are permutations of their own sizes, and each batch starts three reads (a draw each) instead of one.

CPU time is the whole process's (workers and the consumer, user and system) over the epoch, a sample's share; the workers' is that of the loader's own threads alone (each thread's CPU clock), which is the cost of the loading itself: no consumer, and none of its waiting or spinning. They are the steadier measures at 256 B: with two workers beside the consumer on two cores, throughput swings between repetitions (the spread below) with how the three threads meet on the cores, while the work done varies little. The "1 thread" rows leave the consumer a core of its own, on which it spins for a batch being filled (docs/ARCHITECTURE.md, "The consumer's wait"), so their process CPU time grows with the time spent waiting; they are compared with the single dataset at one thread.

Mixed and homogeneous batches are drawn: the mixture's workers (the threads one loader would have) read each source's samples straight into the batch, through that source's own reads, so a mixed batch costs what a loader's does (docs/ARCHITECTURE.md, "Mixtures"). With 16 KiB records the copy bounds every way.

All repetitions (M samples/s): """ + "; ".join(raw) + "\n"
    write_section("mix", text)
    print(text)


if __name__ == "__main__":
    main()
