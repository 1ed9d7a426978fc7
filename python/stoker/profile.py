"""stoker.profile: where a loader's time goes, and whether training waits for it.

    report = stoker.profile(loader, step=lambda batch: train_step(batch["x"], batch["y"]),
                            batches=200, trace="run.json")
    print(report)            # per-stage shares, stall, bytes/s against the limit, verdict
    report.verdict           # "input-bound", "balanced", "compute-bound" or "loader alone"
    report.to_html("report.html")   # the same as a page, with charts over time

The loader is run alone, then (when a step is given) with the step called on
every batch; the first batch of each run is left out as start-up.  The
loader's position is saved before and restored after, so profiling does not
move the training run along.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, Optional

from ._errors import InvalidArgument
from ._types import Batch, PathLike

_ITEMSIZE = {"u8": 1, "i8": 1, "u16": 2, "i16": 2, "f16": 2, "bf16": 2, "u32": 4, "i32": 4,
             "f32": 4, "u64": 8, "i64": 8, "f64": 8}


def _nbytes(v):
    n = getattr(v, "nbytes", None)
    if isinstance(n, int):
        return n
    if hasattr(v, "numel") and hasattr(v, "element_size"):      # torch
        return int(v.numel()) * int(v.element_size())
    count = 1
    for d in v.shape:                                           # stoker's own Array
        count *= int(d)
    return count * _ITEMSIZE.get(str(v.dtype), 1)


def _batch_bytes(batch):
    return sum(_nbytes(v) for k, v in batch.items() if not k.endswith("_offsets"))


class Report:
    """The result of stoker.profile; str() gives the report a person reads.

    Attributes:
        alone: The diagnosis of the loader run alone, a dict from the C
            diagnosis (stk_diagnose): seconds, batches_per_s, samples_per_s,
            bytes_per_s, the stage shares plan / io / assemble / verify /
            idle, stall, limit_bytes_per_s, of_limit, verdict, next, threads,
            backend.
        with_step: The same for the run with the step, or None without one.
        step_seconds: The step's mean time (None without a step).
        limit_name: What the limit is (memcpy, or the device's reads).
        resident: The share of the data in the page cache (-1: unknown).
        batches: The batches the last run took.
        verdict: "input-bound", "balanced", "compute-bound" or "loader
            alone": of the run with the step, else of the loader alone.
        next: The next thing to try, for that run.
        stall: The share of the time the consumer waited for data, for
            that run.
        trace: The Chrome trace written, or None.
        series: Each run's counters over time, {"alone": [...], "with_step":
            [...] or None}: points (t_ns, batches, samples, bytes, wait_ns,
            calls, ready_sum), each counted from the run's start
            (stk_loader_series); to_html draws them.
        title: What was profiled (the loader's path), or None.
    """

    def __init__(self, alone, with_step, step_seconds, limit_name, resident, batches, trace,
                 series=None, title=None):
        self.alone = alone
        self.with_step = with_step
        self.step_seconds = step_seconds
        self.limit_name = limit_name
        self.resident = resident
        self.batches = batches
        self.trace = trace
        self.series = series or {"alone": [], "with_step": None}
        self.title = title
        last = with_step or alone
        self.verdict = last["verdict"]
        self.next = last["next"]
        self.stall = last["stall"]

    def as_dict(self) -> Dict[str, Any]:
        """The report as a dict (for JSON)."""
        return {"alone": self.alone, "with_step": self.with_step,
                "step_seconds": self.step_seconds, "limit_name": self.limit_name,
                "resident": self.resident, "batches": self.batches, "verdict": self.verdict,
                "next": self.next, "trace": self.trace, "series": self.series}

    def to_html(self, path: PathLike) -> None:
        """Writes the report as one self-contained HTML page at ``path``.

        The page needs nothing from the network to be viewed (inline CSS
        and SVG, no script): the verdict and the next thing to try, the
        throughput over each run against the measured limit, each stage's
        time per batch, the ring's fill over time and, with a step, how
        long the step waited over the run. ``stoker doctor --html`` writes
        the same page (libstoker draws both).

        Raises:
            StokerError: the file cannot be written (the message names it).
        """
        import os
        from . import _stoker
        runs = [{"name": "loader alone", "diagnosis": self.alone,
                 "threads": self.alone["threads"],
                 "ring_slots": self.alone.get("ring_slots", 0), "step_seconds": 0.0,
                 "series": self.series.get("alone") or []}]
        if self.with_step is not None:
            w = self.with_step
            runs.append({"name": "with the step", "diagnosis": w, "threads": w["threads"],
                         "ring_slots": w.get("ring_slots", 0),
                         "step_seconds": float(self.step_seconds or 0.0),
                         "series": self.series.get("with_step") or []})
        _stoker.report_html(os.fspath(path), {
            "title": self.title, "backend": self.alone["backend"],
            "limit_name": self.limit_name, "resident": float(self.resident), "hint": None,
            "runs": runs})

    def __str__(self) -> str:
        a = self.alone
        lines = [f"stoker profile: {self.batches} batches, {a['backend']} backend, "
                 f"{a['threads']} worker threads"]
        if self.resident >= 0:
            lines.append(f"data in the page cache: {100 * self.resident:.0f}%")
        lines.append(f"loader alone: {a['samples_per_s']:,.0f} samples/s, "
                     f"{a['bytes_per_s'] / 1e9:.2f} GB/s = {a['of_limit']:.2f} of the limit "
                     f"({self.limit_name}: {a['limit_bytes_per_s'] / 1e9:.2f} GB/s)")
        lines.append(_shares(a))
        w = self.with_step
        if w is not None:
            lines.append(f"with the step ({1e3 * self.step_seconds:.2f} ms each): "
                         f"{w['samples_per_s']:,.0f} samples/s, the consumer waited "
                         f"{100 * w['stall']:.1f}% of the time for data")
            lines.append(_shares(w))
        lines.append(f"verdict: {self.verdict}")
        lines.append(f"next: {self.next}")
        if self.trace:
            lines.append(f"trace: {self.trace} (open in ui.perfetto.dev)")
        return "\n".join(lines)

    __repr__ = __str__


def _shares(d):
    return "  workers' time: " + "  ".join(
        f"{k} {100 * d[k]:.1f}%" for k in ("plan", "io", "assemble", "verify", "idle"))


def _run(loader, batches, step, spans):
    """Takes up to `batches` batches after a first one (start-up); returns
    (bytes delivered, seconds, seconds spent in step)."""
    c = loader._c
    got = 0
    nbytes = 0
    step_s = 0.0
    t0 = None
    fresh = False   # an epoch was just started here and gave nothing yet
    while got < batches:
        batch = loader.next()
        if batch is None:
            if fresh:
                break   # an epoch without a batch for this rank
            loader.set_epoch(loader.epoch + 1)
            fresh = True
            continue
        fresh = False
        if t0 is None:
            # Start-up (opening, the first reads) is not the steady state.
            batch = None
            c.stats_reset()
            t0 = time.perf_counter()
            continue
        nbytes += _batch_bytes(batch)
        got += 1
        if step is not None:
            s0 = time.monotonic_ns()
            step(batch)
            s1 = time.monotonic_ns()
            step_s += (s1 - s0) / 1e9
            if spans:
                c.trace_span("step", s0, s1)
        batch = None
    seconds = time.perf_counter() - t0 if t0 is not None else 0.0
    return nbytes, seconds, step_s, got


def profile(loader: Any, step: Optional[Callable[[Batch], Any]] = None, *,
            batches: int = 200, trace: Optional[PathLike] = None,
            max_spans: int = 0) -> Report:
    """Where a loader's time goes, and whether training waits for it.

    Runs ``loader`` alone for ``batches`` batches and, when ``step`` is
    given, again with ``step(batch)`` after each batch; reports time per
    stage, the consumer's stall, bytes/s against the measured limit and a
    verdict with the next thing to try. The loader's resume state is saved
    before and restored after, so profiling does not move a training run
    along.

    Args:
        loader: A stoker.Loader.
        step: A callable taking one argument, the batch as the loader
            yields it (a dict of arrays or tensors): your training step, or a
            lambda that unpacks the batch for it (for a GPU step,
            synchronise at its end, or the stall is that of the CPU side).
        batches: Batches per run, after one left out as start-up.
        trace: A path: write a Chrome trace of both runs (ui.perfetto.dev),
            with each worker's stages and the consumer's waits and steps.
        max_spans: Spans kept per thread in the trace (0: 65536).

    Returns:
        The Report.

    Raises:
        InvalidArgument: ``batches`` below 1.
        TypeError: ``step`` is not callable.
    """
    if batches < 1:
        raise InvalidArgument(f"batches must be at least 1, not {batches}")
    if step is not None and not callable(step):
        raise TypeError("step must be callable (it is called with each batch)")
    c = loader._c
    state = loader.state_dict()
    limit, limit_name, resident = c.measure_limit()
    if trace is not None:
        c.trace_start(max_spans)
    # The counters over each run, for to_html: the series begins again at
    # each run's stats reset (after its start-up batch).
    c.series_start()
    series: Dict[str, Any] = {"alone": [], "with_step": None}
    try:
        nbytes, seconds, _, got = _run(loader, batches, None, False)
        series["alone"] = c.series()
        alone = c.diagnose(nbytes, seconds, limit, False)
        with_step = None
        step_s = None
        if step is not None:
            nbytes, seconds, step_total, got2 = _run(loader, batches, step, trace is not None)
            series["with_step"] = c.series()
            with_step = c.diagnose(nbytes, seconds, limit, True)
            step_s = step_total / got2 if got2 else 0.0
        if trace is not None:
            import os
            c.trace_write(os.fspath(trace))
    finally:
        if trace is not None:
            c.trace_stop()
        c.series_stop()  # (the loader goes on untimed)
        loader.load_state_dict(state)
    path = getattr(loader, "_path", None)
    return Report(alone, with_step, step_s, limit_name, resident, got,
                  None if trace is None else str(trace), series,
                  path if isinstance(path, str) else None)
