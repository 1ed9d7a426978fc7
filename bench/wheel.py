"""The wheel against the development build, side by side in one run: the
same loader, the same data, each in a process of its own with the Python
that has it (the development .venv, and a venv with dist/'s wheel), in
alternating order, medians of --reps.  Also the in-process limit: one
thread's memcpy of the same bytes.

Cases (the page cache warm; data made once under bench/out/wheel/):

    rec512   200,000 records of 512 bytes (float32[128]), random order,
             batch 256, default threads: records a second
    windows  400 series x 3,650 rows of x float32[16] and y float32[1],
             windows of 365 rows, random order, batch 64: windows a second

    python bench/wheel.py [--reps 5] [--seconds 2]

The wheel is built by zig's clang for generic x86-64 and glibc 2.28, the
development build by the machine's gcc with its defaults: what must hold
is that the wheel loses nothing, in particular the AVX2 hash chosen at run
time.  Writes the "wheel" section of docs/BENCHMARKS.md.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from common import OUT, ROOT, machine, median, write_section

CHILD = r"""
import json, sys, time
import numpy as np
import stoker
path, kind, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
kw = dict(batch_size=256, shuffle="random", seed=1)
if kind == "windows":
    kw = dict(batch_size=64, shuffle="random", seed=1, window=365, stride=1)
with stoker.Loader(path, **kw) as ld:
    it = iter(ld)
    next(it)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        try:
            b = next(it)
        except StopIteration:
            ld.set_epoch(ld.info()["epoch"] + 1) if hasattr(ld, "set_epoch") else None
            it = iter(ld)
            continue
        n += len(b[next(iter(b.keys()))])
    dt = time.perf_counter() - t0
print(json.dumps({"per_s": n / dt, "hash": stoker._stoker.__file__}))
"""


def make_data(out):
    import numpy as np
    sys.path.insert(0, str(ROOT / "python"))
    rec = out / "rec512.stk"
    win = out / "windows.stk"
    if not rec.exists() or not win.exists():
        py = str(ROOT / ".venv" / "bin" / "python")
        code = f"""
import numpy as np, stoker
rng = np.random.default_rng(0)
stoker.write({str(rec)!r}, {{"x": rng.standard_normal((200_000, 128)).astype(np.float32)}},
             overwrite=True)
recs = []
for s in range(400):
    recs.append({{"x": rng.standard_normal((3650, 16)).astype(np.float32),
                 "y": rng.standard_normal((3650, 1)).astype(np.float32)}})
stoker.write({str(win)!r}, recs, overwrite=True)
"""
        subprocess.run([py, "-c", code], check=True)
    return rec, win


def memcpy_limit(nbytes=512 * 200_000):
    import numpy as np
    import time
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = max(best, nbytes / (time.perf_counter() - t))
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--wheel", default=None, help="the wheel (default: the newest in dist/)")
    a = ap.parse_args()
    out = OUT / "wheel"
    out.mkdir(parents=True, exist_ok=True)
    rec, win = make_data(out)
    wheel = a.wheel or sorted((ROOT / "dist").glob("stoker-*manylinux_2_28_x86_64.whl"))[-1]
    venv = out / "venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                       check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps",
                    "--force-reinstall", str(wheel)], check=True)
    pythons = {"development build": str(ROOT / ".venv" / "bin" / "python"),
               "wheel": str(venv / "bin" / "python")}
    results = {k: {"rec512": [], "windows": []} for k in pythons}
    files = {}
    order = list(pythons)
    for rep in range(a.reps):
        for kind, path in (("rec512", rec), ("windows", win)):
            for who in (order if rep % 2 == 0 else order[::-1]):
                p = subprocess.run([pythons[who], "-c", CHILD, str(path), kind, str(a.seconds)],
                                   capture_output=True, text=True, check=True,
                                   cwd=tempfile.gettempdir())
                r = json.loads(p.stdout.strip().splitlines()[-1])
                results[who][kind].append(r["per_s"])
                files[who] = r["hash"]
    mc = memcpy_limit()
    rows = []
    for kind, unit, size in (("rec512", "records/s", 512), ("windows", "windows/s", 365 * 17 * 4)):
        dev = median(results["development build"][kind])
        whl = median(results["wheel"][kind])
        rows.append(f"| {kind} | {dev:,.0f} | {whl:,.0f} | {whl / dev:.2f} | "
                    f"{dev * size / mc:.1%} / {whl * size / mc:.1%} |")
        print(f"{kind}: dev {dev:,.0f} {unit}, wheel {whl:,.0f} {unit}, ratio {whl / dev:.3f}; "
              f"all: dev {[round(x) for x in results['development build'][kind]]}, "
              f"wheel {[round(x) for x in results['wheel'][kind]]}")
    text = "\n".join([
        f"Machine: {machine()}. The same loader from the development build (gcc, "
        f"`{os.path.basename(files['development build'])}`) and from the wheel "
        f"(`{wheel.name}`, zig cc for generic x86-64 and glibc 2.28), each case in a "
        f"process of its own, alternating, medians of {a.reps} runs of {a.seconds:g} s, "
        f"page cache warm. Last column: the bytes delivered against one thread's memcpy "
        f"({mc / 1e9:.1f} GB/s), development build / wheel.",
        "",
        "| case (a second) | development build | wheel | wheel / development | of memcpy |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "How the fast paths are chosen at run time, whatever the compiler's target: the "
        "XXH3 checksum of a whole record goes to code compiled for AVX2 (`hash_avx2.c`, "
        "built with `-mavx2` in both builds) when `__builtin_cpu_supports(\"avx2\")` says "
        "the CPU has it, else to xxHash's own dispatching entry points "
        "(`xxh_x86dispatch.c`, linked into the wheel as Debian builds it); copies are "
        "glibc's memcpy, which glibc itself picks for the CPU at load time. In the wheel "
        "that took a versioned reference (scripts/wheel-deps.sh): zig's compiler_rt, pulled "
        "in whole by an object that divides 128-bit integers, brought its own generic "
        "memcpy, which the linker preferred, and the windows ran at 0.91-0.93 of the "
        "development build (medians of 5 and 9), 60% of the time in that memcpy.",
    ])
    write_section("wheel", text)


if __name__ == "__main__":
    main()
