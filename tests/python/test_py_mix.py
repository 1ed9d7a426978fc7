"""Mixtures (stoker.Loader([...]) / stoker.Mixture): several sources read as
one stream at their weights.

- Over any run of rounds, each source's count is within the promised bound
  (less than ceil(log2 sources) of its share); over an epoch, exact counts
  where counts were asked.
- Exactly once per source epoch, across mixture epochs (stop: sources go
  on where they were), with cycle and all.
- Equal batch counts over 1-4 ranks, and the ranks together read what one
  uninterrupted run of that world size reads.
- Resume mid-epoch equals an uninterrupted run, also from 4 ranks to 2.
- Homogeneous batches (one source each, fields that differ), ragged fields
  and windows mixed, names mapped, bad input refused by name.
"""
import collections
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import stoker
from test_py_remote import aws, served  # noqa: F401  (fixtures)

SIZES = (1200, 400, 90)
WEIGHTS = (1.0, 1.0, 0.5)


@pytest.fixture(scope="module")
def srcs(tmp_path_factory):
    """Three datasets whose x encodes (sample, source): x = 10 * id + source,
    and a ragged field r of id % 5 + 1 rows, each row = x."""
    d = tmp_path_factory.mktemp("mix")
    paths = []
    for i, n in enumerate(SIZES):
        recs = [{"x": np.array([10 * k + i], np.int64),
                 "r": np.full((k % 5 + 1, 2), 10 * k + i, np.int32)} for k in range(n)]
        p = d / f"s{i}"
        stoker.write(p, recs)
        paths.append(str(p))
    return paths


def sources(paths, **kw):
    return [stoker.Source(p, w, **kw) for p, w in zip(paths, WEIGHTS)]


def decode(b):
    x = np.asarray(b["x"])[:, 0]
    s = np.asarray(b["source"])
    assert (x % 10 == s).all()  # every sample came with its source's index
    return list(zip(s.tolist(), (x // 10).tolist()))


def run_epoch(mx):
    out = []
    for b in mx:
        out += decode(b)
    return out


def test_window_bound_and_exact_epoch(srcs):
    with stoker.Loader(sources(srcs), 16, shuffle="random", seed=3) as mx:
        seq = [s for s, _ in run_epoch(mx)]
        counts = mx.epoch_counts()
    # STOP: the third source (90 samples at weight 0.5) runs out first:
    # t = 180, so 180, 180 and 90.
    assert counts["source_samples"] == [180, 180, 90]
    c = collections.Counter(seq)
    assert [c[0], c[1], c[2]] == [180, 180, 90]
    bound = math.ceil(math.log2(3))
    total = len(seq)
    share = [180 / total, 180 / total, 90 / total]
    worst = 0.0
    for n in range(1, 120):
        run = np.zeros(3)
        for q in range(n):
            run[seq[q]] += 1
        for st in range(total - n + 1):
            worst = max(worst, float(np.max(np.abs(run - n * np.array(share)))))
            if st + n < total:
                run[seq[st]] -= 1
                run[seq[st + n]] += 1
    assert worst < bound, worst
    # Batches of 16 mix the sources: no batch is all of one.
    assert len(set(seq[:16])) == 3


def test_counts_are_exact(srcs):
    spec = [stoker.Source(srcs[0], count=37), stoker.Source(srcs[1], count=500),
            stoker.Source(srcs[2], count=5)]
    with stoker.Loader(spec, 10, shuffle="block") as mx:
        for epoch in range(2):
            c = collections.Counter(s for s, _ in run_epoch(mx))
            assert [c[0], c[1], c[2]] == [37, 500, 5]
            assert mx.epoch == epoch


def check_source_epochs(seq, units):
    """Each source's samples, taken in order, are its epochs one after the
    other: every run of `units[i]` of them is a permutation (all distinct),
    drawn from its samples."""
    per = collections.defaultdict(list)
    for s, k in seq:
        per[s].append(k)
    for s, ks in per.items():
        u = units[s]
        for a in range(0, len(ks), u):
            chunk = ks[a:a + u]
            assert len(set(chunk)) == len(chunk), (s, a)
            assert all(0 <= k < SIZES[s] for k in chunk)
    return per


def test_stop_goes_on_where_each_source_was(srcs):
    with stoker.Loader(sources(srcs), 32, shuffle="random", seed=1) as mx:
        seq = []
        for _ in range(7):
            seq += run_epoch(mx)
    per = check_source_epochs(seq, SIZES)
    # 7 epochs of 180 samples of source 0 (1200 a source epoch): the first
    # 1200 are all of its samples, once each.
    assert sorted(per[0][:1200]) == list(range(1200))
    assert sorted(per[2][:90]) == list(range(90))


def test_cycle_and_all(srcs):
    with stoker.Loader(sources(srcs), 32, exhaust="cycle", shuffle="block") as mx:
        seq = run_epoch(mx)
    c = collections.Counter(s for s, _ in seq)
    assert [c[0], c[1], c[2]] == [1200, 1200, 600]
    per = check_source_epochs(seq, SIZES)
    assert sorted(per[0]) == list(range(1200))
    with stoker.Loader(sources(srcs), 32, exhaust="all", shuffle="random") as mx:
        for _ in range(2):
            seq = run_epoch(mx)
            per = collections.defaultdict(list)
            for s, k in seq:
                per[s].append(k)
            for s, n in enumerate(SIZES):
                assert sorted(per[s]) == list(range(n))


def rank_runs(paths, W, batch, epoch=0, state=None, stop_after=None, **kw):
    """Each rank's list of batches (as decoded samples) and, with
    stop_after, the state after that many batches of every rank."""
    out, st = [], None
    lens = []
    for r in range(W):
        with stoker.Loader(sources(paths), batch, rank=r, world_size=W, **kw) as mx:
            if state is not None:
                mx.load_state_dict(state)
            lens.append(len(mx))
            bs = []
            for b in mx:
                bs.append(decode(b))
                if stop_after is not None and len(bs) == stop_after:
                    if r == 0:
                        st = mx.state_dict()
                    break
            out.append(bs)
    return out, lens, st


def by_position(runs, W, start=0):
    """The samples by global position: rank r's j-th is position
    start + j * W + r."""
    pos = {}
    for r, bs in enumerate(runs):
        flat = [x for b in bs for x in b]
        for j, x in enumerate(flat):
            pos[start + j * W + r] = x
    return pos


@pytest.mark.parametrize("W", [1, 2, 3, 4])
def test_ranks_equal_and_exactly_once(srcs, W):
    runs, lens, _ = rank_runs(srcs, W, 8, shuffle="block", seed=5)
    counts = [len(bs) for bs in runs]
    assert len(set(counts)) == 1 and counts[0] == lens[0]
    pos = by_position(runs, W)
    assert sorted(pos) == list(range(len(pos)))  # a prefix of positions, no hole
    check_source_epochs([pos[p] for p in sorted(pos)], SIZES)


@pytest.mark.parametrize("homogeneous", [False, True])
def test_resume_4_to_2_equals_uninterrupted(srcs, homogeneous):
    kw = dict(shuffle="random", seed=9, streams=4, homogeneous=homogeneous)
    full, _, _ = rank_runs(srcs, 4, 4, **kw)
    want = by_position(full, 4)
    part, _, st = rank_runs(srcs, 4, 4, stop_after=5, **kw)
    assert st["position"] == 5 * 4 * 4 and st["streams"] == 4
    # Two ranks go on from there for one batch (of 3 samples when batches
    # mix: a state counts samples, so the batch size may change, and the
    # next state then falls inside a round), then one rank to the end.
    b2 = 4 if homogeneous else 3
    mid, lens, st2 = rank_runs(srcs, 2, b2, state=st, stop_after=1, **kw)
    assert lens[0] == lens[1]
    assert st2["position"] == st["position"] + 2 * b2
    rest, _, _ = rank_runs(srcs, 1, 4 if homogeneous else 5, state=st2, **kw)
    got = by_position(part, 4)
    got.update(by_position(mid, 2, st["position"]))
    got.update(by_position(rest, 1, st2["position"]))
    assert got == want


def test_resume_one_rank_mid_epoch_and_across_epochs(srcs):
    kw = dict(shuffle="block", seed=2)
    with stoker.Loader(sources(srcs), 7, **kw) as mx:
        want = run_epoch(mx) + run_epoch(mx)
    with stoker.Loader(sources(srcs), 7, **kw) as mx:
        got = []
        for i, b in enumerate(mx):
            got += decode(b)
            if i == 10:
                st = mx.state_dict()
                break
    # A new mixture (another batch size: a mixed mixture's state counts
    # samples) resumes there and runs on into the next epoch.
    with stoker.Loader(sources(srcs), 5, **kw) as mx:
        mx.load_state_dict(st)
        got += run_epoch(mx)
        assert mx.epoch == 0
        got += run_epoch(mx)
    assert got == want


def test_homogeneous_batches_and_fields_that_differ(srcs, tmp_path):
    other = tmp_path / "other"
    stoker.write(other, {"z": np.arange(640, dtype=np.float64)})
    spec = [stoker.Source(srcs[0], 2.0, fields=["x"]), stoker.Source(other, 1.0)]
    with stoker.Loader(spec, 16, homogeneous=True, shuffle="random") as mx:
        n = collections.Counter()
        for b in mx:
            s = np.asarray(b["source"])
            assert (s == s[0]).all()
            assert set(b) == ({"x", "source"} if s[0] == 0 else {"z", "source"})
            n[int(s[0])] += len(s)
        # Rounds of one batch: 75 of source 0's, and at half its weight
        # floor(75 / 2) = 37 of the other's (whose 40 would last longer).
        assert n == {0: 75 * 16, 1: 37 * 16}
    # Mixed batches of those sources are refused, naming both.
    with pytest.raises(stoker.InvalidArgument, match="give different fields"):
        with stoker.Loader(spec, 16) as mx:
            for _ in mx:
                pass
    # A field of another source named as the source key is refused, not
    # overwritten (source 0's own fields are checked at open).
    named = tmp_path / "named"
    stoker.write(named, {"source": np.arange(640, dtype=np.int64)})
    spec = [stoker.Source(srcs[0], 2.0, fields=["x"]), stoker.Source(named, 1.0)]
    with pytest.raises(stoker.InvalidArgument, match="source 1 has a field named 'source'"):
        with stoker.Loader(spec, 16, homogeneous=True, shuffle="random") as mx:
            for _ in mx:
                pass
    with stoker.Loader(spec, 16, homogeneous=True, shuffle="random", source_field="src") as mx:
        assert sum(1 for b in mx if "source" in b) == 37


def test_ragged_and_names(srcs, tmp_path):
    alt = tmp_path / "alt"
    recs = [{"xx": np.array([10 * k + 1], np.int64), "rr": np.full((k % 3 + 1, 2), 10 * k + 1, np.int32)}
            for k in range(300)]
    stoker.write(alt, recs)
    spec = [stoker.Source(srcs[0]), stoker.Source(alt, names={"xx": "x", "rr": "r"})]
    with stoker.Loader(spec, 9, shuffle="random") as mx:
        for b in mx:
            x = np.asarray(b["x"])[:, 0]
            offs = np.asarray(b["r_offsets"])
            r = np.asarray(b["r"])
            assert len(offs) == len(x) + 1 and offs[-1] == len(r)
            for j, v in enumerate(x):
                rows = r[offs[j]:offs[j + 1]]
                k, s = divmod(int(v), 10)
                assert len(rows) == (k % 5 + 1 if s == 0 else k % 3 + 1)
                assert (rows == v).all()


def test_windows_mixed(tmp_path):
    paths = []
    for i, n in enumerate((40, 25)):
        recs = [{"t": (np.arange(30, dtype=np.float32) + 1000 * k) * 10 + i} for k in range(n)]
        stoker.write(tmp_path / f"w{i}", recs)
        paths.append(tmp_path / f"w{i}")
    spec = [stoker.Source(p, window=6, stride=4) for p in paths]
    with stoker.Loader(spec, 12, exhaust="all", shuffle="random") as mx:
        total = collections.Counter()
        for b in mx:
            t = np.asarray(b["t"])
            assert t.shape[1:] == (6,)
            assert (np.diff(t, axis=1) == 10).all()
            assert ((t[:, 0] % 10) == np.asarray(b["source"])).all()
            total.update(np.asarray(b["source"]).tolist())
        # 7 windows of 6 rows at stride 4 in 30 rows, per record.
        assert total == {0: 40 * 7, 1: 25 * 7}


def test_bad_input(srcs):
    with pytest.raises(stoker.InvalidArgument, match="fewer than one round"):
        stoker.Loader([srcs[0], srcs[2]], 8, homogeneous=True, streams=16)
    with pytest.raises(stoker.InvalidArgument, match="source 1"):
        stoker.Loader([stoker.Source(srcs[0], count=5), srcs[1]], 8)
    with pytest.raises(stoker.InvalidArgument, match="multiple of world_size"):
        stoker.Loader(srcs, 8, rank=0, world_size=3, streams=4)
    with pytest.raises(stoker.InvalidArgument, match="positive"):
        stoker.Source(srcs[0], weight=0)
    with pytest.raises(stoker.NotFound):
        stoker.Loader([srcs[0], srcs[0] + "-missing"], 8)
    with pytest.raises(TypeError, match="unknown option"):
        stoker.Source(srcs[0], batch_size=3)
    with stoker.Loader(srcs, 8) as mx:
        st = mx.state_dict()
    with stoker.Loader(srcs[:2], 8) as mx:
        with pytest.raises(stoker.InvalidArgument, match="another mixture"):
            mx.load_state_dict(st)


def test_torch_output_and_len(srcs):
    torch = pytest.importorskip("torch")
    with stoker.Loader(sources(srcs), 32, output="torch") as mx:
        n = 0
        for b in mx:
            assert isinstance(b["x"], torch.Tensor) and isinstance(b["source"], torch.Tensor)
            n += 1
        assert n == len(mx) == math.ceil(450 / 32)


@pytest.mark.parametrize("output", ["numpy", "torch", "dlpack"])
def test_sources_and_ids_of_the_last_batch(srcs, output):
    """sources_of_last() and sample_ids() are the last batch's, copies that
    outlive it and hold no batch buffer: with the epoch's first batch held
    throughout (a caller keeping one) and prefetch=2, every later batch
    comes in the one buffer left; a loader that kept the last batch's
    buffer for these calls would hold a second, and the ring would grow
    new ones. Changing what they return changes nothing later."""
    if output == "torch":
        torch = pytest.importorskip("torch")
    as_np = (lambda a: a.numpy()) if output == "torch" else np.asarray
    for field in ("source", None):
        with stoker.Loader(sources(srcs), 16, shuffle="random", prefetch=2, output=output,
                           source_field=field) as mx:
            assert mx.sources_of_last() is None and mx.sample_ids() is None
            seen = collections.Counter()
            first, buffers = None, set()
            for b in mx:
                if first is None:
                    first = b  # (held to the end of the epoch)
                else:
                    buffers.add(as_np(b["x"]).ctypes.data)
                x = as_np(b["x"])[:, 0]
                s, ids = mx.sources_of_last(), mx.sample_ids()
                assert s.dtype == np.int32 and ids.dtype == np.uint64 and len(s) == len(ids) == len(x)
                assert (x % 10 == s).all()
                if field is None:
                    assert "source" not in b
                else:
                    got = as_np(b["source"])
                    assert got.dtype == np.int32 and (got == s).all()
                s0, ids0 = s.copy(), ids.copy()
                s[:] = -1  # copies: the next call gives the batch's again
                ids[:] = 0
                assert (mx.sources_of_last() == s0).all() and (mx.sample_ids() == ids0).all()
                seen.update(s0.tolist())
                b = x = got = None  # (nothing of this batch is held past here)
            assert sum(seen.values()) == 450 and set(seen) == {0, 1, 2}
            assert (mx.sources_of_last() == s0).all()  # still the last batch's, after the epoch
            assert len(buffers) == 1  # (the ring's other buffer; the first is held)
            first = None


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_torch_dataset_over_a_mixture(srcs):
    torch = pytest.importorskip("torch")
    import stoker.torch
    from torch.utils.data import DataLoader
    ds = stoker.torch.Dataset(sources(srcs), 32, shuffle="random", seed=4)
    assert len(ds) == math.ceil(450 / 32)
    seen = collections.Counter()
    for b in DataLoader(ds, batch_size=None, num_workers=0):
        assert isinstance(b["x"], torch.Tensor)
        seen.update(b["source"].tolist())
    assert seen == {0: 180, 1: 180, 2: 90}
    st = ds.state_dict()
    assert st["epoch"] == 1 and st["position"] == 0
    # Worker processes each take a share of the rank's batches, dealt in
    # turn: the DataLoader yields the same batches as one process does.
    def run(workers, **kw):
        d = stoker.torch.Dataset(sources(srcs), 32, shuffle="random", seed=4, **kw)
        d.set_epoch(2)
        return [decode(b) for b in DataLoader(d, batch_size=None, num_workers=workers)]
    one = run(0)
    assert len(one) == len(ds) and run(2) == one and run(3) == one
    # Sources that cannot be drawn (here on_error="skip") cannot be split,
    # and say so (the DataLoader raises the worker's error again here).
    with pytest.raises(stoker.InvalidArgument, match="split among worker processes"):
        run(2, on_error="skip")
    assert len(run(0, on_error="skip")) == len(one)


def test_cli_reads_a_mixture_description(srcs, tmp_path):
    import json
    desc = tmp_path / "mix.json"
    desc.write_text(json.dumps({"sources": [{"path": srcs[0], "weight": 2},
                                            {"path": srcs[1]}, srcs[2]],
                                "exhaust": "all", "seed": 3}))
    build = os.environ.get("STOKER_BUILD", "build")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    exe = os.path.join(build if os.path.isabs(build) else os.path.join(root, build), "stoker")
    env = dict(os.environ, STOKER_PYTHON=sys.executable)
    for cmd in ("read", "doctor"):
        p = subprocess.run([exe, cmd, str(desc), "--batch", "16", "--shuffle", "random",
                            "--json"], env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert [s["samples"] for s in out["sources"]] == list(SIZES)  # exhaust=all
        assert out["samples"] == sum(SIZES)
    # doctor --html writes the page for a mixture as for one dataset.
    page = tmp_path / "mix.html"
    p = subprocess.run([exe, "doctor", str(desc), "--batch", "16", "--step-ms", "1",
                        "--html", str(page)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    html = page.read_text()
    assert "<svg" in html and "with the step" in html and "verdict" in html.lower(), html[:300]
    p = subprocess.run([exe, "read", str(tmp_path / "none.json")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "none.json" in p.stderr


def test_a_remote_source_reads_as_the_local_one(srcs, served, aws, tmp_path):
    """A mixture of a local and an s3:// source gives the batches of the
    same mixture read all locally (the same datasets, the same seeds)."""
    import shutil
    shutil.copytree(srcs[1], served["root"] / "bucket" / "mixsrc1", dirs_exist_ok=True)
    kw = dict(shuffle="random", seed=11)
    want, got = [], []
    with stoker.Loader(sources(srcs), 16, **kw) as mx:
        for b in mx:
            want.append({k: np.asarray(v).tobytes() for k, v in b.items()})
    remote = [srcs[0], "s3://bucket/mixsrc1", srcs[2]]
    with stoker.Loader([stoker.Source(p, w, cache_dir=str(tmp_path / "cache"))
                        for p, w in zip(remote, WEIGHTS)], 16, **kw) as mx:
        for b in mx:
            got.append({k: np.asarray(v).tobytes() for k, v in b.items()})
    assert got == want and len(want) == math.ceil(450 / 16)
