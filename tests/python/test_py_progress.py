"""Progress of the Python API's long calls (stoker.write, stoker.index,
Loader.fetch_epoch, the engine writers): tqdm's bar where tqdm is
installed, one line redrawn in place on a terminal otherwise, nothing where
stderr is not a terminal or with progress=False; and the sources a user
tries first with stoker.write (a pyarrow Dataset, a ParquetFile, an
iterator of record batches), packed to the values pyarrow reads."""

import fcntl
import io
import os
import re
import struct
import subprocess
import sys
import termios
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.parquet as pq
import pytest

import stoker

N_FILES, ROWS, BASINS = 3, 400, 7


@pytest.fixture
def parquet_dir(tmp_path):
    """Three Parquet files of shuffled daily rows of seven basins (several
    row groups each), and the rows as pyarrow reads them."""
    rng = np.random.default_rng(3)
    d = tmp_path / "pq"
    d.mkdir()
    for i in range(N_FILES):
        date = rng.permutation(ROWS).astype(np.int64) + i * ROWS
        t = pa.table({"basin": rng.integers(0, BASINS, ROWS).astype(np.int32), "date": date,
                      "q": rng.standard_normal(ROWS).astype(np.float32),
                      "p": rng.random(ROWS)})
        pq.write_table(t, d / f"part{i}.parquet", row_group_size=150)
    return d, pds.dataset(d).to_table()


def rows_of(path):
    with stoker.Loader(path, batch_size=1, shuffle="sequential") as ld:
        return [{k: np.array(v) for k, v in b.items()} for b in ld]


def assert_rows_equal(path, table):
    recs = rows_of(path)
    assert len(recs) == table.num_rows
    for name in table.column_names:
        got = np.concatenate([r[name] for r in recs])
        np.testing.assert_array_equal(got, table[name].to_numpy())


def assert_groups_equal(path, table):
    """One record per basin, its rows sorted by date, as pyarrow's rows of
    that basin sorted by date."""
    recs = rows_of(path)
    keys = np.unique(table["basin"].to_numpy())
    assert sorted(int(r["basin"][0]) for r in recs) == list(keys)
    for r in recs:
        k = int(r["basin"][0])
        want = table.filter(pa.compute.equal(table["basin"], k)).sort_by("date")
        for name in ("date", "q", "p"):
            np.testing.assert_array_equal(r[name], want[name].to_numpy())


# ---- the sources a user tries first ----

def test_a_pyarrow_dataset_packs_as_its_rows(parquet_dir, tmp_path):
    d, table = parquet_dir
    assert stoker.write(tmp_path / "a.stk", pds.dataset(d)) == table.num_rows
    assert_rows_equal(tmp_path / "a.stk", table)


def test_a_pyarrow_dataset_grouped_and_ordered(parquet_dir, tmp_path):
    d, table = parquet_dir
    n = stoker.write(tmp_path / "g.stk", pds.dataset(d), group_by="basin", order_by="date")
    assert n == BASINS
    assert_groups_equal(tmp_path / "g.stk", table)


def test_iter_batches_of_a_parquet_file_packs_as_its_rows(parquet_dir, tmp_path):
    d, _ = parquet_dir
    f = d / "part1.parquet"
    batches = pq.ParquetFile(f).iter_batches(batch_size=64)
    assert stoker.write(tmp_path / "b.stk", batches) == ROWS
    assert_rows_equal(tmp_path / "b.stk", pq.read_table(f))
    # The ParquetFile itself, too.
    assert stoker.write(tmp_path / "f.stk", pq.ParquetFile(f)) == ROWS
    assert_rows_equal(tmp_path / "f.stk", pq.read_table(f))


def test_a_generator_of_batches_of_several_files_grouped(parquet_dir, tmp_path):
    d, table = parquet_dir

    def batches():
        for f in sorted(d.iterdir()):
            yield from pq.ParquetFile(f).iter_batches(batch_size=100)

    n = stoker.write(tmp_path / "g.stk", batches(), group_by="basin", order_by="date")
    assert n == BASINS
    assert_groups_equal(tmp_path / "g.stk", table)


def test_a_record_batch_reader_and_a_scanner(parquet_dir, tmp_path):
    d, table = parquet_dir
    stoker.write(tmp_path / "r.stk", pds.dataset(d).scanner(batch_size=50).to_reader())
    assert_rows_equal(tmp_path / "r.stk", table)
    stoker.write(tmp_path / "s.stk", pds.dataset(d).scanner(columns=["date", "q"]))
    assert_rows_equal(tmp_path / "s.stk", table.select(["date", "q"]))


def test_a_batch_of_another_schema_is_refused_by_its_number(tmp_path):
    def batches():
        yield pa.record_batch({"a": pa.array([1, 2], pa.int64())})
        yield pa.record_batch({"a": pa.array([3], pa.int64())})
        yield pa.record_batch({"a": pa.array([1.5], pa.float64())})

    with pytest.raises(stoker.InvalidArgument,
                       match=r"x.stk: item 2 .*'a' is double where the schema has int64"):
        stoker.write(tmp_path / "x.stk", batches())
    assert not (tmp_path / "x.stk" / "manifest.json").exists()


def test_an_exception_in_the_source_comes_out_as_itself(tmp_path):
    class Mine(Exception):
        pass

    def batches():
        yield pa.record_batch({"a": [1, 2]})
        raise Mine("the source broke")

    with pytest.raises(Mine, match="the source broke"):
        stoker.write(tmp_path / "x.stk", batches())


@pytest.mark.parametrize("source, words", [
    ("DIR", ["stoker.parquet(", "a path is not data"]),
    (42, ["builtins.int", "stoker.parquet(path)", "Dataset", "RecordBatchReader",
          "a dict of arrays", "an iterable of per-record dicts"]),
    ([1, 2], ["first item is a int", "stoker.parquet(path)"]),
])
def test_what_is_not_taken_is_told_what_to_pass(parquet_dir, tmp_path, source, words):
    d, _ = parquet_dir
    if source == "DIR":
        source = d
    with pytest.raises(TypeError) as e:
        stoker.write(tmp_path / "x.stk", source)
    for w in words:
        assert w in str(e.value)


# ---- progress ----

def in_terminal(code, cwd, tqdm=True):
    """Runs `code` in a child Python whose stderr is a pseudo-terminal;
    (exit status, what it wrote to the terminal).  tqdm=False: the child
    finds no tqdm (as where it is not installed).  Redraws are not
    throttled, so every step is drawn."""
    prelude = "import stoker._progress as P\nP._EVERY = 0.0\n"
    if not tqdm:
        prelude = "import sys\nsys.modules['tqdm'] = sys.modules['tqdm.auto'] = None\n" + prelude
    # The stoker this test imported, wherever the child runs.
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(stoker.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([pkg, os.environ.get("PYTHONPATH", "")]))
    master, slave = os.openpty()
    # A terminal 120 columns wide (a new pseudo-terminal has no size).
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    p = subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, cwd=cwd,
                         env=env)
    os.close(slave)
    out = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not b:
            break
        out.append(b)
    p.communicate(timeout=120)
    os.close(master)
    return p.returncode, b"".join(out).decode(errors="replace")


def lines(text):
    """What a terminal shows, redraw by redraw: the text cut at every
    carriage return and newline, blank pieces left out."""
    return [s.strip() for s in text.replace("\r\n", "\n").replace("\n", "\r").split("\r")
            if s.strip()]


WRITE_DICT = """
    import numpy as np, stoker
    n = stoker.write("d.stk", {"x": np.zeros((300, 4), np.float32)}, progress=PROGRESS,
                     overwrite=True)
    assert n == 300
"""


def test_plain_line_on_a_terminal_ends_with_the_totals(tmp_path):
    rc, text = in_terminal(WRITE_DICT.replace("PROGRESS", "None"), tmp_path, tqdm=False)
    assert rc == 0, text
    shown = lines(text)
    # Redrawn in place: carriage returns, and a bar with the count of the total.
    assert "\r" in text and any("/300 records" in s and "%" in s for s in shown), shown
    assert any("ETA" in s for s in shown[:-1]), shown
    last = shown[-1]
    assert last.startswith("write d.stk 300 records, 4.69 KiB in "), last
    assert text.replace("\r\n", "\n").endswith("\n")


def test_tqdm_on_a_terminal_reaches_the_total(tmp_path):
    rc, text = in_terminal(WRITE_DICT.replace("PROGRESS", "None"), tmp_path)
    assert rc == 0, text
    last = lines(text)[-1]
    assert "write d.stk" in last and "100%" in last and "300/300" in last, last


def test_nothing_with_progress_false_on_a_terminal(tmp_path):
    for tq in (True, False):
        rc, text = in_terminal(WRITE_DICT.replace("PROGRESS", "False"), tmp_path, tqdm=tq)
        assert rc == 0 and text == "", text


def test_nothing_when_stderr_is_not_a_terminal(tmp_path, capfd):
    stoker.write(tmp_path / "a.stk", {"x": np.arange(100)})
    stoker.write(tmp_path / "b.stk", [{"x": np.arange(3)}] * 10)
    stoker.write(tmp_path / "c.stk", pa.table({"x": np.arange(10)}))
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_progress_true_forces_tqdm_to_its_total(tmp_path, capsys):
    t = pa.table({"k": np.arange(240) % 4, "v": np.arange(240.0)})
    assert stoker.write(tmp_path / "t.stk", t.to_batches(max_chunksize=50), group_by="k",
                        progress=True) == 4
    err = capsys.readouterr().err
    assert "write t.stk" in err and "100%" in err and "240/240" in err, err


def test_progress_true_without_tqdm_draws_the_plain_line(tmp_path, capsys, monkeypatch):
    from stoker import _progress
    monkeypatch.setattr(_progress, "_tqdm", lambda: None)
    stoker.write(tmp_path / "r.stk", [{"x": np.arange(5)}] * 25, progress=True)
    err = capsys.readouterr().err
    assert lines(err)[-1].startswith("write r.stk 25 records, 1000 B in "), err


def test_a_notebook_gets_a_bar_though_not_a_terminal(tmp_path, monkeypatch):
    # A Jupyter kernel's stderr: never a terminal, but shown to the user.
    Stream = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})
    s = Stream()
    monkeypatch.setattr(sys, "stderr", s)
    stoker.write(tmp_path / "n.stk", {"x": np.arange(50)})
    assert "50/50" in s.getvalue()


def test_progress_must_be_a_bool_or_none(tmp_path):
    with pytest.raises(TypeError, match="progress"):
        stoker.write(tmp_path / "x.stk", {"x": np.arange(3)}, progress="yes")


# ---- stoker.index: the C walk reports each file ----

def npy_files(d, n=120):
    (d / "sub").mkdir(parents=True)
    for i in range(n):
        np.save(d / "sub" / f"{i:03d}.npy", np.full((3, 2), i, np.float32))
    return sorted(str(p) for p in (d / "sub").glob("*.npy"))


def test_index_on_a_terminal_ends_with_files_and_records(tmp_path):
    npy_files(tmp_path / "npys")
    code = """
        import stoker
        assert stoker.index("npys", "npys.idx", split_axis0=True) == 360
    """
    rc, text = in_terminal(code, tmp_path, tqdm=False)
    assert rc == 0, text
    shown = lines(text)
    assert shown[-1].startswith("index npys.idx 120 files, 360 records in "), shown
    rc, text = in_terminal(code, tmp_path)
    assert rc == 0, text
    assert "120/120" in lines(text)[-1] and "360 records" in lines(text)[-1], text


def test_index_of_named_files_counts_to_their_total(tmp_path, capsys, monkeypatch):
    from stoker import _progress
    files = npy_files(tmp_path / "npys", 40)
    monkeypatch.setattr(_progress, "_EVERY", 0.0)
    monkeypatch.setattr(_progress, "_tqdm", lambda: None)
    assert stoker.index(files, tmp_path / "f.idx", progress=True) == 40
    shown = lines(capsys.readouterr().err)
    assert any("/40 files" in s and "%" in s for s in shown), shown
    assert shown[-1].startswith("index f.idx 40 files, 40 records in "), shown


def test_index_stopped_from_its_progress_writes_nothing(tmp_path, monkeypatch):
    # What a Ctrl-C during the walk does: the KeyboardInterrupt raised where
    # the progress is drawn stops the C walk, and comes out as itself.
    from stoker import _progress
    npy_files(tmp_path / "npys", 20)
    monkeypatch.setattr(_progress, "_tqdm", lambda: None)

    def interrupted(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(_progress._Line, "set", interrupted)
    with pytest.raises(KeyboardInterrupt):
        stoker.index(tmp_path / "npys", tmp_path / "i.idx", progress=True)
    assert not (tmp_path / "i.idx").exists()
    # And without progress, the same index is made.
    assert stoker.index(tmp_path / "npys", tmp_path / "i.idx", progress=False) == 20


# ---- Loader.fetch_epoch: the remote counters polled while C fetches ----

try:
    from test_py_remote import RCLONE, aws, served  # noqa: F401  (fixtures)
except ImportError:  # pragma: no cover
    RCLONE = None


@pytest.mark.skipif(RCLONE is None or not RCLONE.exists(), reason="rclone not installed")
def test_fetch_epoch_shows_the_bytes_fetched(served, aws, tmp_path, capsys, monkeypatch):
    from stoker import _progress
    monkeypatch.setattr(_progress, "_tqdm", lambda: None)
    # Far larger than what the loader's own reads (one thread, two batch
    # buffers, in order, no remote read-ahead) fetch as soon as it opens
    # (about 200 KB of 4 MB), so that fetch_epoch has something left to
    # fetch however the threads run.
    monkeypatch.setenv("STOKER_REMOTE_AHEAD_MB", "0")
    stoker.write(str(served["root"] / "bucket" / "progress"),
                 {"x": np.random.default_rng(3).standard_normal((256, 4096)).astype(np.float32)},
                 shard_bytes=256 << 10)
    kw = dict(threads=1, prefetch=2, shuffle="sequential")
    with stoker.Loader("s3://bucket/progress", 4, cache_dir=tmp_path / "c", **kw) as ld:
        before = ld.remote_stats()["bytes_fetched"]
        assert ld.fetch_epoch(progress=True) > 0
        got = ld.remote_stats()["bytes_fetched"] - before
    last = lines(capsys.readouterr().err)[-1]
    # The line counts from fetch_epoch's start; `got` also holds what the
    # loader's own thread fetched between `before` and that start (its two
    # batches, within the first two shards), so the two agree up to that.
    m = re.match(r"fetch ([0-9.]+) (B|KiB|MiB) in ", last)
    assert m, last
    shown = float(m.group(1)) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[m.group(2)]
    assert 3 << 20 < got and got - (512 << 10) <= shown <= got + (1 << 20) / 200, (last, got)
    with stoker.Loader("s3://bucket/progress", 4, cache_dir=tmp_path / "d", **kw) as ld:
        ld.fetch_epoch()  # stderr is no terminal here
        ld.fetch_epoch(progress=False)
    assert capsys.readouterr().err == ""


# ---- the engine writers: the parts' directory watched as tasks finish ----

def test_dask_write_shows_parts_records_and_bytes(tmp_path, capsys, monkeypatch):
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd
    import stoker.dask
    from stoker import _progress
    monkeypatch.setattr(_progress, "_EVERY", 0.0)
    monkeypatch.setattr(_progress, "_tqdm", lambda: None)
    df = pd.DataFrame({"k": np.arange(240) % 6, "v": np.arange(240.0)})
    ddf = dd.from_pandas(df, npartitions=4)
    n = stoker.dask.write(ddf, tmp_path / "d.stk", progress=True)
    assert n == 240
    size = sum(p.stat().st_size for p in (tmp_path / "d.stk").glob("*.stk"))
    last = lines(capsys.readouterr().err)[-1]
    assert last.startswith(f"write d.stk 4 parts, 240 records, {_progress.human_bytes(size)} "
                           "in "), last
    stoker.dask.write(ddf, tmp_path / "e.stk")  # stderr is no terminal here
    assert capsys.readouterr().err == ""
