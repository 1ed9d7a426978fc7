"""Five users' workloads, every contender side by side, against the hardware.

For each workload of bench/workloads.py: the user's loader (the job's own loading code), the
user's Dataset in a tuned torch DataLoader, the peers (WebDataset, MosaicML
Streaming, LitData), the in-process baselines of bench/baselines.py (a NumPy
memmap loop, torchdata.nodes and SPDL with threads, Grain over ArrayRecord)
and stoker, each in a process of its own
(bench/suite_run.py), alternating, --reps repetitions, medians; the hardware
limits measured in the same repetitions (bench/limits.c). Warm cases run from
the page cache; cold cases evict the contender's files first (posix_fadvise
DONTNEED) and read at most one epoch.

    python bench/suite.py            # quick: small workloads, a few minutes
    python bench/suite.py --full     # the users' full sizes (tens of GB, long)

Writes the "suite" section of docs/BENCHMARKS.md and docs/img/suite-*.png.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import BUILD, OUT, ROOT, drop_cache, machine, median, write_section
import workloads as W
from contenders import FORMAT_OF

LIMITS = BUILD / "stoker-limits"
IMG = ROOT / "docs" / "img"
NAMES = {"report": "the user's loader", "torch": "tuned DataLoader", "orc": "open/read/close per file",
         "wds": "WebDataset", "mds": "MosaicML Streaming", "litdata": "LitData",
         "numpy": "NumPy memmap, one thread", "tdn": "torchdata.nodes, threads",
         "spdl": "SPDL, threads", "grain": "Grain + ArrayRecord", "stoker": "stoker"}
PEERS = ("wds", "mds", "litdata")
BASELINES = ("numpy", "tdn", "spdl", "grain")
# What stoker is compared with: everything a user could run instead of it,
# apart from the user's loader and the audio-only open/read/close floor.
OTHERS = ("torch",) + PEERS + BASELINES
TITLES = {"basins": "Basin windows", "events": "Variable-length events",
          "audio": "Audio clips", "spectro": "Spectrogram segments",
          "bits": "Bit vectors"}


def say(*a):
    print(*a, flush=True)


def limit(*args):
    out = subprocess.run([str(LIMITS), *args], check=True, capture_output=True, text=True).stdout
    f = out.split()
    return float(f[1]), float(f[2])


def warm(files):
    for i in range(0, len(files), 500):
        subprocess.run(["cat", *files[i:i + 500]], stdout=subprocess.DEVNULL, check=True)


def run_one(name, system, d, seconds, epochs, opts, min_batches=3):
    o = dict(opts, epochs=epochs)
    cmd = [sys.executable, str(ROOT / "bench" / "suite_run.py"), name, system, str(d), "--seconds",
           str(seconds), "--opts", json.dumps(o)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 4 + 240)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if r.returncode != 0 or not r.stdout.strip():
        return {"error": (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1][:200]}
    x = json.loads(r.stdout.strip().splitlines()[-1])
    if epochs == 1:   # cold: the whole epoch from the contender's creation
        x["rate"] = x["total_samples"] / x["total_seconds"]
    else:
        x["rate"] = x["samples"] / x["seconds"] if x["seconds"] > 0 and x["batches"] else None
    return x


def systems_of(name):
    return (["report", "torch"] + (["orc"] if name == "audio" else []) + list(PEERS)
            + list(BASELINES) + ["stoker"])


def tune(name, d, seconds):
    """The DataLoader's knobs: workers x prefetch_factor, one short run each;
    persistent_workers and pin_memory are always on."""
    best, res = None, {}
    for nw in (1, 2, 4):
        for pf in (2, 8):
            r = run_one(name, "torch", d, seconds, 1000, {"workers": nw, "prefetch": pf})
            res[f"{nw}x{pf}"] = r.get("rate")
            if r.get("rate") and (best is None or r["rate"] > best[0]):
                best = (r["rate"], {"workers": nw, "prefetch": pf})
    return (best[1] if best else {"workers": 2, "prefetch": 4}), res


def tune_baselines(name, d, seconds):
    """The baselines' settings: each of bench/baselines.py's SWEEPS, one short
    warm run each; returns the fastest per system and every rate."""
    import baselines
    best, res = {}, {}
    for system, configs in baselines.SWEEPS.items():
        top = None
        for c in configs:
            r = run_one(name, system, d, seconds, 1000, {"baselines": {system: c}})
            res.setdefault(system, {})[",".join(f"{k}={v}" for k, v in c.items())] = r.get("rate")
            if r.get("rate") and (top is None or r["rate"] > top[0]):
                top = (r["rate"], c)
        if top:
            best[system] = top[1]
    return best, res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=None, help="timed seconds per run")
    ap.add_argument("--workloads", default="basins,events,audio,spectro,bits")
    ap.add_argument("--cold-reps", type=int, default=None,
                    help="repetitions that also run the cold cases (default: 1 quick, all full)")
    ap.add_argument("--tune", action="store_true",
                    help="sweep the DataLoader's and the baselines' knobs (on in --full)")
    a = ap.parse_args()
    mode = "full" if a.full else "quick"
    seconds = a.seconds or (5.0 if a.full else 1.5)
    names = a.workloads.split(",")
    cold_names = names
    # A cold run reads one epoch, cut off after this many seconds; quick mode
    # runs the cold cases in its first repetition only, to stay near 20 min.
    cold_seconds = seconds * (4 if a.full else 2)
    cold_reps = min(a.reps, a.cold_reps or (a.reps if a.full else 1))
    t_all = time.perf_counter()

    say(f"== suite ({mode}): preparing data")
    data = {n: W.prepare(n, mode, log=say) for n in names}
    t_prep = time.perf_counter() - t_all

    opts = {}
    tuning, bl_tuning = {}, {}
    for n in names:
        if a.tune or a.full:
            say(f"== tuning the DataLoader and the baselines for {n}")
            opts[n], tuning[n] = tune(n, data[n][1], min(seconds, 2.0))
            opts[n]["baselines"], bl_tuning[n] = tune_baselines(n, data[n][1], min(seconds, 1.0))
        else:
            opts[n] = {"workers": 2, "prefetch": 4}

    res = {}   # (name, case, system) -> list of runs
    lim = {}   # (name, what) -> list of (GB/s, ops/s)
    for rep in range(a.reps):
        say(f"== repetition {rep + 1}/{a.reps}")
        lim.setdefault(("all", "memcpy"), []).append(limit("memcpy", "256", "9"))
        lim.setdefault(("all", "memcpy-all"), []).append(limit("memcpy-all", "256"))
        for n in names:
            p, d = data[n]
            shards = W.files_of(d, "stoker")
            size = int(W.payload_bytes(p))
            warm(shards)
            lim.setdefault((n, "pageread"), []).append(limit("pageread", *shards))
            systems = systems_of(n)
            k = rep % len(systems)
            order = systems[k:] + systems[:k]
            for s in order:
                files = W.files_of(d, FORMAT_OF[s])
                warm(files)
                r = run_one(n, s, d, seconds * (3 if n == "spectro" else 1), 10**6, opts[n])
                res.setdefault((n, "warm", s), []).append(r)
                say(f"   {n:8s} warm {s:8s} {fmt_rate(r)}")
            if n in cold_names and rep < cold_reps:
                drop_cache(shards)
                lim.setdefault((n, "seqread"), []).append(limit("seqread", *shards))
                drop_cache(shards)
                count = str(20000 if a.full else 4000)
                lim.setdefault((n, "randread"), []).append(limit("randread", str(size), count, *shards))
                for s in order:
                    files = W.files_of(d, FORMAT_OF[s])
                    drop_cache(files)
                    r = run_one(n, s, d, cold_seconds, 1, opts[n])
                    res.setdefault((n, "cold", s), []).append(r)
                    say(f"   {n:8s} cold {s:8s} {fmt_rate(r)}")
    elapsed = time.perf_counter() - t_all
    raw = {"mode": mode, "reps": a.reps, "seconds": seconds, "cold_seconds": cold_seconds,
           "cold_reps": cold_reps,
           "elapsed": elapsed, "prepare": t_prep, "opts": opts, "tuning": tuning,
           "baseline_tuning": bl_tuning,
           "params": {n: data[n][0] for n in names},
           "results": [{"workload": k[0], "case": k[1], "system": k[2], "runs": v} for k, v in res.items()],
           "limits": [{"workload": k[0], "what": k[1], "runs": v} for k, v in lim.items()]}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"suite-{mode}.json").write_text(json.dumps(raw))
    report(raw)


def fmt_rate(r):
    if r.get("error"):
        return "failed: " + r["error"]
    if r.get("rate") is None:
        return "no batches"
    return f"{r['rate']:>12,.0f} samples/s  (start-up {r['startup']:.2f} s, {r['batches']} batches)"


def med_rate(runs):
    xs = [r["rate"] for r in runs if r.get("rate")]
    return median(xs) if xs else None


def report(raw):
    """The markdown section and the plots, from the raw results."""
    res = {(x["workload"], x["case"], x["system"]): x["runs"] for x in raw["results"]}
    lim = {(x["workload"], x["what"]): x["runs"] for x in raw["limits"]}
    names = list(raw["params"])
    memcpy = median([x[0] for x in lim[("all", "memcpy")]]) * 1e9
    mc_all = lim.get(("all", "memcpy-all"))
    memcpy_all = median([x[0] for x in mc_all]) * 1e9 if mc_all else None
    cold_reps = raw.get("cold_reps", raw["reps"])
    cold_when = ("" if cold_reps >= raw["reps"] else "(in the first repetition only) " if cold_reps == 1
                 else f"(in the first {cold_reps} repetitions) ")
    lines = [
        "## Five users' workloads against the field (issue: benchmarks)", "",
        f"Machine: {machine()}. Mode: **{raw['mode']}** (`make bench`; `make bench FULL=1` for the "
        f"users' full sizes). Every contender ran in each of {raw['reps']} repetitions, in rotating "
        f"order, each in a process of its own; medians. Warm runs are timed for {raw['seconds']:g} s "
        "(3x for spectrograms) after the first batch, over as many epochs as fit; cold runs "
        + cold_when + "start with the contender's files evicted (posix_fadvise DONTNEED) and read "
        f"one epoch (at most {raw.get('cold_seconds', 4 * raw['seconds']):g} s); their rate counts "
        "from the contender's creation, first batch and start-up included, since a loader reads ahead while it starts. Warm rates leave start-up "
        "(to the first batch) out; it is listed apart. Produced by "
        f"bench/suite.py in {raw['elapsed'] / 60:.1f} min ({raw['prepare']:.0f} s of it making or "
        "checking the data). No GPU: batches stay in host memory, which is where every loader "
        "here hands them over.", "",
        "![throughput per system](img/suite-throughput.png)", "",
        "![per-batch wait over the run](img/suite-stalls.png)", "",
        "Contenders: each workload is modelled on a training job a user described (its data, "
        "sizes and loading code); **the user's loader** is that job's own loading code, "
        "rewritten here as described; each workload's section says what it does (see "
        "bench/contenders.py); **tuned DataLoader** is the user's Dataset in a DataLoader with "
        f"persistent workers, pin_memory and the workers/prefetch_factor pair "
        f"{'found best by a sweep (below)' if raw['tuning'] else 'of 2 and 4 (quick mode does not sweep; --tune and full mode do)'}"
        " (pin_memory has no effect without a GPU); the peers read their own format of the same "
        "samples (written untimed by bench/workloads.py) in a DataLoader with the same workers. "
        "The in-process baselines (bench/baselines.py) run in the training process, with no "
        "DataLoader and no worker processes, over files written untimed by bench/workloads.py: "
        "**NumPy memmap, one thread** is the loop a user writes over flat raw files mapped with "
        "np.memmap (each epoch a permutation from np.random.default_rng(seed + epoch), each batch "
        "gathered with np.take, one concatenate of slices for variable-length records, one "
        "fancy-index gather from a strided view of the rows for windows); "
        "**torchdata.nodes, threads** and **SPDL, threads** run the same gather on the same "
        "memmaps in a thread pool with prefetching (torchdata.nodes ParallelMapper and Prefetcher; "
        "an SPDL pipeline); **Grain + ArrayRecord** reads an uncompressed ArrayRecord file of the "
        "same samples (group size 1) through Grain's MapDataset (shuffle, batch of sample numbers, "
        "one batched read of the records, to_iter_dataset with read threads). Their thread and "
        "prefetch settings are "
        + ("the fastest of a sweep (below)" if raw.get("baseline_tuning") else
           "the fastest of a sweep made when they were written (bench/baselines.py DEFAULTS; "
           "--tune and full mode sweep again)")
        + ". **best other** is the fastest of the tuned DataLoader, the peers and the baselines. "
        "stoker is `stoker.Loader`, `random` order, default options. Memory copy (bench/limits.c): "
        f"{memcpy / 1e9:.1f} GB/s on one thread"
        + (f", {memcpy_all / 1e9:.1f} GB/s with every CPU copying at once" if memcpy_all else "")
        + ".", "",
    ]
    targets = []
    for n in names:
        p = raw["params"][n]
        size = W.payload_bytes(p)
        lines += [f"### {TITLES[n]}", "", describe(n, p, raw["opts"].get(n)), ""]
        for case in ("warm", "cold"):
            systems = [s for s in systems_of(n) if (n, case, s) in res]
            if not systems:
                continue
            base = med_rate(res[(n, case, "report")])
            if case == "warm":
                lim_rate, lim_name = memcpy / size, "memcpy"
            else:
                rr = lim.get((n, "randread"))
                lim_rate = median([x[1] for x in rr]) if rr else None
                sq = median([x[0] for x in lim[(n, "seqread")]]) if (n, "seqread") in lim else None
                lim_name = f"O_DIRECT random reads of {size / 1024:.0f} KiB"
            lines += [f"**{case}** | limit: {lim_name}"
                      + (f" = {lim_rate:,.0f} samples/s" if lim_rate else "")
                      + (f"; O_DIRECT sequential {sq:.2f} GB/s" if case == "cold" and sq else "")
                      + (f"; page-cache read(2) {median([x[0] for x in lim[(n, 'pageread')]]):.1f} GB/s"
                         if case == "warm" else ""), "",
                      "| system | samples/s | GB/s | x user's loader | x limit | start-up s | all runs |",
                      "|---|---:|---:|---:|---:|---:|---|"]
            for s in systems:
                runs = res[(n, case, s)]
                m = med_rate(runs)
                errs = [r["error"] for r in runs if r.get("error")]
                if m is None:
                    lines.append(f"| {NAMES[s]} | failed | | | | | {errs[0] if errs else 'no batches'} |")
                    continue
                st = median([r["startup"] for r in runs if r.get("rate")])
                bold = "**" if s == "stoker" else ""
                lines.append(
                    f"| {bold}{NAMES[s]}{bold} | {m:,.0f} | {m * size / 1e9:.2f} | "
                    f"{bold}{m / base:.1f}{bold} | {m / lim_rate:.2f} | {st:.2f} | "
                    + ", ".join(f"{r['rate']:,.0f}" if r.get("rate") else "x" for r in runs) + " |"
                    if base and lim_rate else f"| {NAMES[s]} | {m:,.0f} | | | | {st:.2f} | |")
            lines.append("")
            st_rate = med_rate(res.get((n, case, "stoker"), []))
            best = best_other(res, n, case)
            if best:
                lines += [f"Best other: **{NAMES[best[0]]}**, {best[1]:,.0f} samples/s"
                          + (f"; stoker is **{st_rate / best[1]:.1f}x** it." if st_rate else "."), ""]
            targets += target_rows(n, case, st_rate, base, best, lim_rate, size, memcpy, res,
                                   memcpy_all)
    lines += ["### Issue targets, this run", "", "| target | measured | met |", "|---|---:|---|"]
    lines += [f"| {t} | {v} | {'context' if ok is None else 'yes' if ok else '**no**'} |"
              for t, v, ok in targets]
    lines += ["", GAPS]
    if raw["tuning"]:
        lines += ["", "DataLoader sweep (samples/s, workers x prefetch_factor): " + "; ".join(
            f"{n}: " + ", ".join(f"{k} {v:,.0f}" if v else f"{k} failed" for k, v in t.items())
            for n, t in raw["tuning"].items())]
    if raw.get("baseline_tuning"):
        lines += ["", "Baselines' sweep (warm samples/s, one short run each; the fastest is used): "
                  + "; ".join(f"{n} {NAMES[s]}: " + ", ".join(
                      f"{k} {v:,.0f}" if v else f"{k} failed" for k, v in t.items())
                      for n, bt in raw["baseline_tuning"].items() for s, t in bt.items())]
    text = "\n".join(lines)
    print(text)
    write_section("suite", text)
    plots(raw, res, names)


def best_other(res, n, case):
    """(system, median rate) of the fastest contender other than stoker, the
    user's loader and open/read/close, or None."""
    rates = [(s, med_rate(res[(n, case, s)])) for s in OTHERS if (n, case, s) in res]
    rates = [x for x in rates if x[1]]
    return max(rates, key=lambda x: x[1]) if rates else None


def target_rows(n, case, st, base, best, lim_rate, size, memcpy, res, memcpy_all=None):
    rows = []
    if st is None:
        return rows
    vs = f" ({NAMES[best[0]]})" if best else ""
    if n == "basins" and case == "warm":
        rows.append(("basin windows, warm: stoker >= 30x the user's loader", f"{st / base:.0f}x",
                     st / base >= 30))
        if best:
            rows.append(("basin windows, warm: >= 3x the best other", f"{st / best[1]:.1f}x{vs}",
                         st / best[1] >= 3))
        rows.append(("basin windows, warm: >= 0.5 of memcpy bandwidth",
                     f"{st * size / memcpy:.2f}", st * size / memcpy >= 0.5))
    if n == "events" and case == "warm":
        rows.append(("events, warm: >= 20x the user's loader", f"{st / base:.1f}x", st / base >= 20))
        if best:
            rows.append(("events, warm: >= 3x the best other", f"{st / best[1]:.1f}x{vs}",
                         st / best[1] >= 3))
    if n == "audio" and case == "cold" and lim_rate:
        rows.append(("audio, cold: >= 0.8 of random reads at the clip size", f"{st / lim_rate:.2f}",
                     st / lim_rate >= 0.8))
    if n == "audio" and case == "warm":
        orc = med_rate(res.get(("audio", "warm", "orc"), []))
        if orc:
            rows.append(("audio, warm: >= 2.5x one open/read/close per file", f"{st / orc:.1f}x",
                         st / orc >= 2.5))
    if best and not (case == "warm" and n in ("basins", "events")):
        rows.append((f"{TITLES[n].split(' (')[0].lower()}, {case}: stoker / the best other",
                     f"{st / best[1]:.1f}x{vs}", None))
    return rows


def baseline_settings(o):
    import baselines
    st = dict(baselines.DEFAULTS)
    st.update((o or {}).get("baselines", {}))
    t, sp, g = st["tdn"], st["spdl"], st["grain"]

    def n(k, what):
        return f"{k} {what}" + ("s" if k != 1 else "")
    return (f"Baselines' settings: torchdata.nodes {n(t['workers'], 'thread')}, prefetch "
            f"{t['prefetch']}; SPDL concurrency {sp['concurrency']}, {n(sp['threads'], 'thread')}, "
            f"sink buffer {sp['buffer']}; Grain {n(g['threads'], 'read thread')}, prefetch "
            f"{g['prefetch']} batches"
            + ("; each batch's sample numbers sorted" if st["numpy"].get("sort") else "") + ".")


def describe(n, p, o):
    o = o or {}
    dl = f"tuned DataLoader: {o.get('workers')} workers, prefetch_factor {o.get('prefetch')}"
    return describe_workload(n, p, o, dl) + " " + BASELINE_TEXT[n] + " " + baseline_settings(o)


BASELINE_TEXT = {
    "basins": "The baselines deliver x and y (q) of each window, as stoker does, drawn from every "
              "window of every basin; NumPy, torchdata.nodes and SPDL gather them from strided "
              "views of the basins' rows (one flat file per field, basins one after the other); "
              "Grain's ArrayRecord file holds 183-day pieces of each basin (x and y side by side), "
              "so that a window reads at most three records.",
    "events": "The baselines read one flat file of every event's rows and an array of offsets; "
              "Grain's file holds one record per event.",
    "audio": "The baselines read one flat file of every clip's int16 samples and an array of "
             "offsets (the WAV headers left out); Grain's file holds one record per clip.",
    "spectro": "The baselines read the segments and the labels from one flat file each; Grain's "
               "file holds one record per segment (its 1 KiB and its 8-byte label).",
    "bits": "The baselines read one flat file of 1024-byte rows; Grain's file holds one record "
            "per vector.",
}


def describe_workload(n, p, o, dl):
    if n == "basins":
        return (f"{p['basins']:,} basins x 10-30 years daily x 16 float32 features, one Parquet file "
                "per basin; windows of 365 days, batches of 256. The user's loader: a map-style Dataset "
                "cutting each window from a polars frame held by a file cache behind one global lock, a "
                "batch sampler drawing every batch from 50 files, 10 worker processes. The peers hold "
                "whole basins; one shared pool stage (256 basins per worker, one window from each per "
                "batch) cuts and mixes the windows. stoker: `window=365, fields=['x', 'y']`. "
                f"GB/s counts the 23 KiB of features per window. {dl}.")
    if n == "events":
        return (f"{p['events']:,} events of 10-500 rows x 6 float32 in {p['files']} Parquet files; "
                "batches of 256 (rows concatenated, with offsets). The user's loader: a map-style "
                "Dataset that reads an event's Parquet file (keeping the last one) and slices its "
                "rows, with shuffle=False and no workers, as its user runs it (it measured "
                "shuffling 140x slower); every other contender shuffles. " + dl + ".")
    if n == "audio":
        return (f"{p['clips']:,} WAV clips of 1-5 s, 16 kHz int16 mono, read whole in a random "
                "order; batches of 256 clips. The user's loader: a thread pool of 4 "
                "(cpu_max_workers) reading each clip with soundfile. open/read/close: one "
                "os.open/os.read/os.close per file on one thread, no decoding. The tuned "
                f"DataLoader reads one WAV per sample with soundfile ({dl[18:]}).")
    if n == "spectro":
        return (f"{p['files'] * W.SEGS_PER_FILE:,} segments of 64 x 4 float32 (1 KiB) in one HDF5 "
                "dataset, chunked (256 segments a chunk) and uncompressed; batches of 5632, shuffled. "
                "The user's loader: the HDF5 file opened once per worker, one segment read per "
                "sample; 8 workers, prefetch_factor 4, persistent, pinned. " + dl + ".")
    return (f"{p['rows']:,} bloom-filter bit vectors of 1024 bits, stored as strings in HDF5; "
            "batches of 1024. The user's loader: the table read into pandas and each string turned "
            "into a float32 tensor with a per-row apply (that conversion is the start-up), then a "
            "DataLoader with 2 workers, no pinning. The other contenders deliver the bits as bytes "
            "(0/1), to be widened on the GPU. " + dl + ".")


GAPS = """### Where stoker falls short, why, and what next

These notes are kept by hand; the tables above are the measurement they refer to.

- **Audio, warm, against one open/read/close per file.** Both deliver every byte of every clip
  by copying it once, so the machine's copy bandwidth bounds the ratio: one thread running
  read(2) already moves a third to a half of what all CPUs copy together (the memcpy figures
  in the contenders paragraph above). What brought stoker from 2.0x (the previous run) to
  above 2.5x: whole records are now checked against their own checksum as they land, hashed
  from the mapping in runs of 256 KiB and copied while still in the cache, instead of hashing
  64 KiB blocks in a separate pass over memory; the check went from about 40% of the workers'
  time to about 15%. The margin is thin on a machine whose memory bandwidth other tenants
  share (the repetitions' spread is wide). Next: one pass that copies and hashes together
  (the source read once), and large whole records handed to the GPU copy from the page cache
  through pinned staging rather than through the batch buffer.
- **Audio, cold.** Random order now turns the kernel's read-ahead off (POSIX_FADV_RANDOM):
  read-ahead fetched the start of the next clip in the shard after each one, which random
  order throws away; that was a sixth of the device's bandwidth. The figure counts from the
  loader's creation, start-up included; the limit is O_DIRECT reads at the mean clip size,
  32 in flight (stoker-limits randread), and stoker's buffered io_uring reads (128 in flight)
  can exceed it, which says the device, not stoker, is the bound.
- **The cold disk is shared and its speed varies between runs** (sequential O_DIRECT from
  about 0.75 to 1.6 GB/s across runs); compare the ratios within one run.
- **Short epochs in quick mode.** The quick workloads are small (an epoch of stoker events or
  spectrogram segments lasts a fraction of a second), so warm runs span many epochs and
  include the loader's epoch turnover; full mode runs the users' full sizes.
- **Peers' rates include their DataLoader workers' hand-off.** Each peer batch crosses a process
  boundary (shared memory) as in their documented use; stoker's batches are views of its own
  buffers in the training process. That difference is part of what is measured.
- **LitData on small fixed-size samples** (spectrogram segments, 1 KiB) delivered a handful of
  batches of 5,632 in the timed window: its shuffled reads go sample by sample through its
  chunk reader in Python. It is measured as installed, with default options.
- **MosaicML Streaming's start-up** (about 2 s) is its shared-memory and index set-up per run;
  it is not in the warm rates and is in the cold ones.
- **Against the in-process baselines.** On data already in the page cache every system here
  comes down to one or two copies of each sample, and the one-thread NumPy memmap loop does
  little besides: it is the fastest alternative to stoker in most warm cases, well ahead of the
  peers, whose batches cross from DataLoader workers. The basin-window target of 3x "the best
  peer" was set against those peers; against the memmap loop it is the hardest target in the
  table. The "best other" line under each table names the alternative and stoker's ratio to it.
- **Cold, against the memmap baselines.** In the first runs with the baselines, the memmap
  loops read cold audio clips faster than stoker (stoker at 0.7-0.8x of the best of them), and
  in one of two runs cold spectrogram segments too (0.4x; 1.3x in the other). A memmap faults
  each record in through the page cache, where the kernel's read-ahead on the mapping fetches
  large pieces around it; in quick mode the files are small (126 MB of segments), so
  read-ahead likely brings in much of a file within the epoch, while stoker turns read-ahead
  off in random order (see the audio cold note above). Not yet explained further; to measure
  next at the full size, where the files are many times the read-ahead.
- **Threads did not help the baselines on 2 cores.** torchdata.nodes and SPDL run the NumPy
  loop's gather in threads; the gather's Python steps hold the GIL and the threads contend for
  it, so one thread was as fast or faster (the sweep is in bench/baselines.py). Grain over
  ArrayRecord is bound by ArrayRecord's reads, a few microseconds a record and about 1 GB/s
  for large ones through Grain's data source.
- **Harness note.** Each run ends by terminating its DataLoader workers: left alone, the
  workers of an unfinished epoch keep prefetching for a few seconds after their parent exits
  and took CPU from the next contender (stoker's events rate read 3x low before this).
"""


def plots(raw, res, names):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    IMG.mkdir(parents=True, exist_ok=True)
    colors = {"report": "#b04040", "torch": "#d08030", "orc": "#a0a0a0", "wds": "#5080c0",
              "mds": "#50a0a0", "litdata": "#8060b0", "numpy": "#303030", "tdn": "#c05090",
              "spdl": "#c0a020", "grain": "#7090d0", "stoker": "#208020"}
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4.2), squeeze=False)
    for ax, n in zip(axes[0], names):
        labels, vals, cols, hatch = [], [], [], []
        for case in ("warm", "cold"):
            for s in systems_of(n):
                if (n, case, s) not in res:
                    continue
                m = med_rate(res[(n, case, s)])
                labels.append(f"{NAMES[s]} ({case})")
                vals.append(m or 0)
                cols.append(colors[s])
                hatch.append("//" if case == "cold" else "")
        y = range(len(labels))
        bars = ax.barh(list(y), vals, color=cols)
        for b, h in zip(bars, hatch):
            b.set_hatch(h)
        ax.set_yticks(list(y))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("samples/s (log)")
        ax.set_title(TITLES[n], fontsize=9)
    fig.suptitle(f"Throughput per system, {raw['mode']} mode (median of {raw['reps']}); hatched: cold")
    fig.tight_layout()
    fig.savefig(IMG / "suite-throughput.png", dpi=90)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), squeeze=False)
    for ax, n in zip(axes[0], names):
        for s in systems_of(n):
            runs = [r for r in res.get((n, "warm", s), []) if r.get("waits")]
            if not runs:
                continue
            r = runs[-1]
            t, acc = [], 0.0
            for w in r["waits"]:
                acc += w
                t.append(acc)
            ax.plot(t, [1e3 * w for w in r["waits"]], ".", ms=2, color=colors[s], label=NAMES[s])
        ax.set_yscale("log")
        ax.set_xlabel("seconds into the timed run")
        ax.set_ylabel("wait in next() per batch, ms (log)")
        ax.set_title(TITLES[n] + ", warm", fontsize=9)
        ax.legend(fontsize=6, markerscale=4)
    fig.suptitle("Stalls: each batch's wait in the consumer over the run (last repetition)")
    fig.tight_layout()
    fig.savefig(IMG / "suite-stalls.png", dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--report":
        report(json.loads(Path(sys.argv[2]).read_text()))
    else:
        main()
