"""Hugging Face datasets as sources of stoker.write: every Arrow type that
`datasets` produces reads back with its values and dtype, in memory, from
disk (load_from_disk, and `stoker pack --from arrow`), in the order of a
selected, shuffled or filtered dataset, from an IterableDataset and from a
DatasetDict; sources of no known kind are a TypeError naming what is
taken."""
import datetime as dt
import os
import subprocess
import sys

import numpy as np
import pytest

import stoker

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")

ORDERS = ["sequential", "random", "block"]
N = 23
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]


def features():
    f = {k: datasets.Value(k) for k in INTS + FLOATS}
    f.update({
        "flag": datasets.Value("bool"),
        "text": datasets.Value("string"),
        "ltext": datasets.Value("large_string"),
        "blob": datasets.Value("binary"),
        "tokens": datasets.List(datasets.Value("int32")),
        "probs": datasets.List(datasets.Value("float32")),
        "pairs": datasets.List(datasets.List(datasets.Value("int16"), length=2)),
        "grid": datasets.Array2D((2, 3), "float32"),
        "fixed": datasets.List(datasets.Value("int64"), length=3),
        "when": datasets.Value("timestamp[us, tz=UTC]"),
        "day": datasets.Value("date32"),
        "took": datasets.Value("duration[ms]"),
        "label": datasets.ClassLabel(names=["neg", "pos"]),
    })
    return datasets.Features(f)


def columns(n=N):
    rng = np.random.default_rng(0)
    c = {}
    for k in INTS:
        info = np.iinfo(k)
        # (uint64 up to 2^63 - 1: datasets turns values into Python ints
        # and back through a C long)
        top = int(info.max) if k != "uint64" else 2**63 - 1
        c[k] = [int(info.min), top] + rng.integers(0, 100, n - 2).tolist()
    for k in FLOATS:
        c[k] = (rng.standard_normal(n).astype(k)).tolist()
    c["flag"] = [bool(i % 3) for i in range(n)]
    c["text"] = [("héllo " * (i % 4)) + str(i) if i % 5 else "" for i in range(n)]
    c["ltext"] = ["日本" * (i % 7) for i in range(n)]
    c["blob"] = [bytes(range(i % 9)) + b"\x00" for i in range(n)]
    # Empty lists first: the column's own type must still be kept.
    c["tokens"] = [list(range(i, i + i % 4)) if i > 1 else [] for i in range(n)]
    c["probs"] = [[0.5 * j for j in range(i % 3)] if i else [] for i in range(n)]
    c["pairs"] = [[[i, j] for j in range(i % 3)] for i in range(n)]
    c["grid"] = [np.arange(6, dtype="f4").reshape(2, 3) + i for i in range(n)]
    c["fixed"] = [[i, -i, 2 * i] for i in range(n)]
    t0 = dt.datetime(2020, 9, 13, 12, 26, 40, tzinfo=dt.timezone.utc)
    c["when"] = [t0 + dt.timedelta(microseconds=i * 1_000_001) for i in range(n)]
    c["day"] = [dt.date(2022, 1, 8) + dt.timedelta(days=i) for i in range(n)]
    c["took"] = [dt.timedelta(milliseconds=i * 7) for i in range(n)]
    c["label"] = [i % 2 for i in range(n)]
    return c


DTYPES = {"flag": np.uint8, "tokens": np.int32, "probs": np.float32, "pairs": np.int16,
          "grid": np.float32, "fixed": np.int64, "when": "datetime64[us]", "day": "datetime64[D]",
          "took": "timedelta64[ms]", "label": np.int64}
DTYPES.update({k: np.dtype(k) for k in INTS + FLOATS})


@pytest.fixture(scope="module")
def hf():
    return datasets.Dataset.from_dict(columns(), features=features())


def records(path, **kw):
    """{record id: {field: value}} of an epoch, ragged fields cut."""
    out = {}
    with stoker.Loader(path, 4, **kw) as ld:
        for b in ld:
            for j, rid in enumerate(ld.sample_ids()):
                rec = {}
                for k, v in b.items():
                    if not k.endswith("_offsets"):
                        off = b.get(k + "_offsets")
                        rec[k] = v[off[j]:off[j + 1]] if off is not None else v[j]
                out[int(rid)] = rec
    return out


def check(path, cols, order=None, **kw):
    """The dataset at `path` holds rows `order` (default all) of `cols`,
    value for value, with each column's dtype."""
    order = list(range(len(cols["int8"]))) if order is None else list(order)
    got = records(path, **kw)
    assert sorted(got) == list(range(len(order)))
    for r, rec in got.items():
        src = order[r]
        for k, want in cols.items():
            v = rec[k]
            if k in ("text", "ltext", "blob"):
                assert type(v) is type(want[src]) and v == want[src], (k, r)
                continue
            v = np.asarray(v)
            assert v.dtype == np.dtype(DTYPES[k]), (k, v.dtype)
            w = want[src]
            if k == "when":  # (stored in UTC, as numpy has no zones)
                w = w.astimezone(dt.timezone.utc).replace(tzinfo=None)
            w = np.asarray(w, dtype=v.dtype)
            if k in ("pairs", "probs", "tokens") and not len(want[src]):
                assert v.size == 0, k
                continue
            np.testing.assert_array_equal(v, w, err_msg=k)


@pytest.mark.parametrize("shuffle", ORDERS)
def test_every_type_in_memory(tmp_path, hf, shuffle):
    assert stoker.write(tmp_path / "d", hf) == N
    check(tmp_path / "d", columns(), shuffle=shuffle, seed=5)


def test_shapes_and_types_kept(tmp_path, hf):
    stoker.write(tmp_path / "d", hf)
    import json
    with open(tmp_path / "d" / "manifest.json") as f:
        m = {x["name"]: x for x in json.load(f)["fields"]}
    assert (m["int32"]["dtype"], m["int32"]["shape"]) == ("i32", [])
    assert (m["tokens"]["dtype"], m["tokens"]["shape"]) == ("i32", [-1])
    assert (m["probs"]["dtype"], m["pairs"]["shape"]) == ("f32", [-1, 2])
    assert (m["grid"]["dtype"], m["grid"]["shape"]) == ("f32", [2, 3])
    assert m["fixed"]["shape"] == [3]
    assert m["when"]["type"] == "timestamp[us, tz=UTC]" and m["text"]["type"] == "string"


def test_from_disk_and_the_command_line(tmp_path, hf):
    hf.save_to_disk(str(tmp_path / "hf"), max_shard_size="2KB")
    assert len(list((tmp_path / "hf").glob("*.arrow"))) > 1
    disk = datasets.load_from_disk(str(tmp_path / "hf"))
    stoker.write(tmp_path / "d", disk)
    check(tmp_path / "d", columns(), shuffle="random")
    build = os.environ.get("STOKER_BUILD", "build")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    exe = os.path.join(build if os.path.isabs(build) else os.path.join(root, build), "stoker")
    env = dict(os.environ, STOKER_PYTHON=sys.executable)
    r = subprocess.run([exe, "pack", "--from", "arrow", str(tmp_path / "hf"), "-o",
                        str(tmp_path / "cli")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    check(tmp_path / "cli", columns(), shuffle="block")
    # A plain Arrow IPC file (the file format) too.
    with pa.ipc.new_file(str(tmp_path / "t.arrow"), hf.data.table.schema) as w:
        w.write_table(hf.data.table)
    r = subprocess.run([exe, "pack", "--from", "arrow", str(tmp_path / "t.arrow"), "-o",
                        str(tmp_path / "ipc")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    check(tmp_path / "ipc", columns())


@pytest.mark.parametrize("how", ["shuffle", "select", "filter", "split", "disk-shuffle"])
def test_the_datasets_order_is_kept(tmp_path, hf, how):
    if how == "shuffle":
        ds = hf.shuffle(seed=7)
    elif how == "select":
        ds = hf.select([5, 3, 3, 20, 0])
    elif how == "filter":
        ds = hf.filter(lambda r: r["int16"] % 2 == 0)
    elif how == "split":
        ds = hf.train_test_split(test_size=0.3, seed=1)["test"]
    else:
        hf.save_to_disk(str(tmp_path / "hf"))
        ds = datasets.load_from_disk(str(tmp_path / "hf")).shuffle(seed=2)
    assert ds._indices is not None
    order = ds._indices.column(0).to_pylist()
    assert stoker.write(tmp_path / "d", ds) == len(order)
    check(tmp_path / "d", columns(), order, shuffle="random")


def test_iterable_dataset(tmp_path, hf):
    it = hf.to_iterable_dataset(num_shards=3)
    assert stoker.write(tmp_path / "d", it) == N
    check(tmp_path / "d", columns(), shuffle="block")
    gen = datasets.IterableDataset.from_generator(
        lambda: ({"x": [i] * (i % 3), "s": str(i)} for i in range(10)),
        features=datasets.Features({"x": datasets.List(datasets.Value("int32")),
                                    "s": datasets.Value("string")}))
    stoker.write(tmp_path / "g", gen)
    got = records(tmp_path / "g")
    assert [got[i]["s"] for i in range(10)] == [str(i) for i in range(10)]
    assert got[0]["x"].dtype == np.int32 and got[4]["x"].tolist() == [4]


def test_dataset_dict(tmp_path, hf):
    dd = datasets.DatasetDict({"train": hf.select(range(15)), "test": hf.select(range(15, N))})
    assert stoker.write(tmp_path / "all", dd) == {"train": 15, "test": N - 15}
    check(tmp_path / "all" / "train", columns(), range(15))
    check(tmp_path / "all" / "test", columns(), range(15, N))
    assert stoker.write(tmp_path / "one", dd, split="test") == N - 15
    check(tmp_path / "one", columns(), range(15, N))
    with pytest.raises(ValueError, match="split 'dev'"):
        stoker.write(tmp_path / "x", dd, split="dev")


def test_table_wrappers_and_formats_unwrap(tmp_path, hf):
    stoker.write(tmp_path / "t", hf.data)
    check(tmp_path / "t", columns())
    stoker.write(tmp_path / "a", hf.with_format("arrow").select([1, 0]))
    check(tmp_path / "a", columns(), [1, 0])
    stoker.write(tmp_path / "n", hf.with_format("numpy"))
    check(tmp_path / "n", columns(), shuffle="random")


@pytest.mark.parametrize("bad, words", [
    ([1, 2], ["first item is a int", "per-record dict"]),
    (5, ["builtins.int"]),
    (object(), ["builtins.object"]),
    ("text", ["builtins.str"]),
    (iter([{"x": 1}, 3]), ["record 1 is a int"]),
])
def test_bad_sources_are_type_errors(tmp_path, bad, words):
    with pytest.raises(TypeError) as ei:
        stoker.write(tmp_path / "d", bad)
    for w in words:
        assert w in str(ei.value)
    if "record 1" not in words[0]:
        assert "datasets Dataset, IterableDataset or DatasetDict" in str(ei.value)
    assert not (tmp_path / "d" / "manifest.json").exists()


def test_split_needs_a_dataset_dict(tmp_path, hf):
    with pytest.raises(TypeError, match="DatasetDict"):
        stoker.write(tmp_path / "d", hf, split="train")


def test_text_and_tokens_through_torch(tmp_path, hf):
    torch = pytest.importorskip("torch")
    stoker.write(tmp_path / "d", hf)
    cols = columns()
    seen = set()
    with stoker.Loader(tmp_path / "d", 4, output="torch", shuffle="random",
                       fields=["text", "tokens"]) as ld:
        for b in ld:
            raw, off = bytes(b["text"].numpy()), b["text_offsets"].tolist()
            toff = b["tokens_offsets"].tolist()
            assert b["tokens"].dtype == torch.int32 and b["text"].dtype == torch.uint8
            for j, r in enumerate(ld.sample_ids().tolist()):
                assert raw[off[j]:off[j + 1]].decode() == cols["text"][r]
                assert b["tokens"][toff[j]:toff[j + 1]].tolist() == cols["tokens"][r]
                seen.add(r)
    assert seen == set(range(N))


def test_pack_from_arrow_names_a_dataset_dicts_splits(tmp_path, hf):
    datasets.DatasetDict({"train": hf, "test": hf.select([0])}).save_to_disk(str(tmp_path / "dd"))
    build = os.environ.get("STOKER_BUILD", "build")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    exe = os.path.join(build if os.path.isabs(build) else os.path.join(root, build), "stoker")
    env = dict(os.environ, STOKER_PYTHON=sys.executable)
    r = subprocess.run([exe, "pack", "--from", "arrow", str(tmp_path / "dd"), "-o",
                        str(tmp_path / "x")], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "DatasetDict" in r.stderr and "train" in r.stderr
    r = subprocess.run([exe, "pack", "--from", "arrow", str(tmp_path / "dd" / "test"), "-o",
                        str(tmp_path / "t")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    check(tmp_path / "t", columns(), [0])
