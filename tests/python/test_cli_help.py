"""--help for every command, and `stoker version`."""

import re

import pytest

COMMANDS = ["pack", "merge", "index", "inspect", "verify", "cat"]


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("cmd", COMMANDS)
def test_command_help(stoker, cmd, flag):
    r = stoker(cmd, flag)
    assert r.returncode == 0
    assert r.stdout.startswith(f"Usage: stoker {cmd}")
    assert "Example" in r.stdout
    # The example lines use the command itself.
    examples = r.stdout[r.stdout.index("Example"):]
    assert f"stoker {cmd} " in examples
    assert r.stderr == ""


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_wins_over_other_arguments(stoker, tmp_path, cmd):
    # --help anywhere prints help and does nothing else.
    r = stoker(cmd, tmp_path / "ds", "--help", cwd=tmp_path)
    assert r.returncode == 0
    assert "Example" in r.stdout
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["help"]])
def test_main_help(stoker, args):
    r = stoker(*args)
    assert r.returncode == 0
    assert r.stdout.startswith("Usage: stoker COMMAND")
    assert "Example" in r.stdout
    for cmd in COMMANDS + ["version"]:
        assert re.search(rf"^  {cmd}\s", r.stdout, re.M), cmd


def test_every_listed_command_has_help(stoker):
    # Commands added later are covered too: take them from the main help.
    text = stoker.ok("--help").stdout
    listed = text[text.index("Commands:"):text.index("\n\n", text.index("Commands:"))]
    cmds = re.findall(r"^  (\w+)\s", listed, re.M)
    assert set(COMMANDS) <= set(cmds)
    for cmd in cmds:
        if cmd == "version":
            continue
        r = stoker(cmd, "--help")
        assert r.returncode == 0, cmd
        assert r.stdout.startswith(f"Usage: stoker {cmd}"), cmd
        assert "Example" in r.stdout, cmd


@pytest.mark.parametrize("arg", ["version", "--version"])
def test_version(stoker, arg):
    r = stoker(arg)
    assert r.returncode == 0
    assert re.fullmatch(r"stoker \d+\.\d+\.\d+ \(format version \d+\)\n", r.stdout), r.stdout


def test_doctor_gives_a_verdict(stoker, tmp_path):
    """`stoker doctor` with a long simulated step calls the run compute-bound;
    without a step it reports the loader's own rate."""
    import numpy as np
    arr = np.arange(4000 * 8, dtype=np.float32).reshape(4000, 8)
    np.save(tmp_path / "a.npy", arr)
    r = stoker("pack", "--from", "npy", str(tmp_path / "a.npy"), "--split-axis0", "-o",
               str(tmp_path / "d"), "-q")
    assert r.returncode == 0, r.stderr
    r = stoker("doctor", str(tmp_path / "d"), "--batch", "64", "--step-ms", "50",
               "--max-batches", "20")
    assert r.returncode == 0, r.stderr
    assert "verdict: compute-bound" in r.stdout
    for stage in ("plan", "io", "verify", "idle", "consumer stall"):
        assert stage in r.stdout
    r = stoker("doctor", str(tmp_path / "d"), "--batch", "64")
    assert r.returncode == 0 and "verdict: loader alone" in r.stdout
    assert "of the dataset's bytes are in the page cache" in r.stdout
    assert "limit (memcpy" in r.stdout or "limit (device" in r.stdout


def test_doctor_writes_a_trace_and_calls_a_fast_step_input_bound(stoker, tmp_path):
    """With a step far shorter than a batch's reading (one worker, two
    buffers, 2 MiB batches), the run is input-bound; --trace writes a Chrome
    trace with the workers' stages nested in batches and the steps on the
    consumer's thread."""
    import numpy as np
    import tracecheck
    arr = np.ones((2048, 16384), dtype=np.float32)
    np.save(tmp_path / "a.npy", arr)
    r = stoker("pack", "--from", "npy", str(tmp_path / "a.npy"), "--split-axis0", "-o",
               str(tmp_path / "d"), "-q")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "t.json"
    r = stoker("doctor", str(tmp_path / "d"), "--batch", "32", "--threads", "1", "--prefetch",
               "2", "--shuffle", "random", "--step-ms", "0.01", "--max-batches", "40",
               "--trace", str(out))
    assert r.returncode == 0, r.stderr
    assert "verdict: input-bound" in r.stdout
    assert "next: " in r.stdout
    threads, _ = tracecheck.load(out)
    consumer = threads.pop("stoker consumer")
    tracecheck.check_nesting(consumer)
    assert sum(e[0] == "step" for e in consumer) == 39   # the first batch is start-up
    assert list(threads) == ["stoker worker 0"]
    evs = threads["stoker worker 0"]
    tracecheck.check_nesting(evs)
    assert {"batch", "plan", "read", "verify"} <= {e[0] for e in evs}
    r = stoker("read", str(tmp_path / "d"), "--trace", str(tmp_path / "no" / "t.json"))
    assert r.returncode != 0 and "cannot write the trace" in r.stderr


def _o_direct_works(path):
    import os
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False


def test_doctor_explains_memory_and_read_advises_block_order(stoker, tmp_path):
    """doctor splits the RSS into mapped dataset pages and the process's own;
    over a cold dataset read at random without a warm-up, read and doctor
    say how much faster block order would read it, with the two rates."""
    import glob
    import os
    import re
    import numpy as np
    import stoker as stk
    ds = tmp_path / "d"
    stk.write(ds, {"x": np.zeros((60000, 64), dtype=np.float32)}, sync=False)
    r = stoker("doctor", str(ds), "--batch", "256", "--max-batches", "20")
    assert r.returncode == 0, r.stderr
    m = re.search(r"memory: the process's RSS is ([\d.]+) GB, of which ([\d.]+) GB are pages of "
                  r"the dataset's files", r.stdout)
    assert m and float(m.group(2)) <= float(m.group(1)), r.stdout
    shards = glob.glob(str(ds / "*.stk"))
    if not _o_direct_works(shards[0]):
        pytest.skip("this file system takes no O_DIRECT reads, which the advice measures with")
    for f in shards:
        fd = os.open(f, os.O_RDONLY)
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    r = stoker("read", str(ds), "--batch", "256", "--shuffle", "random", "--warm-up", "off",
               "--max-batches", "4")
    assert r.returncode == 0, r.stderr
    m = re.search(r"hint: block order would read this dataset about (\d+)x faster: the device "
                  r"gives ([\d.]+) GB/s in large sequential reads but ([\d.]+) GB/s in random "
                  r"reads of 256 bytes", r.stdout)
    assert m, r.stdout
    assert int(m.group(1)) >= 2
    # Sequential order, or a warm-up, gets no such advice.
    r = stoker("read", str(ds), "--batch", "256", "--shuffle", "sequential", "--max-batches", "4")
    assert r.returncode == 0 and "hint:" not in r.stdout
