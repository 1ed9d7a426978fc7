"""Packing and verifying against the copy tools, side by side in one run.

10,000 .npy files of 256 KiB each (2.5 GiB), warm page cache:
  - `stoker pack` against `cp -r` of the same files;
  - `stoker verify` against `cat` of the shard files to /dev/null.
Each pair is timed alternately, several repetitions, and the medians are
compared.  Before each timed copy or pack, dirty pages are flushed (`sync`)
so that one run's write-back does not land in the next one's time.

Run through `make bench`; writes its section of docs/BENCHMARKS.md.
"""
import argparse
import glob
import os
import shutil
import subprocess

from common import (GEN, OUT, STOKER, machine, median, run, timed, write_section)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--bytes", type=int, default=256 * 1024)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()

    OUT.mkdir(parents=True, exist_ok=True)
    src = OUT / f"blobs-{a.files}x{a.bytes}"
    if not (src / ".done").exists():
        shutil.rmtree(src, ignore_errors=True)
        run([str(GEN), "blobs", str(src), "--count", str(a.files), "--bytes", str(a.bytes)])
        (src / ".done").write_text("ok")
    files = sorted(glob.glob(str(src / "*.npy")))
    total = sum(os.path.getsize(f) for f in files)
    run(f"cat {src}/*.npy > /dev/null")  # warm

    cp_dst, ds = OUT / "cp-copy", OUT / "pack.stk"

    def clean(path):
        def f():
            shutil.rmtree(path, ignore_errors=True)
            run("sync")
        return f

    t = {k: [] for k in ("cp", "cp+sync", "pack-nosync", "pack", "verify", "cat")}
    for _ in range(a.reps):
        t["cp"].append(timed(["cp", "-r", str(src), str(cp_dst)], clean(cp_dst)))
        t["cp+sync"].append(timed(f"cp -r {src} {cp_dst} && sync", clean(cp_dst)))
        t["pack-nosync"].append(timed([str(STOKER), "pack", "--from", "npy", str(src), "-o",
                                       str(ds), "-q", "--no-sync", "--force"], clean(ds)))
        t["pack"].append(timed([str(STOKER), "pack", "--from", "npy", str(src), "-o", str(ds),
                                "-q", "--force"], clean(ds)))
        shards = sorted(glob.glob(str(ds / "*.stk")))
        run(f"cat {' '.join(shards)} > /dev/null")
        t["verify"].append(timed([str(STOKER), "verify", "-q", str(ds)]))
        t["cat"].append(timed(f"cat {' '.join(shards)} > /dev/null"))
    shutil.rmtree(cp_dst, ignore_errors=True)

    m = {k: median(v) for k, v in t.items()}
    gbs = {k: total / v / 1e9 for k, v in m.items()}
    rows = [
        ("`cp -r` (page cache, no fsync)", "cp", None),
        ("`stoker pack --no-sync`", "pack-nosync", ("cp", "pack-nosync")),
        ("`cp -r && sync` (durable)", "cp+sync", None),
        ("`stoker pack` (default: fsync before publishing)", "pack", ("cp+sync", "pack")),
        ("`cat` shards > /dev/null", "cat", None),
        ("`stoker verify` (every checksum)", "verify", ("cat", "verify")),
    ]
    lines = [
        "## Packing and verifying (issue: foundation)",
        "",
        f"{a.files:,} .npy files of {a.bytes // 1024} KiB ({total / 2**30:.2f} GiB), warm page "
        f"cache, {a.reps} repetitions alternating, medians. Machine: {machine()}.",
        "Produced by `make bench` (bench/pack_verify.py).",
        "",
        "| what | median s | GB/s | ratio to its baseline |",
        "|---|---:|---:|---:|",
    ]
    for label, k, pair in rows:
        ratio = f"**{m[pair[0]] / m[pair[1]]:.2f}**" if pair else "baseline"
        lines.append(f"| {label} | {m[k]:.3f} | {gbs[k]:.2f} | {ratio} |")
    lines += ["", "All repetitions (s): " + "; ".join(
        f"{k}: " + ", ".join(f"{x:.2f}" for x in v) for k, v in t.items())]
    text = "\n".join(lines)
    print(text)
    write_section("pack_verify", text)


if __name__ == "__main__":
    main()
