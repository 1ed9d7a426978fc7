"""Remote datasets over an emulated cloud link: an S3 server (rclone serve
s3, SigV4) in a network namespace of its own, reached through a veth pair
shaped by the kernel's traffic control (a rate and a delay each way: netem,
or tbf and a delaying relay where the kernel has no netem), side by side in
one run:

  - the link's limit: its shaped rate, and many parallel range GETs of the
    shard objects with curl (8 MiB ranges, 16 at once, SigV4-signed) to
    /dev/null (shares are of the larger);
  - stoker from a cold cache, block order and random order, and under a
    cache budget of a quarter of the dataset (block order): the epoch's
    rate as a share of that limit, and the cache's peak disk use against
    its budget;
  - two nodes (two processes, world_size 2, a cache each) reading one
    epoch in block order at once through the same link, with a stream per
    rank (the default) and with one stream: the bytes each node fetched
    against its share, and the epoch's rate;
  - stoker with everything cached, against the same dataset read locally;
  - MosaicML Streaming and LitData reading the same samples (their own
    formats of them, in the same bucket) from the same server, cold and
    warm, each in its documented setting (a DataLoader with workers).

Needs root (network namespaces, tc); skipped with the reason otherwise.
Every figure is the median of several repetitions, alternating the
contenders.  Writes its section of BENCHMARKS.md.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from common import OUT, STOKER, machine, median, write_section

RCLONE = Path(sys.executable).parent / "rclone"
KEY, SECRET = "AKIASTOKERBENCHKEY01", "stoker-bench-secret-0123456789"
NS, HOST_IF, SRV_IF = "stkbench", "stkb-h", "stkb-s"
HOST_IP, SRV_IP, PORT = "10.77.0.1", "10.77.0.2", 9000
REC = 16384  # float32 per record: 64 KiB, plus an int64 label
BATCH = 64


def sh(*cmd, check=True):
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


def link_up(rate, delay):
    link_down()
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", SRV_IF)
    sh("ip", "link", "set", SRV_IF, "netns", NS)
    sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", HOST_IF)
    sh("ip", "link", "set", HOST_IF, "up")
    ns = ("ip", "netns", "exec", NS)
    sh(*ns, "ip", "addr", "add", f"{SRV_IP}/24", "dev", SRV_IF)
    sh(*ns, "ip", "link", "set", SRV_IF, "up")
    sh(*ns, "ip", "link", "set", "lo", "up")
    # The rate each way (tbf).  The delay: netem where the kernel has it,
    # else a relay in front of the server (delay_relay.py) adds it.
    for pre, dev in (((), HOST_IF), (ns, SRV_IF)):
        if sh(*pre, "tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", delay, "rate",
              rate, "limit", "20000", check=False).returncode == 0:
            NETEM[0] = True
        else:
            sh(*pre, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", "4mb",
               "latency", "200ms")


NETEM = [False]


def link_down():
    sh("ip", "link", "del", HOST_IF, check=False)
    sh("ip", "netns", "del", NS, check=False)


def make_datasets(root, n):
    """The same n records (64 KiB of float32 and a label) as a stoker
    dataset, an MDS dataset and a LitData dataset, in bucket/ of root."""
    b = root / "bucket"
    if (b / "done").exists():
        return
    shutil.rmtree(b, ignore_errors=True)
    b.mkdir(parents=True)
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((n, REC)).astype(np.float32)
    import stoker
    stoker.write(str(b / "stk"), {"x": xs, "y": np.arange(n, dtype=np.int64)})
    import peerimport
    streaming = peerimport.streaming()
    with streaming.MDSWriter(out=str(b / "mds"), columns={"x": f"ndarray:float32:{REC}",
                                                         "y": "int"},
                             size_limit=64 << 20) as w:
        for i in range(n):
            w.write({"x": xs[i], "y": i})
    import litdata
    (b / "lit-in").mkdir()
    np.save(b / "lit-in" / "x.npy", xs)
    litdata.optimize(fn=_lit_fn, inputs=[(str(b / "lit-in" / "x.npy"), i) for i in range(n)],
                     output_dir=str(b / "lit"), chunk_bytes="64MB", num_workers=2,
                     mode="overwrite", verbose=False, start_method="fork")
    shutil.rmtree(b / "lit-in")
    (b / "done").write_text("")


def _lit_fn(item):
    path, i = item
    return {"x": np.load(path, mmap_mode="r")[i].copy(), "y": i}


def curl_limit(env, objects):
    """Bytes/s of 8 MiB range GETs of every object, 16 in flight."""
    cfg = OUT / "curl-ranges.cfg"
    lines, total = [], 0
    for url, size in objects:
        for a in range(0, size, 8 << 20):
            z = min(a + (8 << 20), size) - 1
            # Options in a config file are global unless separated by
            # `next`: each URL gets its own range.
            lines += [f'url = "{url}"', f'range = "{a}-{z}"', 'output = "/dev/null"', "next"]
            total += z - a + 1
    t0 = time.perf_counter()
    # The signing options go with every URL: `next` resets them, so they are
    # written into each entry.
    sign = ['aws-sigv4 = "aws:amz:us-east-1:s3"', f'user = "{KEY}:{SECRET}"',
            'header = "x-amz-content-sha256: UNSIGNED-PAYLOAD"', "fail", "silent",
            'write-out = "%{size_download}\\n"']
    text = "\n".join(x for entry in zip(*[iter(lines)] * 4) for x in (*entry[:3], *sign, entry[3]))
    cfg.write_text(text.rsplit("\nnext", 1)[0] + "\n")  # no empty entry at the end
    out = subprocess.run(["curl", "--parallel", "--parallel-max", "16", "-K", str(cfg)],
                         check=True, env=env, capture_output=True, text=True).stdout
    got = sum(int(x) for x in out.split())
    assert got == total, (got, total)  # every range came whole
    return total / (time.perf_counter() - t0)


STOKER_EPOCH = r"""
import json, sys, time
import stoker
url, cache, order, budget = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rank, world, streams = (int(x) for x in (sys.argv[5:8] or (0, 1, 0)))
kw = dict(cache_dir=cache) if url.startswith("s3://") else {}
kw.update(rank=rank, world_size=world)
if streams:
    kw["streams"] = streams
if budget != "-":
    kw["cache_budget"] = int(budget)
if order == "block":
    kw.update(block_bytes=4 << 20, block_group=2)
t0 = time.perf_counter()
n = 0
with stoker.Loader(url, %d, shuffle=order, seed=1, **kw) as ld:
    for b in ld:
        n += len(b["y"])
    rs = ld.remote_stats()
print(json.dumps({"s": time.perf_counter() - t0, "n": n, "remote": rs}))
""" % BATCH

PEER_EPOCH = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[5])
kind, remote, cache, epochs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
import torch
t0 = time.perf_counter()
if kind == "mds":
    import peerimport
    streaming = peerimport.streaming()
    # What an earlier run left in shared memory (Streaming documents this
    # call for it).
    from streaming.base.util import clean_stale_shared_memory
    clean_stale_shared_memory()
    ds = streaming.StreamingDataset(remote=remote, local=cache, shuffle=True, shuffle_seed=1,
                                    batch_size=%d)
    dl = torch.utils.data.DataLoader(ds, batch_size=%d, num_workers=2)
else:
    import litdata
    ds = litdata.StreamingDataset(remote, cache_dir=cache, shuffle=True, seed=1,
                                  storage_options={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
    dl = litdata.StreamingDataLoader(ds, batch_size=%d, num_workers=2)
times = []
for e in range(epochs):
    n = 0
    t = time.perf_counter()
    for b in dl:
        n += len(b["y"])
    times.append(time.perf_counter() - (t0 if e == 0 else t))
print(json.dumps({"s": times, "n": n}))
""" % (BATCH, BATCH, BATCH)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rate", default="2gbit")
    ap.add_argument("--delay", default="10ms", help="each way (the round trip is twice)")
    a = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        print("remote_link: skipped: needs root with ip and tc (network namespaces)")
        return
    root = OUT / "remote-link"
    make_datasets(root, a.records)
    b = root / "bucket"
    stk_size = sum(f.stat().st_size for f in (b / "stk").iterdir())
    data_bytes = a.records * (REC * 4 + 8)
    link_up(a.rate, a.delay)
    one_way = float(a.delay.rstrip("ms")) / 1000
    procs = [subprocess.Popen(["ip", "netns", "exec", NS, str(RCLONE), "serve", "s3", str(root),
                               "--auth-key", f"{KEY},{SECRET}", "--addr",
                               f"{SRV_IP if NETEM[0] else '127.0.0.1'}:{PORT}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    if not NETEM[0]:
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", NS, sys.executable, str(Path(__file__).parent / "delay_relay.py"),
             SRV_IP, str(PORT), "127.0.0.1", str(PORT), str(one_way)]))
    endpoint = f"http://{SRV_IP}:{PORT}"
    env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, S3_ENDPOINT_URL=endpoint,
               AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="us-east-1",
               AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/nonexistent",
               AWS_SHARED_CREDENTIALS_FILE="/nonexistent", PYTHONPATH=str(Path(__file__).parent))
    objects = [(f"{endpoint}/bucket/stk/{f.name}", f.stat().st_size)
               for f in sorted((b / "stk").glob("*.stk"))]
    cache = OUT / "remote-link-cache"
    script = OUT / "stoker_epoch.py"
    script.write_text(STOKER_EPOCH)
    peer_script = OUT / "peer_epoch.py"
    peer_script.write_text(PEER_EPOCH)
    keys = ("link", "block_cold", "random_cold", "budget_block", "warm", "local", "nodes",
            "nodes_one_stream", "mds_cold", "mds_warm", "lit_cold", "lit_warm")
    node_fetch = {"nodes": [], "nodes_one_stream": []}  # per node, of the dataset
    r = {k: [] for k in keys}
    peaks, budget = [], stk_size // 4

    def stoker_epoch(url, order, budget="-"):
        out = subprocess.run([sys.executable, str(script), url, str(cache), order, str(budget)],
                             env=env, check=True, capture_output=True, text=True).stdout
        x = json.loads(out)
        assert x["n"] == a.records, x
        return data_bytes / x["s"], x["remote"]

    def two_nodes(order, streams):
        """Two ranks, a cache each, at once: the epoch's rate (the later
        finish) and what each fetched, as shares of the shards' bytes."""
        caches = [Path(f"{cache}-node{r}") for r in range(2)]
        for c in caches:
            shutil.rmtree(c, ignore_errors=True)
        t0 = time.perf_counter()
        ps = [subprocess.Popen([sys.executable, str(script), "s3://bucket/stk", str(caches[r]),
                                order, "-", str(r), "2", str(streams)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for r in range(2)]
        outs = [p.communicate() for p in ps]
        wall = time.perf_counter() - t0
        for p, (_, err) in zip(ps, outs):
            if p.returncode != 0:
                raise RuntimeError(f"node failed:\n{err[-3000:]}")
        xs = [json.loads(o) for o, _ in outs]
        assert sum(x["n"] for x in xs) == a.records - a.records % 2, xs
        for c in caches:
            shutil.rmtree(c, ignore_errors=True)
        return data_bytes / wall, [x["remote"]["bytes_fetched"] / stk_size for x in xs]

    def peer(kind, remote):
        shutil.rmtree(cache, ignore_errors=True)
        p = subprocess.run([sys.executable, str(peer_script), kind, remote, str(cache), "2",
                            str(Path(__file__).parent)], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{kind} failed:\n{p.stderr[-3000:]}")
        x = json.loads(p.stdout.strip().splitlines()[-1])
        return data_bytes / x["s"][0], data_bytes / x["s"][1]

    try:
        time.sleep(1.5)
        for rep in range(a.reps):
            r["link"].append(curl_limit(env, objects))
            for order, key in (("block", "block_cold"), ("random", "random_cold")):
                shutil.rmtree(cache, ignore_errors=True)
                r[key].append(stoker_epoch("s3://bucket/stk", order)[0])
            # The cache now holds everything: warm, against the local copy,
            # once the cold runs' written pages are on disk (their writeback
            # otherwise competes with the first run after them), each the
            # median of three runs taken in turn (an epoch is a few tens of
            # milliseconds here).
            os.sync()
            ws, ls = [], []
            for _ in range(3):
                ws.append(stoker_epoch("s3://bucket/stk", "random")[0])
                ls.append(stoker_epoch(str(b / "stk"), "random")[0])
            r["warm"].append(median(ws))
            r["local"].append(median(ls))
            shutil.rmtree(cache, ignore_errors=True)
            rate, rs = stoker_epoch("s3://bucket/stk", "block", budget)
            r["budget_block"].append(rate)
            peaks.append(rs["cache_peak"])
            for key, streams in (("nodes", 0), ("nodes_one_stream", 1)):
                rate, shares = two_nodes("block", streams)
                r[key].append(rate)
                node_fetch[key].append(shares)
            for kind, remote, k in (("mds", "s3://bucket/mds", "mds"),
                                    ("lit", "s3://bucket/lit", "lit")):
                cold, warm = peer(kind, remote)
                r[f"{k}_cold"].append(cold)
                r[f"{k}_warm"].append(warm)
            print(f"rep {rep}: " + ", ".join(f"{k} {v[-1] / 1e6:.0f}" for k, v in r.items()),
                  flush=True)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        link_down()
        shutil.rmtree(cache, ignore_errors=True)
    m = {k: median(v) / 1e6 for k, v in r.items()}
    # The limit: the shaped rate, or what curl got if more (it cannot be).
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    unit = next(u for u in units if a.rate.endswith(u))
    shaped = float(a.rate[:-len(unit)]) * units[unit] / 8 / 1e6
    L = max(shaped, m["link"])
    # The peers at their best repetition (MosaicML Streaming's cold epoch
    # through the relay mostly took about a minute, once 4.5 s; the cause
    # is not established), stoker at its median.
    best = {k: max(v) / 1e6 for k, v in r.items()}
    best_cold = max(best["mds_cold"], best["lit_cold"])
    rtt = 2 * float(a.delay.rstrip("ms"))
    lines = [
        "## Remote datasets over an emulated cloud link (issue: object stores)",
        "",
        f"Machine: {machine()}. Medians of {a.reps} repetitions; every contender ran in each "
        "repetition. Produced by `make bench` (bench/remote_link.py, as root).",
        "",
        f"The server (`rclone serve s3`, SigV4) runs in a network namespace of its own, reached "
        f"through a veth pair: {a.rate} each way and {a.delay} of delay each way "
        f"({rtt:.0f} ms round trip), "
        + ("both by netem. " if NETEM[0] else
           "the rate by tbf; this kernel has no netem, so the delay is added by a relay in the "
           "server's namespace (bench/delay_relay.py: what it reads is written the delay "
           "later, and a connection's setup waits a round trip); the relay ends TCP on both "
           "sides, so a connection's window does not grow over the round trip as it would, "
           "and every request still waits the round trip for its first byte. ") +
        f"Dataset: {a.records:,} records of 64 KiB of float32 and "
        f"an int64 label ({data_bytes / 2**20:.0f} MiB of samples; stoker's shards "
        f"{stk_size / 2**20:.0f} MiB), the same samples written as MDS (MosaicML Streaming, "
        "64 MB shards) and LitData chunks (64 MB), all in the same bucket. Batches of "
        f"{BATCH}; rates count the samples' bytes over the whole run (open included).",
        "",
        "| contender | MB/s | of the link |",
        "|---|---:|---:|",
        f"| the link's shaped rate ({a.rate}) | {shaped:.0f} | {shaped / L:.2f} |",
        f"| curl, 8 MiB range GETs of the shards, 16 in flight, to /dev/null | {m['link']:.0f} | "
        f"{m['link'] / L:.2f} |",
        f"| stoker, cold cache, block order | {m['block_cold']:.0f} | "
        f"**{m['block_cold'] / L:.2f}** |",
        f"| stoker, cold cache, random order | {m['random_cold']:.0f} | "
        f"**{m['random_cold'] / L:.2f}** |",
        f"| stoker, cold, block order, cache budget a quarter of the dataset "
        f"({budget / 2**20:.0f} MiB; peak disk use {median(peaks) / 2**20:.1f} MiB) | "
        f"{m['budget_block']:.0f} | {m['budget_block'] / L:.2f} |",
        f"| MosaicML Streaming, cold (DataLoader, 2 workers; median, best) | "
        f"{m['mds_cold']:.0f}, {best['mds_cold']:.0f} | {m['mds_cold'] / L:.2f}, "
        f"{best['mds_cold'] / L:.2f} |",
        f"| LitData, cold (StreamingDataLoader, 2 workers; median, best) | "
        f"{m['lit_cold']:.0f}, {best['lit_cold']:.0f} | {m['lit_cold'] / L:.2f}, "
        f"{best['lit_cold'] / L:.2f} |",
        "",
        f"Against curl's rate measured in the same run (many parallel range GETs: what the "
        f"server and link deliver to a client), stoker cold reaches {m['block_cold'] / m['link']:.2f} "
        f"in block order and {m['random_cold'] / m['link']:.2f} in random order; the table's "
        "shares are of the larger of that and the shaped rate.",
        "",
        f"Cold, stoker (median) against the better peer at its best repetition: block order "
        f"{m['block_cold'] / best_cold:.2f}x, random order {m['random_cold'] / best_cold:.2f}x. "
        + ("MosaicML Streaming's cold epoch took about a minute in some repetitions and a few "
           "seconds in others; the long ones look like a download waiting out a 60 s timeout, "
           "and whether the relay's handling of its connections causes it is not established, "
           "so the peers' best repetitions are the ones compared."
           if max(r["mds_cold"]) > 3 * min(r["mds_cold"]) else
           "The peers' best repetitions are the ones compared (in earlier runs MosaicML "
           "Streaming's cold epoch sometimes took about a minute, as if a download waited out "
           "a 60 s timeout; not in this run)."),
        "",
        "Two nodes (two processes, world_size 2, a cache each, through the same link), one "
        "epoch in block order at once; each node's share is half of the dataset:",
        "",
        "| two nodes | MB/s (the epoch, both nodes) | each node fetched, of the dataset |",
        "|---|---:|---|",
        f"| a stream per rank (the default) | {m['nodes']:.0f} | "
        + ", ".join(f"{median([s[k] for s in node_fetch['nodes']]):.2f}" for k in range(2))
        + " |",
        f"| one stream (`streams=1`: the order of one rank) | {m['nodes_one_stream']:.0f} | "
        + ", ".join(f"{median([s[k] for s in node_fetch['nodes_one_stream']]):.2f}"
                    for k in range(2)) + " |",
        "",
        "| warm (everything cached) | MB/s |",
        "|---|---:|",
        f"| stoker, s3:// from its cache, random order | {m['warm']:.0f} |",
        f"| stoker, the same dataset local, random order | {m['local']:.0f} |",
        f"| MosaicML Streaming, second epoch | {m['mds_warm']:.0f} |",
        f"| LitData, second epoch | {m['lit_warm']:.0f} |",
        "",
        f"Warm against local: {m['warm'] / m['local']:.2f}.",
        "",
        "All repetitions (MB/s): " + "; ".join(
            f"{k}: " + ", ".join(f"{x / 1e6:.0f}" for x in v) for k, v in r.items()),
        f"Cache peaks under the budget (bytes): {', '.join(str(p) for p in peaks)}; "
        f"budget {budget}.",
    ]
    text = "\n".join(lines)
    print(text)
    write_section("remote_link", text)


if __name__ == "__main__":
    main()
