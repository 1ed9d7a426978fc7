"""The Python binding against the C command line on the same data, warm:
windows of 365 days, batches of 256, random order, the same number of
batches, alternating, medians. The binding should add little."""
import json
import subprocess
import sys
import time

from common import OUT, STOKER, machine, median, write_section


def cli(ds, batches):
    out = subprocess.run([str(STOKER), "read", str(ds), "--json", "--window", "365", "--batch",
                          "256", "--shuffle", "random", "--max-batches", str(batches)],
                         check=True, capture_output=True, text=True).stdout
    x = json.loads(out)
    return x["bytes"] / x["seconds"] / 1e9


def py(ds, batches):
    code = f"""
import stoker, time, json
ld = stoker.Loader({str(ds)!r}, batch_size=256, window=365, shuffle="random")
it = iter(ld)
t = time.perf_counter(); n = 0
for _ in range({batches}):
    n += next(it)["x"].nbytes
print(json.dumps(n / (time.perf_counter() - t) / 1e9))
"""
    return json.loads(subprocess.run([sys.executable, "-c", code], check=True,
                                     capture_output=True, text=True).stdout)


def main():
    ds = OUT / "hydro-2000.stk"
    if not (ds / "manifest.json").exists():
        sys.exit("run bench/engine.py first: it makes bench/out/hydro-2000.stk")
    subprocess.run(f"cat {ds}/*.stk > /dev/null", shell=True, check=True)
    r = {"cli": [], "python": []}
    for _ in range(5):
        r["cli"].append(cli(ds, 1500))
        r["python"].append(py(ds, 1500))
    m = {k: median(v) for k, v in r.items()}
    text = "\n".join([
        "## Python binding against the command line (issue: Python package)", "",
        f"Machine: {machine()}. hydro-2000 (bench/engine.py), warm, windows of 365, batches of "
        "256, `random`, 1,500 batches per run, 5 runs alternating, medians.", "",
        "| reader | GB/s of batch data |", "|---|---:|",
        f"| `stoker read` (C) | {m['cli']:.2f} |",
        f"| `stoker.Loader` (Python, NumPy views) | {m['python']:.2f} |",
        f"| **ratio Python / C** | **{m['python'] / m['cli']:.2f}** |", "",
        "All runs: " + "; ".join(f"{k}: " + ", ".join(f"{x:.2f}" for x in v) for k, v in r.items()),
    ])
    print(text)
    write_section("python_vs_cli", text)


if __name__ == "__main__":
    main()
