"""`stoker pack --resume` after the packer was killed: the result equals an
uninterrupted pack of the same inputs."""
import os
import signal
import subprocess
import sys
import time

import numpy as np

from conftest import stoker_exe


def kill_after_shards(p, ds, after):
    """SIGKILLs the packer `p` once the journal of `ds` names `after` shards
    (kill points chosen by what the packer has made durable, not by the
    clock, which made the test depend on the machine's speed), or once it
    has ended."""
    journal = ds / ".packing"
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        try:
            lines = journal.read_text().splitlines()
        except OSError:
            lines = []
        if sum(line.startswith("shard ") for line in lines) >= after:
            break
        time.sleep(0.001)
    p.send_signal(signal.SIGKILL)
    p.wait()


def test_resume_after_kill_equals_a_full_pack(tmp_path):
    exe = str(stoker_exe())
    rng = np.random.default_rng(0)
    src = tmp_path / "big.npy"
    rows = rng.standard_normal((400_000, 16)).astype(np.float32)
    np.save(src, rows)
    full = tmp_path / "full"
    subprocess.run([exe, "pack", "--from", "npy", str(src), "--split-axis0", "-o", str(full),
                    "--shard-size", "1M", "-q"], check=True)
    resumed_any = False
    # Kill points chosen by what the packer has made durable, not by the
    # clock: after the journal names 1, 3 and 8 shards (a fixed delay made
    # the test depend on the machine's speed).
    for after in (1, 3, 8):
        ds = tmp_path / f"r{after}"
        p = subprocess.Popen([exe, "pack", "--from", "npy", str(src), "--split-axis0", "-o",
                              str(ds), "--shard-size", "1M", "-q"])
        kill_after_shards(p, ds, after)
        r = subprocess.run([exe, "pack", "--from", "npy", str(src), "--split-axis0", "-o",
                            str(ds), "--shard-size", "1M", "--resume"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            # The pack had finished before the kill: nothing to resume.
            assert "already exists" in r.stderr
            continue
        resumed_any = resumed_any or "resuming after" in r.stderr
        v = subprocess.run([exe, "verify", str(ds)], capture_output=True, text=True)
        assert v.returncode == 0, v.stderr
        for rec in (0, 123_456, 399_999):
            a = subprocess.run([exe, "cat", str(ds), str(rec)], capture_output=True, text=True)
            b = subprocess.run([exe, "cat", str(full), str(rec)], capture_output=True, text=True)
            assert a.returncode == 0 and a.stdout == b.stdout
        ins = subprocess.run([exe, "inspect", str(ds)], capture_output=True, text=True).stdout
        assert "records  400000" in ins
    assert resumed_any


def _all_records(path):
    import stoker
    out = []
    with stoker.Loader(str(path), 4096, shuffle="sequential") as ld:
        for b in ld:
            out.append({k: np.asarray(v).tobytes() for k, v in b.items()})
    return out


def _parquet_inputs(d):
    import pandas as pd
    rng = np.random.default_rng(1)
    for f in range(60):
        n = 4000
        pd.DataFrame({"basin": np.full(n, f // 2, np.int64),
                      "date": (rng.permutation(n) + (f % 2) * n).astype(np.int32),
                      "a": rng.standard_normal(n).astype(np.float32),
                      "b": rng.standard_normal(n).astype(np.float32)}).to_parquet(
            d / f"f{f:03d}.parquet", index=False)


def test_parquet_resume_after_kill_equals_a_full_pack(tmp_path):
    """`stoker pack --from parquet --resume` (rows as records, and groups):
    killed once a few shards are durable, resumed, equal to an uninterrupted
    pack record for record; a pack of changed files is refused."""
    exe = str(stoker_exe())
    # (--from parquet runs the package: this interpreter's.)
    env = dict(os.environ, STOKER_PYTHON=sys.executable)
    src = tmp_path / "pq"
    src.mkdir()
    _parquet_inputs(src)
    glob_ = str(src / "*.parquet")
    resumed_any = False
    for mode, opts in (("rows", ["--field", "x=a,b", "--shard-size", "16K"]),
                       ("groups", ["--group-by", "basin", "--order-by", "date", "--field",
                                   "x=a,b", "--shard-size", "64K"])):
        full = tmp_path / f"full-{mode}"
        subprocess.run([exe, "pack", "--from", "parquet", glob_, "-o", str(full), "-q", *opts],
                       check=True, env=env)
        want = _all_records(full)
        for after in (2, 9):
            ds = tmp_path / f"{mode}-{after}"
            p = subprocess.Popen([exe, "pack", "--from", "parquet", glob_, "-o", str(ds), "-q",
                                  *opts], env=env)
            kill_after_shards(p, ds, after)
            finished = (ds / "manifest.json").exists()
            kept = [] if finished else [
                line.split()[1] for line in (ds / ".packing").read_text().splitlines()
                if line.startswith("shard ")][:1]
            inode = {f: (ds / f).stat().st_ino for f in kept}
            r = subprocess.run([exe, "pack", "--from", "parquet", glob_, "-o", str(ds),
                                "--resume", *opts], capture_output=True, text=True, env=env)
            if finished:
                assert r.returncode != 0 and "exists" in r.stderr
                continue
            assert r.returncode == 0, r.stderr
            resumed_any = True
            # The first shard the killed pack made durable was kept, not
            # written again.
            assert {f: (ds / f).stat().st_ino for f in kept} == inode
            assert _all_records(ds) == want, (mode, after)
    assert resumed_any
    # Files changed since the interrupted pack: refused, not packed half old.
    ds = tmp_path / "changed"
    opts = ["--field", "x=a,b", "--shard-size", "16K"]
    p = subprocess.Popen([exe, "pack", "--from", "parquet", glob_, "-o", str(ds), "-q", *opts],
                         env=env)
    kill_after_shards(p, ds, 1)
    if not (ds / "manifest.json").exists():
        os.utime(src / "f000.parquet", ns=(1, 1))
        r = subprocess.run([exe, "pack", "--from", "parquet", glob_, "-o", str(ds), "--resume",
                            *opts], capture_output=True, text=True, env=env)
        assert r.returncode != 0 and "cannot resume" in r.stderr, r.stderr
        assert "f000.parquet changed (its modification time)" in r.stderr, r.stderr


def _rewrite_keeping_size_and_time(path, offset):
    """Flips a byte at `offset` (from the end where negative), the file's
    size and modification time put back, as a restore or a copy tool would
    leave it."""
    st = path.stat()
    b = bytearray(path.read_bytes())
    b[offset] ^= 0xFF
    path.write_bytes(bytes(b))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_resume_refuses_inputs_rewritten_with_their_size_and_time(tmp_path):
    """The inputs' digest holds each file's first and last 4 KiB: a file
    changed there since the interrupted pack is refused, though its size
    and time are as they were (npy through the C packer, parquet through
    the package)."""
    exe = str(stoker_exe())
    env = dict(os.environ, STOKER_PYTHON=sys.executable)
    src = tmp_path / "big.npy"
    np.save(src, np.random.default_rng(1).standard_normal((400_000, 16)).astype(np.float32))
    pq = tmp_path / "pq"
    pq.mkdir()
    _parquet_inputs(pq)
    cases = [(["--from", "npy", str(src), "--split-axis0", "--shard-size", "1M"], src, 200),
             (["--from", "parquet", str(pq / "*.parquet"), "--field", "x=a,b",
               "--shard-size", "16K"], pq / "f000.parquet", 64)]
    refused = 0
    for i, (args, victim, offset) in enumerate(cases):
        ds = tmp_path / f"ds{i}"
        p = subprocess.Popen([exe, "pack", *args, "-o", str(ds), "-q"], env=env)
        kill_after_shards(p, ds, 1)
        if (ds / "manifest.json").exists():
            continue   # finished before the kill: nothing to resume
        _rewrite_keeping_size_and_time(victim, offset)
        r = subprocess.run([exe, "pack", *args, "-o", str(ds), "--resume"], capture_output=True,
                           text=True, env=env)
        assert r.returncode != 0 and "cannot resume" in r.stderr, r.stderr
        assert f"{victim.name} changed (its first or last bytes" in r.stderr, r.stderr
        refused += 1
    assert refused
