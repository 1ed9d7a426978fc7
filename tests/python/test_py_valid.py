"""Validity rules from Python: valid={field: rule} keeps the windows a
NumPy check of each window keeps (every rule, the whole window, its last
row or last rows, several fields at once), valid_field/valid means what it
always meant, period= and calendar= over a time field written by
stoker.write (dates converted in its unit, an end date taking in its whole
day, the step inferred or given), a Source takes them, a state saved under
other rules is refused, and mistakes are named."""
import numpy as np
import pandas as pd
import pytest

import stoker

pa = pytest.importorskip("pyarrow")


def make_records(seed=0, n=23):
    rng = np.random.default_rng(seed)
    recs = []
    for r in range(n):
        rows = int(rng.integers(0, 40)) if r != 4 else 1
        dens = rng.random() * 0.3
        y = rng.normal(size=(rows, 2)).astype(np.float32)
        y[rng.random((rows, 2)) < dens] = np.nan
        x = rng.normal(size=(rows, 3)).astype(np.float32)
        x[rng.random((rows, 3)) < dens / 3] = np.nan
        x[rng.random((rows, 3)) < 0.01] = np.inf
        if r == 2:
            y[:] = np.nan
        m = (rng.random(rows) > dens).astype(np.uint8)
        pos = np.arange(rows, dtype=np.int64) + 1000 * r
        recs.append({"y": y, "x": x, "m": m, "pos": pos})
    return recs


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    recs = make_records()
    path = tmp_path_factory.mktemp("valid") / "s.stk"
    stoker.write(path, recs, ragged=["y", "x", "m", "pos"])
    return path, recs


def brute(recs, window, stride, rules):
    """The first rows (rec * 1000 + t) of the windows every rule passes."""
    def passes(rec, a, b, field, spec):
        last = 0
        if isinstance(spec, tuple):
            spec, last = spec
        elif spec.endswith("_last"):
            spec, last = spec[:-5], 1
        lo = a if not last else max(a, b - last)
        v = rec[field][lo:b]
        if spec == "notnan":
            return not np.isnan(v).any()
        if spec == "finite":
            return bool(np.isfinite(v).all())
        if spec == "mask":
            return bool((v != 0).all())
        return bool((~np.isnan(v)).any())    # some
    out = []
    for r, rec in enumerate(recs):
        rows = len(rec["pos"])
        for t in range(0, rows - window + 1, stride):
            if all(passes(rec, t, t + window, f, s) for f, s in rules.items()):
                out.append(1000 * r + t)
    return out


def loader_starts(path, window, stride, **kw):
    with stoker.Loader(path, 16, fields=["pos"], window=window, stride=stride,
                       shuffle="sequential", **kw) as ld:
        return [int(p) for b in ld for p in b["pos"][:, 0]]


RULES = [{"y": "notnan"}, {"y": "notnan_last"}, {"y": ("notnan", 3)}, {"x": "finite"},
         {"x": "notnan"}, {"y": "some"}, {"y": "some_last"}, {"y": ("some", 4)},
         {"m": "mask"}, {"m": "mask_last"},
         {"x": "notnan", "y": ("some", 1)}, {"x": "finite", "y": "notnan_last", "m": "mask"}]


@pytest.mark.parametrize("rules", RULES, ids=str)
@pytest.mark.parametrize("window,stride", [(1, 1), (4, 1), (7, 2), (39, 1)])
def test_rules_keep_what_a_check_keeps(series, rules, window, stride):
    path, recs = series
    want = brute(recs, window, stride, rules)
    assert loader_starts(path, window, stride, valid=rules) == want
    n = stoker._loader._count(path, 16, fields=["pos"], window=window, stride=stride,
                              valid=rules)["epoch_samples"]
    assert n == len(want)


def test_several_rules_on_one_field(series):
    path, recs = series
    want = [p for p in brute(recs, 6, 1, {"x": "finite"})
            if p in set(brute(recs, 6, 1, {"x": ("some", 2)}))]
    assert loader_starts(path, 6, 1, valid={"x": ["finite", ("some", 2)]}) == want


def test_valid_field_is_the_last_row_rule(series):
    path, recs = series
    old = loader_starts(path, 5, 1, valid_field="y", valid="notnan")
    assert old == loader_starts(path, 5, 1, valid={"y": "notnan_last"})
    assert old == brute(recs, 5, 1, {"y": "notnan_last"})
    assert loader_starts(path, 5, 1, valid_field="m", valid="mask") == \
        brute(recs, 5, 1, {"m": "mask_last"})


def test_neuralhydrology_rules():
    assert stoker.neuralhydrology_rules("x", "y", predict_last_n=3, evolving="e") == {
        "x": "notnan", "y": ("some", 3), "e": "notnan_last"}
    assert stoker.neuralhydrology_rules(["a", "b"], "y") == {
        "a": "notnan", "b": "notnan", "y": ("some", 1)}


@pytest.fixture(scope="module")
def hourly(tmp_path_factory):
    """Two basins of hourly rows, timestamps in microseconds; basin 1 lacks
    six hours."""
    idx = pd.date_range("2001-03-01", "2001-03-05 23:00", freq="h")
    frames = []
    for b in range(2):
        df = pd.DataFrame({"date": idx.as_unit("us"), "basin": b,
                           "q": np.arange(len(idx), dtype=np.float32)})
        if b == 1:
            df = df.drop(df.index[30:36])
        frames.append(df)
    table = pa.Table.from_pandas(pd.concat(frames, ignore_index=True), preserve_index=False)
    path = tmp_path_factory.mktemp("hourly") / "h.stk"
    stoker.write(path, table, group_by="basin", order_by="date",
                 fields={"q": "q", "date": "date"}, static=[])
    return path, frames


def ends(path, window, **kw):
    with stoker.Loader(path, 32, fields=["date"], window=window, shuffle="sequential",
                       order_by="date", **kw) as ld:
        return [pd.Timestamp(d[-1]) for b in ld for d in b["date"]]


def test_period_and_calendar(hourly):
    path, frames = hourly
    W = 5
    got = ends(path, W, period=("2001-03-02", "2001-03-03"))
    # Ends from 2001-03-02 00:00 through the whole of 2001-03-03.
    lo, hi = pd.Timestamp("2001-03-02"), pd.Timestamp("2001-03-03 23:00")
    want = []
    for df in frames:
        d = pd.DatetimeIndex(df["date"])
        want += [d[i] for i in range(W - 1, len(d)) if lo <= d[i] <= hi]
    assert got == want
    # A pandas Timestamp is a point in time: the end stops at it.
    assert ends(path, W, period=(pd.Timestamp("2001-03-02"), pd.Timestamp("2001-03-03"))) == \
        [d for d in want if d <= pd.Timestamp("2001-03-03")]
    # No window across basin 1's six missing hours, whatever the step's spelling.
    cal = []
    for df in frames:
        d = pd.DatetimeIndex(df["date"])
        cal += [d[i] for i in range(W - 1, len(d))
                if (d[i] - d[i - W + 1]) == pd.Timedelta(hours=W - 1)]
    assert ends(path, W, calendar=True) == cal
    assert ends(path, W, calendar="1h") == cal
    assert ends(path, W, calendar=np.timedelta64(3600, "s")) == cal
    assert ends(path, W, calendar=3_600_000_000) == cal     # the stored unit, us
    assert len(ends(path, W, calendar="2h")) == 0
    both = ends(path, W, calendar=True, period=("2001-03-02", None))
    assert both == [d for d in cal if d >= lo]
    # A period of pieces, given out of order and overlapping: days 1, 3 and 4.
    days = ends(path, W, period=[("2001-03-03", "2001-03-03"), ("2001-03-01", "2001-03-01"),
                                 ("2001-03-03 12:00", "2001-03-04")])
    all_ends = ends(path, W)
    assert days == [d for d in all_ends if d.day in (1, 3, 4)]


def test_source_takes_rules(series):
    path, recs = series
    n = len(brute(recs, 4, 1, {"y": "some"}))
    mix = stoker.Loader([stoker.Source(path, window=4, valid={"y": "some"}, fields=["pos"])],
                        8, exhaust="stop")
    with mix:
        got = sum(len(b["pos"]) for b in mix)
    assert got == n


def test_state_pins_the_rules(series):
    path, _ = series
    with stoker.Loader(path, 4, fields=["pos"], window=3, valid={"y": "notnan"}) as a:
        next(iter(a))
        state = a.state_dict()
    with stoker.Loader(path, 4, fields=["pos"], window=3, valid={"y": "notnan"}) as b:
        b.load_state_dict(state)
    with stoker.Loader(path, 4, fields=["pos"], window=3, valid={"y": ("notnan", 2)}) as c:
        with pytest.raises(stoker.InvalidArgument):
            c.load_state_dict(state)


@pytest.mark.parametrize("kw,needle", [
    (dict(valid={"y": "nan"}), "valid['y']"),
    (dict(valid={"y": ("notnan", 0)}), "rows"),
    (dict(valid={"nope": "notnan"}), "nope"),
    (dict(valid={"m": "notnan"}), "float"),
    (dict(valid={"y": "notnan"}, valid_field="y"), "valid_field"),
    (dict(valid="notnan"), "valid_field"),
    (dict(valid="some"), "valid"),
    (dict(period=(0, 5)), "order_by"),
    (dict(calendar=True), "order_by"),
    (dict(period=(0, 5), order_by="y"), "integer"),
    (dict(period=("2001-01-01", None), order_by="pos"), "time type"),
    (dict(period=(5, 0), order_by="pos"), "after"),
    (dict(calendar=-1, order_by="pos"), "positive"),
])
def test_mistakes_are_named(series, kw, needle):
    path, _ = series
    with pytest.raises(stoker.InvalidArgument, match=None) as e:
        stoker.Loader(path, 4, fields=["pos"], window=3, **kw)
    assert needle in str(e.value)


def test_a_period_is_pairs(series):
    path, _ = series
    with pytest.raises(TypeError, match="pair"):
        stoker.Loader(path, 4, fields=["pos"], window=3, period=[(0, 5), (7,)], order_by="pos")


def test_rules_need_windows(series):
    path, _ = series
    with pytest.raises(stoker.InvalidArgument, match="window"):
        stoker.Loader(path, 4, valid={"y": "notnan"})
