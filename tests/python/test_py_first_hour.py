"""Small things a new user trips on: string fields through torch cut into
Python strings (stoker.strings), `import stoker.profile` giving the module,
help(stoker.Loader) showing the real parameters, and the command line's
wording (`stoker read` with no consumer, `stoker --help`)."""
import inspect
import pydoc
import subprocess

import numpy as np
import pytest

import stoker

pa = pytest.importorskip("pyarrow")
torch = pytest.importorskip("torch")

TEXT = ["key-0", "", "héllo", "日本語", "x" * 40, "tab\tnl\n", "z"] * 3


@pytest.fixture
def text_ds(tmp_path):
    path = tmp_path / "t.stk"
    stoker.write(path, pa.table({"key": TEXT, "n": np.arange(len(TEXT), dtype=np.int32)}))
    return path


@pytest.mark.parametrize("kind", ["list", "numpy", "arrow"])
def test_strings_of_torch_batches_equal_the_numpy_output(text_ds, kind):
    if kind == "numpy" and not hasattr(getattr(np, "dtypes", None), "StringDType"):
        pytest.skip("NumPy 1 has no StringDType")
    got = []
    with stoker.Loader(text_ds, 4, shuffle="random", seed=3, output="torch") as ld:
        for b in ld:
            assert b["key"].dtype == torch.uint8 and "key_offsets" in b
            s = stoker.strings(b, "key", kind=kind)
            got.extend(s.to_pylist() if kind == "arrow" else list(s))
            # Each string is the one of the sample's record.
            assert [TEXT[int(i)] for i in b["n"]] == (s.to_pylist() if kind == "arrow"
                                                      else [str(x) for x in s])
    with stoker.Loader(text_ds, 4, shuffle="random", seed=3) as ld:
        want = [s for b in ld for s in b["key"]]
    assert got == want and sorted(got) == sorted(TEXT)


def test_strings_binary_and_errors(text_ds):
    with stoker.Loader(text_ds, 7, shuffle="sequential", output="torch") as ld:
        b = next(iter(ld))
    assert stoker.strings(b, "key", binary=True) == [t.encode() for t in TEXT[:7]]
    with pytest.raises(stoker.InvalidArgument, match=r"no ragged field 'n'.*\['key'\]"):
        stoker.strings(b, "n")
    with pytest.raises(stoker.InvalidArgument, match="kind must be one of"):
        stoker.strings(b, "key", kind="pandas")
    bad = {"k": np.frombuffer(b"\xff\xfe", np.uint8), "k_offsets": np.array([0, 2])}
    with pytest.raises(UnicodeDecodeError):
        stoker.strings(bad, "k")
    assert stoker.strings(bad, "k", binary=True) == [b"\xff\xfe"]


def test_import_stoker_profile_gives_the_module_and_the_call_still_works(text_ds):
    import stoker.profile as P
    assert inspect.ismodule(P) and P.Report.__name__ == "Report"
    with stoker.Loader(text_ds, 4, fields="n") as ld:
        r = stoker.profile(ld, batches=3)
        r2 = P.profile(ld, batches=3)
    assert isinstance(r, P.Report) and isinstance(r2, P.Report)
    assert r.verdict == r2.verdict == "loader alone"


def test_help_of_loader_shows_its_parameters():
    sig = inspect.signature(stoker.Loader)
    names = list(sig.parameters)
    assert names[:2] == ["path", "batch_size"] and "window" in names and "args" not in names
    assert sig.parameters["shuffle"].kind is inspect.Parameter.KEYWORD_ONLY
    text = pydoc.render_doc(stoker.Loader, renderer=pydoc.plaintext)
    assert "Loader(path: " in text and "batch_size" in text and "*args" not in text.split("\n")[2]


def test_read_with_no_consumer_says_why_it_waits(stoker, tmp_path):
    import stoker as stk     # (the `stoker` fixture is the command line)
    path = tmp_path / "r.stk"
    stk.write(path, {"x": np.arange(4000, dtype=np.float32).reshape(1000, 4)})
    out = stoker.ok("read", str(path), "--batch", "50").stdout
    assert "stall" not in out, out
    assert "nothing here consumes the batches" in out and "doctor --step-ms" in out, out


def test_top_level_help_names_every_pack_format(stoker):
    out = stoker.ok("--help").stdout
    line = next(x for x in out.splitlines() if x.strip().startswith("pack "))
    for fmt in (".npy", "Parquet", "Arrow", "HDF5"):
        assert fmt in line, line
