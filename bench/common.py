"""Shared helpers for stoker's benchmarks: timing, medians, the machine's
description, and writing a section of docs/BENCHMARKS.md in place."""
import os
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / os.environ.get("STOKER_BUILD", "build")
STOKER = BUILD / "stoker"
GEN = BUILD / "stoker-gen"
OUT = ROOT / "bench" / "out"
DOC = ROOT / "docs" / "BENCHMARKS.md"


def run(cmd, **kw):
    """Runs a command (list or shell string), failing loudly."""
    shell = isinstance(cmd, str)
    return subprocess.run(cmd, shell=shell, check=True, **kw)


def timed(cmd, setup=None):
    """Seconds taken by one run of cmd; setup runs first, untimed."""
    if setup:
        setup()
    t = time.perf_counter()
    run(cmd, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def median(xs):
    return statistics.median(xs)


def machine():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, Linux "
            f"{platform.release()}, Python {platform.python_version()}")


def drop_cache(paths):
    """Evicts files from the page cache (posix_fadvise DONTNEED)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        except OSError:
            pass
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def write_section(name, text):
    """Replaces the section between the markers for `name` in BENCHMARKS.md
    (appending it if absent), leaving the other sections as they are."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    block = f"{begin}\n{text.rstrip()}\n{end}"
    pat = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    doc = pat.sub(lambda m: block, doc) if pat.search(doc) else doc.rstrip() + "\n\n" + block + "\n"
    DOC.write_text(doc)


def tree_cpu():
    """CPU seconds (user and system) used so far by this process and its live
    descendants (DataLoader workers included), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total, pending, seen = 0.0, [os.getpid()], set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            total += (int(st[11]) + int(st[12])) / tick  # utime, stime
            for t in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{t}/children") as f:
                    pending += [int(x) for x in f.read().split()]
        except (OSError, ValueError, IndexError):
            pass
    return total


def child_result(cmd, timeout=900):
    """Runs a benchmark's child process, which prints its result as its last
    line of JSON: that dict, or {"error": why} when it printed none."""
    import json
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no epoch within {timeout} s"}
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    if not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {r.returncode}: {tail[:300]}"}
    return json.loads(lines[-1])
