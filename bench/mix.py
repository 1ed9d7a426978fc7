"""The cost of mixing: a 3-source mixture against one dataset holding the
same samples, side by side in one run (warm: every shard in the page
cache), medians of several repetitions with the contenders in turn.

Contenders, the second epoch of each (the first takes the start-up), batches
taken and dropped as a training loop
would, in random order and in block order:
  - one dataset of all the samples (stoker.Loader), with its default
    threads and with one (the better of the two is the baseline);
  - the same samples as three datasets of 4:2:1 records, mixed at their
    sizes' weights with exhaust="all" (every sample once), batches mixing
    the sources (drawn: the mixture's workers read each source's samples
    straight into the batch);
  - the same three, homogeneous batches (each of one source);
  - in block order, one dataset whose window (block_group) is three times
    the default: the windows a batch of three sources draws from.
Two record sizes: 256 B (the per-batch work dominates) and 16 KiB (the
copy does).  Writes its section of BENCHMARKS.md.
"""
import argparse
import os
import resource
import time
from pathlib import Path

import numpy as np

from common import OUT, drop_cache, machine, median, write_section

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
    settle([d / "all"] + paths)
    return d / "all", paths


def settle(datasets):
    """Brings every dataset into the page cache the same way, so that the
    contenders read from alike memory: evicted, then read once through
    stoker, whose warm-up takes a cold dataset in as 2 MiB folios.  Left as
    the writes put them, the files' pages are folios of whatever sizes
    (mostly small here), and a warm comparison between two datasets then
    measures their folio sizes too: 256-byte records from one dataset of
    2 MiB folios against three of mostly small ones ran 8% faster here."""
    drop_cache([f for d in datasets for f in Path(d).glob("*.stk")])
    for d in datasets:
        with stoker.Loader(d, 4096, shuffle="sequential") as ld:
            for _ in ld:
                pass


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
        # A first epoch untimed: the start-up (threads, first touches of
        # the batch buffers and of each source's worker memory) is paid
        # once in a run, and a training run reads many epochs.
        for _ in ld:
            pass
        ld.set_epoch(1)
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
            if order == "block":
                # A batch mixing three sources takes samples from a window
                # (a group of block_group blocks) of each: three windows
                # live at once.  One dataset with three times the window.
                contenders["one dataset, 3 windows (block_group 48)"] = (
                    lambda: stoker.Loader(one, B, shuffle="block", block_group=48))
            res = {k: [] for k in contenders}
            cpu = {k: [] for k in contenders}
            work = {k: [] for k in contenders}
            for _ in range(a.reps):
                # Evicted and brought in again before every repetition: where
                # a file's pages land in memory changes its speed (here one
                # dataset's 16 KiB records read 16 to 30% slower than
                # another's in one settling, and the other way round after
                # the next), so each repetition draws the placement afresh
                # rather than fixing one for the whole run.
                settle([one] + parts)
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
                # Each repetition's own ratio to the single dataset at the
                # same threads (measured beside it): steadier than a ratio
                # of medians on a machine whose speed drifts.
                paired = median([x / y for x, y in zip(res[k], res[like])])
                lines.append(f"| {label} | {order} | {k} | {m / 1e6:.2f} | {m / base:.2f} | "
                             f"{paired:.2f} | {c:.0f} | {c / c1:.2f} | {w:.0f} | {w / w1:.2f} |")
                raw.append(f"{label} {order} {k}: " + ", ".join(f"{x / 1e6:.2f}" for x in v))
    text = f"""## Mixing several datasets (issue: mixing)

Machine: {machine()}. Medians of {a.reps} repetitions, the contenders in turn in each. Produced by `make bench` (bench/mix.py).

The same samples (x float32 and a label y; {a.small:,} records of 256 B, and {a.large:,} of 16 KiB) as one dataset and as three datasets of 4:2:1 of them, mixed at those weights with `exhaust="all"` (so each epoch reads every sample once, as the single dataset's does). Warm (all in the page cache, every file in 2 MiB folios as stoker's warm-up leaves them; evicted and brought in again before every repetition, since where a file's pages land changes its speed), random or block order, batches of 256, the second epoch of each loader (the first, untimed, takes the start-up); M samples/s.

| records | order | way | M samples/s | against one dataset (its better setting) | against one dataset (same threads), paired | CPU ns a sample | against one dataset (same threads) | workers' CPU ns a sample | against one dataset (same threads) |
|---|---|---|---:|---:|---:|---:|---:|---:|---:|
""" + "\n".join(lines) + """

The mixture of one source, the whole dataset, isolates what mixing itself costs (the schedule, the walk over each batch's places, locating each sample in its lane); three datasets add what three sources cost: three orders over their own sizes, and three pieces of each batch to locate. "Paired" is the median of each repetition's own ratio to the single dataset at the same threads in the same repetition (run a few seconds apart), steadier where the machine's speed drifts between repetitions.

CPU time is the whole process's (workers and the consumer, user and system) over the epoch, a sample's share; the workers' is that of the loader's own threads alone (each thread's CPU clock), which is the cost of the loading itself: no consumer, and none of its waiting or spinning. They are the steadier measures at 256 B: with two workers beside the consumer on two cores, throughput swings between repetitions (the spread below) with how the three threads meet on the cores, while the work done varies little. The "1 thread" rows leave the consumer a core of its own, on which it spins for a batch being filled (docs/ARCHITECTURE.md, "The consumer's wait"), so their process CPU time grows with the time spent waiting; they are compared with the single dataset at one thread.

Mixed and homogeneous batches are drawn: the mixture's workers (the threads one loader would have) read each source's samples straight into the batch. Here every source gathers whole records of plain fields from the mapping, so each batch is one joint draw: every source's samples located, then the whole batch gathered in one pass, run by run of each source's places, as one dataset's batch is (docs/ARCHITECTURE.md, "Mixtures"). With 16 KiB records the copy bounds every way.

**Placement.** Where a file's pages land in memory changes how fast its records are read on this machine: with the datasets brought in once for a whole run, one dataset of 16 KiB records read 16% slower than the parts of the mixture (C loop, each read alone as one dataset), and 30% faster after the next eviction and reading in. A run that settles the files once compares placements as much as loaders (a mixture of 16 KiB records at 0.82 of one dataset, 1.24 of its workers' time, in one such run; 0.96 to 1.00 in another). So every repetition now evicts and reads in again all four datasets before its contenders run.

At 256 B a batch's own work is small (about 30 us of a worker's time), and three things show:
- **The mixing itself** (the schedule's walk over the batch, locating each source's samples, each source's order over its own size). In C (a loop taking batches, one worker, 13 alternating runs, twice), a worker's time a sample was 119.8 and 124.1 ns for the mixture against 119.4 and 124.2 for one dataset; at two workers (15 runs), 10.92 M samples/s against 10.66. In a worker's batch of 256 (about 71,000 cycles), the walk takes about 1,200 cycles for three sources (330 for one) and the rest is the same work as one dataset's. From Python the consumer adds its share: 10.0 to 10.4 us of its CPU a batch for a mixture against 9.4 for one dataset (two workers, 5 runs), with or without the source field.
- **Block order's windows.** Through the mapping, block order beats random order at 256 B because a batch's samples lie in one window of block_group blocks (64 MiB here): less memory to reach than the whole dataset, the caches and the TLB covering more of it. A batch mixing three sources draws from three windows at once, and costs about what one dataset with three times the window costs: the "3 windows" row. Homogeneous batches keep three windows live too, one after another. Lowering the sources' block_group trades shuffle for that locality; random order is the better choice for data that is in memory anyway.
- **Two workers on two CPUs.** With the consumer on the same two CPUs, the threads wait on one another at every batch, and a few percent more CPU time a sample becomes a larger loss of throughput than at one worker (whose consumer spins on the CPU left free). Some runs also fall into a state where the threads wait on a run queue while a CPU is idle (docs/ARCHITECTURE.md, "The pipeline"), at 0.55 to 0.75 of the usual rate, for one dataset and mixtures alike; a run or two of those among 9 moves a median. The 1-thread rows and the workers' CPU columns are the steadier comparison.

All repetitions (M samples/s): """ + "; ".join(raw) + "\n"
    write_section("mix", text)
    print(text)


if __name__ == "__main__":
    main()
