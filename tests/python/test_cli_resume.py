"""`stoker pack --resume` after the packer was killed: the result equals an
uninterrupted pack of the same inputs."""
import signal
import subprocess
import time

import numpy as np

from conftest import stoker_exe


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
