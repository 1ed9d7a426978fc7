"""Reading stoker's Chrome traces back, for the tests: the events per thread
and the structural rules a viewer relies on (complete events, thread names,
spans properly nested, stages inside the spans they belong to)."""
import json
import os
import shutil
from pathlib import Path

STAGES = ("plan", "verify", "read", "assemble")


def load(path):
    """Returns {thread name: [(name, ts_ns, end_ns, args), ...]} in file order."""
    with open(path) as f:
        doc = json.load(f)
    names = {}
    events = {}
    for e in doc["traceEvents"]:
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            if e["name"] == "thread_name":
                names[e["tid"]] = e["args"]["name"]
            continue
        assert e["ph"] == "X", e
        ts = round(e["ts"] * 1000)
        end = ts + round(e["dur"] * 1000)
        assert end >= ts >= 0
        events.setdefault(e["tid"], []).append((e["name"], ts, end, e.get("args", {})))
    assert set(events) <= set(names), "every thread with spans is named"
    assert doc["otherData"]["dropped_spans"] >= 0
    return {names[t]: evs for t, evs in events.items()}, doc


def check_nesting(evs):
    """Starts never go back, every span lies inside the innermost one open at
    its start, and each stage sits inside a batch (reads and checks may also
    sit in a group load); batches are outermost. Returns each span's parent
    name (None at top)."""
    stack = []
    last = -1
    parents = []
    for name, ts, end, _ in evs:
        assert ts >= last
        last = ts
        while stack and stack[-1][2] < ts or (stack and stack[-1][2] == ts and stack[-1][2] > stack[-1][1]):
            stack.pop()
        if stack:
            assert end <= stack[-1][2], f"{name} [{ts}, {end}] crosses the end of {stack[-1]}"
        parent = stack[-1][0] if stack else None
        if name in ("plan", "assemble"):
            assert parent == "batch", (name, parent)
        elif name in ("read", "verify"):
            assert parent in ("batch", "group load"), (name, parent)
        elif name == "batch":
            assert parent is None, (name, parent)
        elif name in ("next", "step"):
            # On the consumer's thread, inside nothing of stoker's own (a
            # caller's span may hold them).
            assert parent not in ("batch", "next", "step") + STAGES, (name, parent)
        parents.append(parent)
        stack.append((name, ts, end))
    return parents


def trace_processor_shell():
    """Perfetto's trace_processor_shell, which the `perfetto` package runs
    to load a trace: $STOKER_TRACE_PROCESSOR, one on PATH, or the copy the
    package keeps after downloading it once. None if there is none (the
    package downloads it from Google's storage, which a machine without
    that access cannot reach)."""
    p = os.environ.get("STOKER_TRACE_PROCESSOR")
    if p and os.path.isfile(p):
        return p
    p = shutil.which("trace_processor_shell")
    if p:
        return p
    cached = Path.home() / ".local/share/perfetto/prebuilts/trace_processor_shell"
    return str(cached) if cached.is_file() else None
