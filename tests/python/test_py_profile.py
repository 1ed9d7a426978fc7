"""stoker.profile, the Loader's trace methods, and the traces they write."""
import time

import numpy as np
import pytest

import stoker
import tracecheck


@pytest.fixture
def big_ds(tmp_path):
    """240 records of 256 KiB: a batch of 30 is 7.5 MiB, so that one worker
    filling it takes far longer than a consumer that does nothing."""
    rng = np.random.default_rng(0)
    path = tmp_path / "big.stk"
    stoker.write(path, {"x": rng.standard_normal((240, 1024, 64)).astype(np.float32)})
    return path


def _sleep_step(seconds):
    def step(batch):
        time.sleep(seconds)
    return step


def test_profile_calls_a_slow_step_compute_bound(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=8, shuffle="random") as ld:
        r = stoker.profile(ld, step=_sleep_step(0.02), batches=15)
    assert r.verdict == "compute-bound"
    assert r.with_step["stall"] < 0.02
    assert "the model is the limit" in r.next
    assert r.step_seconds >= 0.02
    assert r.batches == 15
    text = str(r)
    for part in ("loader alone", "with the step", "verdict: compute-bound", "plan", "io",
                 "assemble", "verify", "idle", "of the limit"):
        assert part in text


def test_profile_calls_a_trivial_step_input_bound(big_ds):
    with stoker.Loader(big_ds, batch_size=30, shuffle="random", threads=1, prefetch=2) as ld:
        r = stoker.profile(ld, step=lambda b: None, batches=12)
    assert r.verdict == "input-bound"
    assert r.with_step["stall"] > 0.10
    assert r.next  # a sentence saying what to try
    # The bytes delivered are the batches' own: 30 x 256 KiB each.
    assert r.alone["bytes_per_s"] > 0 and r.alone["limit_bytes_per_s"] > 0
    assert r.alone["of_limit"] == pytest.approx(
        r.alone["bytes_per_s"] / r.alone["limit_bytes_per_s"])


def test_profile_without_a_step_reports_the_loader_alone(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=16, shuffle="block") as ld:
        r = stoker.profile(ld, batches=30)
    assert r.verdict == "loader alone" and r.with_step is None and r.step_seconds is None
    busy = [r.alone[k] for k in ("plan", "io", "assemble", "verify")]
    assert all(s >= 0 for s in busy) and sum(busy) > 0
    assert r.alone["idle"] == pytest.approx(max(0.0, 1 - sum(busy)))


def test_profile_leaves_the_loader_where_it_was(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=8, shuffle="random", seed=3) as ld:
        for _ in range(4):
            ld.next()
        state = ld.state_dict()
        stoker.profile(ld, step=lambda b: None, batches=50)  # wraps past the epoch's end
        after = ld.next()["id"].copy()
    with stoker.Loader(path, batch_size=8, shuffle="random", seed=3) as ref:
        ref.load_state_dict(state)
        assert np.array_equal(after, ref.next()["id"])


def test_profile_checks_its_arguments(ids_ds):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=8) as ld:
        with pytest.raises(ValueError, match="batches"):
            stoker.profile(ld, batches=0)
        with pytest.raises(TypeError, match="callable"):
            stoker.profile(ld, step=3)


def test_profile_writes_a_trace(ids_ds, tmp_path):
    path, _ = ids_ds
    out = tmp_path / "run.json"
    with stoker.Loader(path, batch_size=8, shuffle="random", threads=2) as ld:
        r = stoker.profile(ld, step=_sleep_step(0.001), batches=20, trace=out)
    assert r.trace == str(out) and "ui.perfetto.dev" in str(r)
    threads, doc = tracecheck.load(out)
    assert doc["otherData"]["dropped_spans"] == 0
    consumer = threads.pop("stoker consumer")
    threads.pop("stoker reader", None)   # block order's group reader, when it reads
    assert threads and all(t.startswith("stoker worker ") for t in threads)
    tracecheck.check_nesting(consumer)
    steps = [e for e in consumer if e[0] == "step"]
    assert len(steps) == 20
    assert sum(e[0] == "next" for e in consumer) >= 2 * 20
    names = set()
    for evs in threads.values():
        tracecheck.check_nesting(evs)
        names.update(e[0] for e in evs)
    assert {"batch", "plan", "read", "verify"} <= names
    assert "step" not in names and "next" not in names


def test_trace_methods(ids_ds, tmp_path):
    path, _ = ids_ds
    with stoker.Loader(path, batch_size=8, shuffle="block", block_group=2) as ld:
        with pytest.raises(ValueError, match="start tracing"):
            ld.trace_write(tmp_path / "none.json")
        ld.trace_start()
        ld.set_epoch(1)
        t0 = time.monotonic_ns()
        n = sum(1 for _ in ld)
        ld.trace_span("epoch", t0, time.monotonic_ns())
        with pytest.raises(ValueError):
            ld.trace_span("backwards", 10, 5)
        ld.trace_stop()
        ld.trace_write(tmp_path / "t.json")
    threads, _ = tracecheck.load(tmp_path / "t.json")
    consumer = threads.pop("stoker consumer")
    tracecheck.check_nesting(consumer)
    epoch = [e for e in consumer if e[0] == "epoch"]
    assert len(epoch) == 1
    # The caller's span holds every next() of the epoch.
    nexts = [e for e in consumer if e[0] == "next" and e[1] >= epoch[0][1]]
    assert len(nexts) == n + 1 and all(e[2] <= epoch[0][2] for e in nexts)
    batches = sorted(e[3]["batch"] for evs in threads.values() for e in evs if e[0] == "batch")
    assert set(range(n)) <= set(batches)


def test_trace_opens_in_perfettos_trace_processor(ids_ds, tmp_path):
    """The trace loads in Perfetto's own trace processor, with each stage on
    a worker thread, nested under its batch."""
    tp_mod = pytest.importorskip("perfetto.trace_processor")
    shell = tracecheck.trace_processor_shell()
    if shell is None:
        pytest.skip("no trace_processor_shell: the perfetto package downloads it from Google's "
                    "storage on first use, and this machine cannot reach it; set "
                    "STOKER_TRACE_PROCESSOR to a copy to run this test")
    path, _ = ids_ds
    out = tmp_path / "tp.json"
    with stoker.Loader(path, batch_size=8, shuffle="random", threads=2) as ld:
        stoker.profile(ld, step=_sleep_step(0.001), batches=20, trace=out)
    tp = tp_mod.TraceProcessor(trace=str(out),
                               config=tp_mod.TraceProcessorConfig(bin_path=shell))
    try:
        rows = list(tp.query(
            "select s.name as name, s.depth as depth, t.name as thread, "
            "(select p.name from slice p where p.id = s.parent_id) as parent "
            "from slice s join thread_track tt on s.track_id = tt.id "
            "join thread t using (utid)"))
    finally:
        tp.close()
    by_name = {}
    for r in rows:
        by_name.setdefault(r.name, []).append(r)
    for stage in ("batch", "plan", "read", "verify"):
        assert stage in by_name, stage
        assert all(r.thread.startswith("stoker worker") or
                   (r.thread == "stoker reader" and stage in ("read", "verify"))
                   for r in by_name[stage])
    assert all(r.depth == 0 for r in by_name["batch"])
    assert all(r.depth >= 1 and r.parent == "batch" for r in by_name["plan"])
    assert all(r.thread == "stoker consumer" for r in by_name["next"] + by_name["step"])
