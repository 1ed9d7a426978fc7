"""Small records and cold starts: stoker against the strongest in-process
baselines (bench/baselines.py: a NumPy memmap loop, torchdata.nodes with
threads, SPDL, Grain over ArrayRecord) and against the hardware, warm and
cold, side by side in one run.

Workloads (made once under bench/out/small/, untimed):

    rec512   2,000,000 records of 512 bytes (float32[128]), 1 GB
    rec1k    1,000,000 records of 1 KiB (float32[256]), 1 GB
    ragged   records of 1-64 KiB (float32[16..1024, 16]), about 0.65 GB
    windows  2,000 series x 3,650 rows, x float32[16] and y float32[1] in
             two fields (the README's layout), windows of 365 rows

Cases, each contender in a process of its own, rotating order, medians of
--reps repetitions:

    warm     page cache warm (the contender's files read once before),
             timed for --seconds after the first batch; stoker also with
             its checksums off, to price them; with --systems naming
             stoker-v1, the same records written in format version 1 (an
             index entry a record), with and without checksums, beside
             version 2 (records located by arithmetic)
    cold     the contender's files evicted (posix_fadvise DONTNEED), one
             epoch from the contender's creation (first batch and start-up
             included), random order
    big      rec512 in a memory cgroup that holds half of it (the data
             cannot fit): stoker in random and in block order for at most
             --big-seconds, against the device's random reads at the
             sample size and its sequential reads

Limits, measured in every repetition: memcpy on one thread, the device's
O_DIRECT sequential reads and random reads at the sample size (the best of
several depths and sizes: bench/limits.c).

    python bench/small.py [--reps 3] [--cases warm,cold,big] [--workloads ...]
                          [--systems stoker,numpy,...,stoker-v1] [--section small]

Writes the "small" section of docs/BENCHMARKS.md (or --section's).
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BUILD, OUT, drop_cache, machine, median, write_section  # noqa: E402
import baselines  # noqa: E402

DATA = OUT / "small"
LIMITS = BUILD / "stoker-limits"
SEED = 11

WORKLOADS = {
    "rec512": dict(kind="fixed", n=2_000_000, cols=128, batch=1024),
    "rec1k": dict(kind="fixed", n=1_000_000, cols=256, batch=1024),
    "ragged": dict(kind="ragged", n=20_000, cols=16, lo=16, hi=1024, batch=256),
    "windows": dict(kind="windows", series=2000, rows=3650, feat=16, window=365, batch=256),
}
TITLES = {
    "rec512": "512-byte records (2,000,000 x float32[128])",
    "rec1k": "1 KiB records (1,000,000 x float32[256])",
    "ragged": "Ragged records of 1-64 KiB (20,000 x float32[16..1024, 16])",
    "windows": "Windows of 365 rows over 2,000 series, two fields (x: 16 float32, y: 1)",
}
SYSTEMS = ("stoker", "numpy", "tdn", "spdl", "grain")
NAMES = {"stoker": "stoker", "stoker-nocheck": "stoker, checksums off",
         "stoker-v1": "stoker, format version 1",
         "stoker-v1-nocheck": "stoker, format version 1, checksums off",
         "numpy": "NumPy memmap loop",
         "tdn": "torchdata.nodes (threads)", "spdl": "SPDL (threads)",
         "grain": "Grain over ArrayRecord", "stoker-block": "stoker, block order",
         "stoker-v1-block": "stoker, block order, format version 1"}


def say(*a):
    print(*a, flush=True)


# -- data ------------------------------------------------------------------------

def _fixed(p):
    rng = np.random.default_rng(1)
    step = 1 << 18
    for a in range(0, p["n"], step):
        yield rng.standard_normal((min(step, p["n"] - a), p["cols"]), dtype=np.float32)


def _ragged_rows(p):
    return np.random.default_rng(2).integers(p["lo"], p["hi"] + 1, size=p["n"])


def _ragged(p):
    rng = np.random.default_rng(3)
    for r in _ragged_rows(p):
        yield rng.standard_normal((int(r), p["cols"]), dtype=np.float32)


def _series(p):
    rng = np.random.default_rng(4)
    t = np.arange(p["rows"], dtype=np.float32)
    for s in range(p["series"]):
        x = (np.sin(t[:, None] / 58.1 + s) + 0.1 * rng.standard_normal((p["rows"], p["feat"]),
                                                                      dtype=np.float32))
        yield {"x": x.astype(np.float32), "y": x[:, :1].sum(axis=1, keepdims=True) * 0.5}


def paths(name):
    d = DATA / name
    return {"dir": d, "stoker": d / "stoker.stk", "stoker-v1": d / "stoker-v1.stk",
            "base": d / "base", "ar": d / "data.array_record"}


def prepare_v1(name):
    """The fixed workloads' records again, in format version 1."""
    p, ps = WORKLOADS[name], paths(name)
    if p["kind"] != "fixed" or (ps["stoker-v1"] / "manifest.json").exists():
        return
    import stoker
    stoker.write(ps["stoker-v1"], {"x": np.concatenate(list(_fixed(p)))}, sync=False,
                 format_version=1, overwrite=True)
    os.sync()


def prepare(name):
    p = WORKLOADS[name]
    ps = paths(name)
    stamp = ps["dir"] / "params.json"
    if stamp.exists() and json.loads(stamp.read_text()) == p:
        return
    import shutil
    import stoker
    if ps["dir"].exists():
        shutil.rmtree(ps["dir"])
    ps["dir"].mkdir(parents=True)
    t = time.perf_counter()
    if p["kind"] == "fixed":
        x = np.concatenate(list(_fixed(p)))
        stoker.write(ps["stoker"], {"x": x}, sync=False)
        baselines.write_fixed(ps["base"], {"x": x})
        del x
    elif p["kind"] == "ragged":
        stoker.write(ps["stoker"], ({"x": r} for r in _ragged(p)), ragged=["x"], sync=False)
        baselines.write_ragged(ps["base"], _ragged(p), name="x")
    else:
        stoker.write(ps["stoker"], _series(p), ragged=["x", "y"], sync=False)
        baselines.write_series(ps["base"], _series(p), p["window"])
    baselines.write_array_record(baselines.open_dataset(ps["base"]), ps["ar"])
    os.sync()
    stamp.write_text(json.dumps(p))
    say(f"   made {name} in {time.perf_counter() - t:.0f} s")


def files_of(name, system):
    ps = paths(name)
    if system.startswith("stoker"):
        d = ps["stoker-v1"] if system.startswith("stoker-v1") else ps["stoker"]
        return sorted(str(f) for f in d.iterdir() if f.suffix == ".stk")
    if system == "grain":
        return [str(ps["ar"])]
    return [f for f in baselines.dataset_files(ps["base"]) if f.endswith(".bin")]


def sample_bytes(name):
    p = WORKLOADS[name]
    if p["kind"] == "fixed":
        return p["cols"] * 4
    if p["kind"] == "ragged":
        return float(np.mean(_ragged_rows(p))) * p["cols"] * 4
    return p["window"] * (p["feat"] + 1) * 4


# -- one run, in a process of its own -----------------------------------------------

def contender(name, system, epochs, order):
    p = WORKLOADS[name]
    ps = paths(name)
    if system.startswith("stoker"):
        import stoker
        kw = dict(batch_size=p["batch"], shuffle=order, seed=SEED,
                  verify=not system.endswith("nocheck"))
        if p["kind"] == "windows":
            kw.update(window=p["window"], fields=["x", "y"])
        ld = stoker.Loader(str(ps["stoker-v1" if system.startswith("stoker-v1") else "stoker"]),
                           **kw)

        def it():
            for _ in range(epochs):
                for b in ld:
                    yield len(b["x_offsets"]) - 1 if "x_offsets" in b else len(b["x"])
        return it()
    if system == "grain":
        src = str(ps["ar"])
    else:
        src = baselines.open_dataset(ps["base"])
    gen = baselines.batches(system, src, p["batch"], seed=SEED, epochs=epochs)
    return (len(b["index"]) for b in gen)


def run_one(name, system, case, seconds, order="random"):
    """In this process: the contender's rate; prints one JSON line.  Every
    module a contender needs is imported before the clock starts (NumPy is
    already in): importing is not loading."""
    if system.startswith("stoker"):
        import stoker  # noqa: F401
    elif system == "tdn":
        import torchdata.nodes  # noqa: F401
    elif system == "spdl":
        import spdl.pipeline  # noqa: F401
    elif system == "grain":
        import grain  # noqa: F401
    t0 = time.perf_counter()
    epochs = 1 if case != "warm" else 1000
    it = contender(name, system, epochs, order)
    first = next(it)
    startup = time.perf_counter() - t0
    samples, t1 = 0, time.perf_counter()
    last = t1
    for n in it:
        samples += n
        last = time.perf_counter()
        if last - (t1 if case == "warm" else t0) >= seconds:
            break
    out = {"startup": startup, "first": first, "samples": samples, "seconds": last - t1,
           "total_samples": first + samples, "total_seconds": last - t0}
    print(json.dumps(out), flush=True)
    os._exit(0)  # threads of an unfinished epoch need not drain


CGROUP = None


def make_cgroup(limit):
    """A memory cgroup (v1's memory controller, or v2) limited to `limit`
    bytes; returns the file to write a pid into, or None."""
    v1 = Path("/sys/fs/cgroup/memory")
    try:
        if v1.is_dir() and (v1 / "memory.limit_in_bytes").exists():
            g = v1 / f"stoker-bench-{os.getpid()}"
            g.mkdir(exist_ok=True)
            (g / "memory.limit_in_bytes").write_text(str(limit))
            return g
        v2 = Path("/sys/fs/cgroup")
        if (v2 / "cgroup.controllers").exists() and "memory" in (v2 / "cgroup.controllers").read_text():
            (v2 / "cgroup.subtree_control").write_text("+memory")
            g = v2 / f"stoker-bench-{os.getpid()}"
            g.mkdir(exist_ok=True)
            (g / "memory.max").write_text(str(limit))
            return g
    except OSError as e:
        say(f"   (no memory cgroup: {e})")
    return None


def spawn(name, system, case, seconds, order="random", cgroup=None):
    cmd = [sys.executable, __file__, "--run", name, system, case, str(seconds), order]
    if cgroup:
        # Join the group first, then become the contender: all it reads is
        # charged to the group.
        cmd = ["sh", "-c", f'echo $$ > "{cgroup / "cgroup.procs"}" && exec "$@"', "sh"] + cmd
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 6 + 300)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if r.returncode != 0 or not r.stdout.strip():
        return {"error": (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:200]}
    x = json.loads(r.stdout.strip().splitlines()[-1])
    x["rate"] = (x["samples"] / x["seconds"] if case == "warm" and x["seconds"] > 0
                 else x["total_samples"] / x["total_seconds"])
    return x


def readahead_file(path):
    """The read_ahead_kb file of the block device holding `path`, or None."""
    st = os.stat(path)
    base = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    for q in (base / "queue" / "read_ahead_kb", base / ".." / "queue" / "read_ahead_kb"):
        if q.exists():
            return q
    return None


def limit(*args):
    out = subprocess.run([str(LIMITS), *args], check=True, capture_output=True, text=True).stdout
    f = out.split()
    return float(f[1]), float(f[2])


def warm_files(files):
    """Evicts the files, then reads them once: every contender's data is in
    the page cache the way a first sequential read leaves it (with the
    kernel's large folios where it makes them), not the way writing it did."""
    drop_cache(files)
    for i in range(0, len(files), 200):
        subprocess.run(["cat", *files[i:i + 200]], stdout=subprocess.DEVNULL, check=True)


# -- the run ----------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per warm run")
    ap.add_argument("--cold-seconds", type=float, default=20.0, help="cap of a cold epoch")
    ap.add_argument("--big-seconds", type=float, default=8.0)
    ap.add_argument("--cases", default="warm,cold,big")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--cold-readahead", type=int, default=128,
                    help="also run the cold cases with the device's read-ahead set to this many "
                         "KiB (the kernel's default is 128; 0: only as the machine is set)")
    ap.add_argument("--section", default="small",
                    help="the BENCHMARKS.md section to write (another name keeps 'small' as is)")
    a = ap.parse_args()
    cases, names = a.cases.split(","), a.workloads.split(",")
    systems = a.systems.split(",")
    t_all = time.perf_counter()
    say("== small records and cold starts: preparing data")
    for n in names:
        prepare(n)
        if "stoker-v1" in systems:
            prepare_v1(n)
    res, lim = {}, {}
    raf = readahead_file(str(DATA))
    native_ra = int(raf.read_text()) if raf else None
    alt_ra = None
    if raf and a.cold_readahead and a.cold_readahead != native_ra and "cold" in cases:
        try:
            raf.write_text(str(native_ra))
            alt_ra = a.cold_readahead
        except OSError:
            say(f"   (cannot set {raf}: cold runs only at {native_ra} KiB)")
    for rep in range(a.reps):
        say(f"== repetition {rep + 1}/{a.reps}")
        lim.setdefault("memcpy", []).append(limit("memcpy", "256", "9"))
        for n in names:
            stk_files = files_of(n, "stoker")
            sb = sample_bytes(n)
            k = rep % len(systems)
            order = systems[k:] + systems[:k]
            if "warm" in cases:
                extra = (["stoker-nocheck"] if "stoker" in systems else []) + (
                    ["stoker-v1-nocheck"] if "stoker-v1" in systems else [])
                for s in order + extra:
                    if s.startswith("stoker-v1") and WORKLOADS[n]["kind"] != "fixed":
                        continue
                    warm_files(files_of(n, s))
                    r = spawn(n, s, "warm", a.seconds)
                    res.setdefault((n, "warm", s), []).append(r)
                    say(f"   {n:8s} warm {s:15s} {fmt(r)}")
            if "cold" in cases:
                drop_cache(stk_files)
                lim.setdefault((n, "seqread"), []).append(limit("seqread", *stk_files))
                drop_cache(stk_files)
                lim.setdefault((n, "randread"), []).append(
                    limit("randread", str(int(sb)), "20000", *stk_files))
                order = [s for s in order
                         if not s.startswith("stoker-v1") or WORKLOADS[n]["kind"] == "fixed"]
                for s in order:
                    drop_cache(files_of(n, s))
                    r = spawn(n, s, "cold", a.cold_seconds)
                    res.setdefault((n, "cold", s), []).append(r)
                    say(f"   {n:8s} cold {s:15s} {fmt(r)}")
                if alt_ra:
                    raf.write_text(str(alt_ra))
                    try:
                        for s in order:
                            drop_cache(files_of(n, s))
                            r = spawn(n, s, "cold", a.cold_seconds)
                            res.setdefault((n, "cold-ra", s), []).append(r)
                            say(f"   {n:8s} cold, read-ahead {alt_ra} KiB {s:15s} {fmt(r)}")
                    finally:
                        raf.write_text(str(native_ra))
        if "big" in cases and "rec512" in names:
            n = "rec512"
            stk_files = files_of(n, "stoker")
            size = sum(os.path.getsize(f) for f in stk_files)
            g = make_cgroup(size // 2)
            if g is None:
                res[(n, "big", "skipped")] = [{"error": "no memory cgroup could be made"}]
            else:
                try:
                    drop_cache(stk_files)
                    lim.setdefault((n, "big-seqread"), []).append(limit("seqread", *stk_files))
                    drop_cache(stk_files)
                    lim.setdefault((n, "big-randread"), []).append(
                        limit("randread", "512", "40000", *stk_files))
                    big = [("stoker", "random"), ("stoker", "block"), ("numpy", "random")]
                    if "stoker-v1" in systems:
                        big.insert(2, ("stoker-v1", "block"))
                    for s, order in big:
                        drop_cache(files_of(n, s))
                        r = spawn(n, s, "big", a.big_seconds, order, cgroup=g)
                        key = s + "-block" if order == "block" else s
                        res.setdefault((n, "big", key), []).append(r)
                        say(f"   {n:8s} big  {key:15s} {fmt(r)}")
                finally:
                    for _ in range(50):
                        try:
                            g.rmdir()
                            break
                        except OSError:
                            time.sleep(0.1)
    raw = {"reps": a.reps, "seconds": a.seconds, "elapsed": time.perf_counter() - t_all,
           "section": a.section, "systems": systems,
           "readahead_kb": native_ra, "alt_readahead_kb": alt_ra,
           "names": names, "cases": cases,
           "results": [{"workload": k[0], "case": k[1], "system": k[2], "runs": v}
                       for k, v in res.items()],
           "limits": [{"key": list(k) if isinstance(k, tuple) else k, "runs": v}
                      for k, v in lim.items()]}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / ("small.json" if a.section == "small" else f"{a.section}.json")).write_text(
        json.dumps(raw))
    report(raw)


def fmt(r):
    if r.get("error"):
        return "failed: " + r["error"]
    return f"{r['rate']:>12,.0f} samples/s  (start-up {r['startup']:.2f} s)"


def med_rate(runs):
    xs = [r["rate"] for r in runs if r.get("rate")]
    return median(xs) if xs else None


def report(raw):
    res = {(x["workload"], x["case"], x["system"]): x["runs"] for x in raw["results"]}
    lim = {(tuple(x["key"]) if isinstance(x["key"], list) else x["key"]): x["runs"]
           for x in raw["limits"]}
    memcpy = median([x[0] for x in lim["memcpy"]]) * 1e9
    lines = [
        "## Small records and cold starts (issue: small records)", "",
        f"Machine: {machine()}. Produced by bench/small.py in {raw['elapsed'] / 60:.1f} min: every "
        f"contender in a process of its own, in rotating order, in each of {raw['reps']} "
        "repetitions; medians. Warm: the contender's files read once before, rate over "
        f"{raw['seconds']:g} s after its first batch. Cold: its files evicted, one epoch in random "
        "order counted from its creation (start-up and first batch included). The baselines "
        "(bench/baselines.py) gather whole batches in the training process itself: a NumPy "
        "memmap loop on one thread (np.take for records, one fancy index of a strided view per "
        "field for windows), the same gather in torchdata.nodes and SPDL thread pools, and Grain "
        "reading ArrayRecord files; each in the fastest setting its sweep found. stoker: "
        "`stoker.Loader`, `random` order, default options (checksums on), and again with "
        f"`verify=False` to price the checks. memcpy on one thread: {memcpy / 1e9:.1f} GB/s. The "
        f"data's block device reads ahead {raw.get('readahead_kb')} KiB"
        + (f" (the kernel's default is 128 KiB; a memory-mapped file's page faults read that much "
           f"around each miss, which helps a memmap loop that pulls a whole file in at random); "
           f"the cold cases ran at that setting and again at "
           f"{raw['alt_readahead_kb']} KiB." if raw.get("alt_readahead_kb") else ".")
        + "", ""]
    targets = []
    for n in raw["names"]:
        sb = sample_bytes(n)
        lines += [f"### {TITLES[n]}", ""]
        for case in ("warm", "cold", "cold-ra"):
            systems = [s for s in SYSTEMS + ("stoker-nocheck", "stoker-v1", "stoker-v1-nocheck")
                       if (n, case, s) in res]
            if not systems:
                continue
            rates = {s: med_rate(res[(n, case, s)]) for s in systems}
            if case == "warm":
                head = f"**warm** | limit: memcpy, one thread = {memcpy / sb:,.0f} samples/s"
                lim_rate = memcpy / sb
            else:
                sq = median([x[0] for x in lim[(n, "seqread")]]) * 1e9
                rr = median([x[1] for x in lim[(n, "randread")]])
                what = ("**cold, first epoch**" if case == "cold" else
                        f"**cold, first epoch, read-ahead {raw.get('alt_readahead_kb')} KiB (the "
                        "kernel's default)**")
                head = (f"{what} | limits: O_DIRECT sequential reads {sq / 1e9:.2f} "
                        f"GB/s = {sq / sb:,.0f} samples/s; O_DIRECT random reads at the sample size "
                        f"{rr:,.0f} samples/s")
                lim_rate = sq / sb
            others = {s: r for s, r in rates.items() if r and not s.startswith("stoker")}
            best = max(others, key=others.get) if others else None
            lines += [head, "", "| system | samples/s | GB/s | x best other | x limit | start-up s "
                      "| all runs |", "|---|---:|---:|---:|---:|---:|---|"]
            for s in systems:
                m = rates[s]
                runs = res[(n, case, s)]
                if m is None:
                    err = next((r["error"] for r in runs if r.get("error")), "no batches")
                    lines.append(f"| {NAMES[s]} | failed | | | | | {err} |")
                    continue
                st = median([r["startup"] for r in runs if r.get("rate")])
                bold = "**" if s == "stoker" else ""
                vs = f"{m / others[best]:.2f}" if best and s.startswith("stoker") else ""
                lines.append(f"| {bold}{NAMES[s]}{bold} | {m:,.0f} | {m * sb / 1e9:.2f} | {vs} | "
                             f"{m / lim_rate:.2f} | {st:.2f} | "
                             + ", ".join(f"{r['rate']:,.0f}" if r.get("rate") else "x" for r in runs)
                             + " |")
            if best:
                lines += ["", f"Best other: {NAMES[best]}."]
            lines.append("")
            targets += target_rows(n, case, rates, sb, memcpy, lim)
        if (n, "big", "stoker") in res or (n, "big", "skipped") in res:
            more, rows = big_table(n, res, lim, sb)
            lines += more
            targets += rows
    lines += ["### Targets, this run", "", "| target | measured | met |", "|---|---:|---|"]
    lines += [f"| {t} | {v} | {'yes' if ok else '**no**'} |" for t, v, ok in targets]
    section = raw.get("section", "small")
    if section == "small":
        lines += ["", GAPS]
    else:
        lines[0] = f"## {SECTIONS.get(section, section)}"
        if section in NOTES:
            lines += ["", NOTES[section]]
    text = "\n".join(lines)
    print(text)
    write_section(section, text)


def big_table(n, res, lim, sb):
    if (n, "big", "skipped") in res:
        return ["**larger than memory**: not measured (no memory cgroup could be made here)", ""], []
    sq = median([x[0] for x in lim[(n, "big-seqread")]]) * 1e9
    rr = median([x[1] for x in lim[(n, "big-randread")]])
    out = [f"**cold, larger than memory** (a memory cgroup holding half of the data) | limits: "
           f"O_DIRECT random reads of 4 KiB (a 512-byte sample's page) {rr:,.0f}/s; O_DIRECT "
           f"sequential reads {sq / 1e9:.2f} GB/s", "",
           "| system | samples/s | GB/s | x its limit | all runs |", "|---|---:|---:|---:|---|"]
    rows = []
    for s, lim_rate in (("stoker", rr), ("stoker-block", sq / sb), ("stoker-v1-block", sq / sb),
                        ("numpy", rr)):
        runs = res.get((n, "big", s), [])
        if s == "stoker-v1-block" and not runs:
            continue
        m = med_rate(runs)
        if m is None:
            out.append(f"| {NAMES[s]} | failed | | | |")
            continue
        out.append(f"| {NAMES[s]} | {m:,.0f} | {m * sb / 1e9:.2f} | {m / lim_rate:.2f} | "
                   + ", ".join(f"{r['rate']:,.0f}" if r.get("rate") else "x" for r in runs) + " |")
        if s == "stoker":
            rows.append(("rec512 larger than memory, random: >= 0.8 of random reads at the sample "
                         "size", f"{m / lim_rate:.2f}", m / lim_rate >= 0.8))
        if s == "stoker-block":
            rows.append(("rec512 larger than memory, block: >= 0.8 of sequential reads",
                         f"{m / lim_rate:.2f}", m / lim_rate >= 0.8))
    return out + [""], rows


def target_rows(n, case, rates, sb, memcpy, lim):
    rows = []
    st, nc = rates.get("stoker"), rates.get("stoker-nocheck")
    npy = rates.get("numpy")
    if st is None:
        return rows
    if case in ("cold", "cold-ra") and n in ("rec512", "rec1k"):
        sq = median([x[0] for x in lim[(n, "seqread")]]) * 1e9
        label = f"{n}, cold first epoch" + (", read-ahead 128 KiB" if case == "cold-ra" else "")
        if npy:
            rows.append((f"{label}: >= 1.5x the NumPy memmap loop", f"{st / npy:.2f}x",
                         st / npy >= 1.5))
        rows.append((f"{label}: >= 0.8 of O_DIRECT sequential reads",
                     f"{st * sb / sq:.2f}", st * sb / sq >= 0.8))
    if case == "warm":
        if n == "rec512":
            rows.append(("rec512, warm: >= 0.5 of one-thread memcpy", f"{st * sb / memcpy:.2f}",
                         st * sb / memcpy >= 0.5))
            if npy:
                rows.append(("rec512, warm: >= 2x the NumPy memmap loop", f"{st / npy:.2f}x",
                             st / npy >= 2))
        if n == "ragged" and npy:
            rows.append(("ragged 1-64 KiB, warm: >= 1.5x the NumPy memmap loop", f"{st / npy:.2f}x",
                         st / npy >= 1.5))
        if n == "windows" and npy:
            rows.append(("windows (x, y), warm: >= 1.3x the NumPy strided-view loop",
                         f"{st / npy:.2f}x", st / npy >= 1.3))
        if nc:
            rows.append((f"{n}, warm: checksums cost <= 10%", f"{1 - st / nc:.0%}", st / nc >= 0.9))
        v1, v1nc = rates.get("stoker-v1"), rates.get("stoker-v1-nocheck")
        if v1:
            rows.append((f"{n}, warm: format version 2 against version 1, checks on (faster)",
                         f"{st / v1:.2f}x", st > v1))
        if v1nc and nc:
            rows.append((f"{n}, warm: format version 2 against version 1, checks off (faster)",
                         f"{nc / v1nc:.2f}x", nc > v1nc))
    return rows


SECTIONS = {"small-v2": "Format version 2 against version 1, small records (issue 39)"}

NOTES = {"small-v2": """### What the figures say, and what is left (kept by hand)

Notes on the run of 2026-11-27 on the 2-core AMD EPYC development machine, a virtual machine whose disk and memory are shared: its "O_DIRECT sequential reads" came out anywhere from 1.1 to 2.6 GB/s within one run (1.16 GB/s for the 512-byte case above, 2.64 GB/s for the 1 KiB case minutes later), so a cold "x limit" here is good to a third at best, and above 1 where the disk was slow while the limit was measured. Compare the contenders side by side instead: they ran in rotation, seconds apart.

- **Format version 2 in the loader: within noise of version 1 when warm** (checks on 1.04-1.13x in two runs, checks off 0.97-0.99x; 1 KiB 0.91-0.94x and 1.02-1.12x). The standalone loop (`stoker-gather-limit`, bench/gather_limit.c: the loader's prefetching without the loader, one thread, the mapped shard) shows what the arithmetic can save: 512-byte records at 59.7 ns with version 2 against 73.7 ns through version 1 entries, unchecked, and 91.9 against 104.9 checked (medians of 5; 1 KiB: 125.7 against 146.5, 173.3 against 193.8). In the loader a worker spends 110-130 ns a record (`stoker read --threads 1`), most of it waiting on the record's own lines (in a profile, 86% of the gather's samples sit on its prefetch instructions: the misses in flight are the limit), so the entry that version 1 prefetched well ahead cost little there. Version 2's gain in the loader shows where the index is read cold: larger than memory, block order read 2.87 M samples/s against version 1's 1.92 in the same run (the version 1 index is 64 MB, read at open and held under the cgroup's limit; version 2's is 16 MB).
- **Block order larger than memory: 0.70 of sequential reads (target 0.8; 0.34 before this run's change).** With two group buffers, which a cgroup holding half the data leaves, the next group's read waited for the current group to be cut: 10 ms of every 50-60 with the device idle (a trace). Now reads run back to back, 3 ms apart (the checks of what was read). What remains is the device's own rate for the pattern: a group is 16 blocks of 4 MiB at random places, and this disk reads 4 MiB at random at 1.6-1.9 GB/s against 2.5-2.6 sequential (`stoker-limits randread 4194304`), 0.65-0.75 of it. Larger blocks do not close it: measured later, 5 rotating repetitions in a cgroup at half the data, `block_bytes` of 4, 8 and 16 MiB (`block_group` 16, 8 and 4, so that a group stays 64 MiB) read 0.765, 0.757 and 0.764 GB/s, medians, counting start-up, 0.59-0.62 of sequential reads measured in the same repetitions (1.25 GB/s, from 0.97 to 2.05 in one run) and 0.72-0.81 of the device's O_DIRECT random reads of the same size (1.04, 0.94 and 1.04 GB/s: on this disk random reads of 4 to 16 MiB run at one rate; `stoker-limits randread` at depths 4 to 64 also gave 0.80-0.98 GB/s each). The loader's reads are in flight for the whole run (`stats()`' `io` seconds, 1.0-1.2 s an epoch, equal or pass its elapsed time), so the gap to that limit lies in how the reads meet the device. One guess tested: a group's 16-26 reads are issued together and the next group's only once the last of them is in, so the device's queue drains at every group's end; but the limit's loop made to do the same (16 or 32 reads of 4 MiB, all waited for before the next ones) read 0.78 and 0.79 GB/s against 0.85 and 0.81 with its queue kept full, medians of 3: a few percent at most. The device's own spread between repetitions seconds apart (random reads 0.90-1.17 GB/s, sequential 0.97-2.05) is as large as the gap, so it is not resolved by this disk. Left to try: checking a group's blocks in the workers instead of the reader, which would give back the 3 ms gaps (about 5%: 0.05 s of checks in 1.1 s), and the measurement on a disk of steady rate.
- **Warm 512-byte records: 1.11x the NumPy loop (target 2x), 0.35 of one-thread memcpy (target 0.75).** Two workers at 110-130 ns a record each, against 60-75 ns in the standalone loop over one 256 MB shard and 77-88 ns over a 1 GB file (both mappings, the loader's too, are mapped with 2 MiB entries: FilePmdMapped in /proc/PID/smaps covers them); the NumPy loop gathers at about 130 ns a record on one thread, and on two cores the Python consumer takes time from stoker's two workers. Not found in this session: where the remaining 30-50 ns of a worker's record goes (the permutation is 6% of its time, waking the consumer 3%); this machine gives no hardware counters to a profiler. Next: the gather with the permutation and the batch bookkeeping taken out one by one, against `stoker-gather-limit`. Found on the way, and worth more: how the page cache holds the data. The same 1 GB of 512-byte records, one shard, `stoker read --threads 1 --no-verify`: 5.8-7.3 M samples/s just after `stoker.write` wrote it (its page cache in small folios: FilePmdMapped 0 in the reader's smaps), 8.5-8.7 once evicted and read back by the loader's warm-up (2 MiB folios, FilePmdMapped covering the file). The loader's warm-up runs only for data not in memory, so a dataset read just after it was written, or cached by another program's reads, gathers at the slower rate; MADV_COLLAPSE, which would remap it, is refused (EINVAL) for this kernel's ext4 files. The first repetition of a fresh run of this benchmark shows it (stoker and the NumPy loop alike at about 3 M samples/s warm, against 8-9 in the next ones). Since mended for what stoker writes itself: the writer now writes a shard's data region in pieces that end on the file's 2 MiB boundaries (src/format/writer.c), and the page cache then holds it in 2 MiB folios from the start (974 of 991 MiB of the 1 GB dataset mapped in 2 MiB pages, against 6 MiB as the earlier writer left it). Read as written, one worker, random order, medians of 7 alternating runs: 8.67 M samples/s unchecked and 4.68 checked, against 6.27 and 2.83 for the same records from the earlier writer; after both were evicted and read once, 10.37 and 5.21 against 9.82 and 4.76. Left: data cached in small pages by another program's reads (a doctor verdict, and a choice, an option or `stoker cache`, to re-read it through the warm-up).
- **Checks: 35% of the 512-byte rate, 28% of 1 KiB (target 10%).** XXH3 of 512 bytes takes 12.5 ns from L1 (the AVX2 build; the AVX-512 one 17.7 ns here), (13.7 ns in `stoker-gather-limit`'s run), yet a checked record costs a worker 60-70 ns more than an unchecked one (`stoker read --threads 1`: 5.6-5.9 against 9.8 M samples/s), and 32 ns more in the standalone loop. The hash reads the copy just written, whose bytes wait on the record's misses; while it waits its instructions fill the window that would otherwise issue the next records' loads. Tried before (docs/BENCHMARKS.md, "Small records and cold starts"): hashing the mapping first, hashing 1-16 records behind the copy, runs hashed then copied; block checks would hash the whole data each epoch, no less work. Tried in this run (`stoker-gather-limit`'s v2+after): the batch of 1024 copied whole, then every copy hashed: 126 ns a record against 103 hashing each copy at once (the 512 KiB batch has left L1 and most of L2 by then). Left: the check moved off the gather (a worker hashing the batch once it is complete, while the other gathers), and, a decision for the team, checking a record once per loader while its pages stay cached rather than once per epoch.
- **The checks' cost grows with the data's footprint, in the loader and the standalone loop alike** (measured after the run above, five interleaved rounds, medians, one 1 GB shard of 512-byte records cached in 2 MiB folios, one worker, random order, batches of 1024). `stoker read --threads 1`: 114 ns a record unchecked, 202 checked. `stoker-gather-limit` over the same file: 70 and 158; over its first 256 MB: 64 and 93. So a check costs about 88 ns a record over 1 GB in both, and 29 ns over 256 MB: it is not the loader's doing. The earlier comparison above (60-70 ns in the loader against 32 in the standalone loop) set a 1 GB loader against a 256 MB loop. The hash itself stays 13-14 ns from L1. In both profiles the samples sit on the prefetch instructions, so the likely reading is this: the hash delays the issue of the next records' prefetches, and each of those misses takes longer when the data spans more 2 MiB pages. That would make the checks' share depend on the dataset's size, as the memory stalls do. The loader's worker trailed the standalone loop by 44 ns, checked or not. The general path's per-field work was 26 ns of it (version 2's own pass, next bullet, removed it); the other 18 ns or so is not explained. It is not the consumer spinning on the other core: a spinner there leaves the loop's time unchanged.
- **Version 2's own gather pass (`gather_dense` in src/pipeline/gather.c, added after the run above)** takes a version 2 record by arithmetic alone, without the general path's per-field decisions. One worker, on the 1 GB file of the bullet above, five interleaved rounds: 88 ns a record unchecked against 114 (two fields of 480 and 8 bytes: 110 against 135; 1 KiB: 172 against 190). Checked, it is within noise of the old pass, since the hash and the misses it delays dominate. This benchmark's warm cases, rerun after the change (`--cases warm --workloads rec512,rec1k --systems stoker,numpy`, 3 repetitions; the first is the small-folio one, so the ranges below are the 2nd and 3rd). 512-byte records unchecked: 16.2-16.9 M samples/s against the NumPy loop's 8.1-8.3, 2.0x, where the run above had about 13. Checked: 8.6-8.8, 1.09x the NumPy loop as before, so the checks now cost 46% of the unchecked rate. 1 KiB records: 10.5 M/s unchecked, 7.3 checked, NumPy 4.5-5.0. So the 2x target is met with checks off and not with them on. What is left of the gap is the hash itself, as the bullet above explains.
- **Cold first epoch (8 MiB read-ahead): 1.61x the NumPy loop on 512-byte records, 2.46x on 1 KiB (targets 1.3x); at 128 KiB read-ahead 3.3-3.5x.** A random first epoch cannot go faster than its warm-up plus its gather: its first batch holds a record from nearly every 2 MiB of the data, so it completes when the warm-up does, and the copying of the epoch follows (the ring's few batches are all that overlap). From C, 1 GB of 512-byte records: warm-up 0.42 s at the disk's rate (the workers check its blocks meanwhile), then 0.14 s of gather, 0.61 s in all: 0.69 of the warm-up's own rate, and the bound for this order is about 0.75. Closing the rest needs an order whose first batches need only the data already read (block order does), or an epoch's worth of batch memory.
"""}

GAPS = """### Where stoker falls short, why, and what next

These notes are kept by hand; the tables above are the measurement they refer to. The run of 2026-11-26 was on a machine whose disk reads 1.5 GB/s, twice the run before it; figures quoted from earlier runs say so. Format version 2 (records of fixed-shape fields located by arithmetic, the "left to try" of the first note) and block order reading the next group while the current one is cut came after this run: "Format version 2 against version 1, small records" below has their measurements, on another machine.

- **Warm 512-byte records: 1.2x the NumPy loop (target 2x); 0.55 of
  one-thread memcpy (target 0.5, met in this run, 0.24 in the one
  before).** A record drawn at random costs two cache and TLB misses (its
  index entry, then its bytes) where memcpy streams; the page cache is
  mapped with 2 MiB pages (the warm-up makes sure of it: see "Figures
  behind design choices"), but nested paging keeps a miss expensive. In an
  earlier run, a standalone C loop over the same mapping (random 512-byte
  copies with the same prefetching) ran at about the rate of a stoker
  worker with checks off: the gather is at the machine's limit, not the
  loop's. The permutation (a Feistel network evaluated in lanes) takes
  about 12% of a worker; the NumPy loop draws one np.random permutation per
  epoch. Left to try: records of a fixed size located by arithmetic, with
  no entry to fetch (which needs the per-record checksum moved beside the
  record or replaced by block checks).
- **The checks cost 15% on 512-byte records and ragged ones, 31% on 1 KiB
  (target 10%; the run before: 20% and 10%).** XXH3 of a 512-byte record
  that is already in L1 takes 22 ns, but inside the gather it adds 60-80 ns
  a record (earlier run, the standalone loop above: 10.3 to 7.7 M/s): its
  instructions fill the out-of-order window that otherwise overlaps the
  next records' misses. Tried: hashing the mapping before the copy and the
  copy after it (the same), hashing 1 to 16 records behind the copy (no
  change beyond noise), runs of 64 KiB hashed then copied (10% slower).
  Hashing each 64 KiB block once per epoch instead would read the data
  twice: 1 GB at 13.6 GB/s is 80 ms of a core per epoch, no less than the
  per-record hashes.
- **Cold first epoch at the device's own read-ahead (8 MiB): 0.89x the
  NumPy loop (target 1.5x; 1.3x in the run before, on a disk half as
  fast), at 0.60-0.63 of the device.** With 8 MiB read-ahead every page
  fault of the NumPy loop reads 8 MiB around it, which pulls a 1 GB file
  in at 0.7 of this device in any order. stoker's first epoch in random
  order is its warm-up, at the device's rate, then the epoch's gather: a
  random epoch's first batch needs nearly every byte, so the two do not
  overlap. From C (rec512, two workers): first batch after 0.50-0.56 s,
  the rest of the epoch 0.28-0.33 s; from Python the gather shares the two
  CPUs with the consumer and takes longer. The loop's first batch waits as
  long (its start-up column), but it then needs no second pass. The
  repetitions vary by a fifth: four more cold epochs of stoker from Python
  took 0.84-1.03 s (1.9-2.4 M samples/s), about even with the loop. At the
  kernel's default read-ahead (128 KiB) the NumPy loop falls to 0.4 of the
  device and stoker, whose warm-up does its own large reads, stays at
  0.8-0.9: 2.2-2.4x. The first-epoch figures include start-up (the index
  read, the first batch) and vary between repetitions on this shared disk.
- **Block order over data that does not fit: 0.39 of sequential reads
  (target 0.8; 0.59 in the run before, against a device 2.6x slower).**
  The rate counts the whole first epoch from the loader's creation: reading
  the 64 MB index cold and the first 64 MiB group before the first batch
  took 0.2-0.36 s of a 2 s epoch in the run before. After that one thread
  reads the groups with O_DIRECT in 4 MiB pieces, all in flight, and
  hashes them (5 ms a group) while the workers cut batches. Left to do:
  start reading the first group while the index is read, and hand a group
  to the workers piece by piece as it lands. Random order over the same
  data reaches 1.3 of random 4 KiB reads (neighbouring samples share
  pages).
- **Windows, cold: "x limit" above 1** because windows overlap: a 365-row
  window delivers 24 KiB from 1.5 KiB of new rows, so delivered bytes far
  exceed the bytes read.
"""


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--run":
        run_one(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6])
    elif len(sys.argv) > 1 and sys.argv[1] == "--report":
        report(json.loads(Path(sys.argv[2]).read_text()))
    else:
        main()
