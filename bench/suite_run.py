"""Runs one contender on one workload in a process of its own and prints
one JSON object: start-up seconds (to the first batch), then, for the batches
after the first, the samples, the seconds and each batch's wait in next().

    suite_run.py WORKLOAD SYSTEM DATADIR [--seconds S] [--max-batches N] [--opts JSON]

It stops after S seconds, N batches, or the end of the epoch."""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("system")
    ap.add_argument("data")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--max-batches", type=int, default=10**9)
    ap.add_argument("--opts", default="{}")
    a = ap.parse_args()
    import warnings
    warnings.filterwarnings("ignore")
    torch = None
    if a.system not in ("numpy", "spdl", "grain"):   # these never use torch: spare the import
        import torch
        torch.set_num_threads(1)
    import contenders
    d = Path(a.data)
    p = json.loads((d / "params.json").read_text())
    t0 = time.perf_counter()
    it = contenders.factory(a.workload, a.system)(torch, p, d, json.loads(a.opts))
    first = next(it)
    startup = time.perf_counter() - t0
    waits, samples = [], 0
    t_start = time.perf_counter()
    last = t_start
    while len(waits) < a.max_batches and last - t_start < a.seconds:
        n = next(it, None)
        now = time.perf_counter()
        if n is None:
            break
        waits.append(now - last)
        samples += n
        last = now
    el = last - t_start
    # total_*: from the contender's creation, first batch included (the cold
    # cases' figure: a loader that reads ahead during start-up gains nothing).
    print(json.dumps({"startup": startup, "first": first, "samples": samples, "seconds": el,
                      "total_samples": first + samples, "total_seconds": last - t0,
                      "batches": len(waits), "waits": waits[:20000]}))
    sys.stdout.flush()
    # Stop the DataLoader workers of an unfinished epoch now: left to notice
    # on their own that their parent is gone, they would keep prefetching
    # and take CPU from the next contender's run.
    import multiprocessing
    import os
    for c in multiprocessing.active_children():
        c.terminate()
    for c in multiprocessing.active_children():
        c.join(2)
    os._exit(0)  # do not wait for threads of an unfinished epoch to drain


if __name__ == "__main__":
    main()
