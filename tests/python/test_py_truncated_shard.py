"""A shard cut short by another program while a loader reads it: every
backend raises an error naming the shard (docs/RELIABILITY.md, "Files
changed under a reader"); through the mapping this used to end the process
with SIGBUS. The reader runs in a child process (so a SIGBUS cannot take
the test down); it takes one batch, waits while the parent truncates the
last shard, then reads on."""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import stoker

CHILD = textwrap.dedent("""
    import sys, stoker
    path, backend = sys.argv[1], sys.argv[2]
    ld = stoker.Loader(path, batch_size=1, shuffle="sequential", backend=backend,
                       threads=1, prefetch=2, memory_budget=8 << 20)
    print(ld.stats()["backend"], flush=True)
    it = iter(ld)
    next(it)
    print("ready", flush=True)
    sys.stdin.readline()          # the parent has truncated the last shard
    try:
        n = 1 + sum(1 for _ in it)
    except stoker.StokerError as e:
        print("error:", e, flush=True)
        # The worker may fill the batches after it meanwhile (faulting
        # again on the same thread): the process lives on.
        import time
        time.sleep(0.5)
        sys.exit(3)
    print("read", n, flush=True)
""")


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    path = tmp_path_factory.mktemp("trunc") / "ds"
    rng = np.random.default_rng(0)
    # 48 records of 256 KiB in shards of 1 MiB: the last shard is far from
    # the first batch and from what the ring holds ahead of it.
    stoker.write(path, {"x": rng.integers(0, 255, size=(48, 1 << 18), dtype=np.uint8)},
                 shard_bytes=1 << 20)
    return path


def run_truncating(src, tmp_path, backend):
    ds = tmp_path / "ds"
    ds.mkdir()
    for name in os.listdir(src):
        (ds / name).write_bytes((src / name).read_bytes())
    last = sorted(p for p in ds.iterdir() if p.suffix == ".stk")[-1]
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(ds), backend],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    chosen = p.stdout.readline().strip()
    assert p.stdout.readline().strip() == "ready", p.stderr.read()
    with open(last, "r+b") as f:
        f.truncate(os.path.getsize(last) // 2)
    out, err = p.communicate("go\n", timeout=120)
    return chosen, p.returncode, out, err, last.name


@pytest.mark.parametrize("backend", ["pool", "uring"])
def test_read_backends_name_the_truncated_shard(sharded, tmp_path, backend):
    chosen, rc, out, err, shard = run_truncating(sharded, tmp_path, backend)
    assert chosen.endswith(backend)   # "io_uring" for uring
    assert rc == 3, (rc, out, err)
    assert shard in out, out


@pytest.mark.parametrize("backend", ["mmap", "auto"])
def test_the_mapping_names_the_truncated_shard_instead_of_dying(sharded, tmp_path, backend):
    """Through the mapping the missing pages fault with SIGBUS; the worker
    turns it into the batch's error, naming the shard and its new size.
    "auto" chooses mmap for a dataset in the page cache (this one, just
    written)."""
    chosen, rc, out, err, shard = run_truncating(sharded, tmp_path, backend)
    assert chosen == "mmap"
    assert rc == 3, (rc, out, err)
    assert shard in out and "cut short under the reader" in out, out


def test_a_sigbus_outside_stoker_still_ends_the_process(sharded, tmp_path):
    """stoker's handler passes on what is not its own: a SIGBUS raised
    while no worker reads ends the process as before."""
    code = textwrap.dedent("""
        import os, signal, stoker
        ld = stoker.Loader(%r, batch_size=1, backend="mmap")
        next(iter(ld))
        os.kill(os.getpid(), signal.SIGBUS)
        print("survived", flush=True)
    """ % str(sharded))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    # The handler before stoker's ran: the default ends the process by
    # SIGBUS; under the sanitized build (make py-asan) it is ASan's, which
    # reports the fault and aborts.
    ended = r.returncode == -signal.SIGBUS or (
        r.returncode == -signal.SIGABRT and "AddressSanitizer: BUS" in r.stderr)
    assert ended and "survived" not in r.stdout, (r.returncode, r.stdout, r.stderr[-300:])
