"""Errors carry their message: the exception type says what kind of mistake,
the message names the option, field, file or variable at fault."""

import errno
import os

import numpy as np
import pytest

import stoker

pytestmark = pytest.mark.usefixtures("no_dist_env")


@pytest.fixture
def ds(tmp_path):
    recs = [{"x": np.zeros((n, 2), np.float32), "y": np.int32(n)} for n in (5, 9, 3, 12)]
    path = tmp_path / "e.stk"
    stoker.write(path, recs)
    return path


@pytest.mark.parametrize("kwargs,name", [
    (dict(batch_size="x"), "batch_size"),
    (dict(batch_size=4.0), "batch_size"),
    (dict(batch_size=True), "batch_size"),
    (dict(batch_size=4, window=1.5), "window"),
    (dict(batch_size=4, window="3"), "window"),
    (dict(batch_size=4, stride=None), "stride"),
    (dict(batch_size=4, fields=[1]), "fields"),
    (dict(batch_size=4, fields=["x", None]), "fields"),
    (dict(batch_size=4, seed=1.0), "seed"),
    (dict(batch_size=4, rank="0", world_size=2), "rank"),
    (dict(batch_size=4, world_size=2.0), "world_size"),
    (dict(batch_size=4, prefetch="2"), "prefetch"),
    (dict(batch_size=4, valid_field=3, valid="mask"), "valid_field"),
])
def test_wrong_types_raise_type_error_naming_the_option(ds, kwargs, name):
    with pytest.raises(TypeError, match=name):
        stoker.Loader(ds, **kwargs)


def test_wrong_path_type(ds):
    with pytest.raises(TypeError, match="path"):
        stoker.Loader(123, batch_size=4)
    with pytest.raises(TypeError, match="path"):
        stoker.write(5, {"a": np.arange(3)})


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(batch_size=0), "batch_size"),
    (dict(batch_size=-3), "batch_size"),
    (dict(batch_size=4, shuffle="foo"), "shuffle.*foo"),
    (dict(batch_size=4, backend="bar"), "backend.*bar"),
    (dict(batch_size=4, valid="maybe"), "valid"),
    (dict(batch_size=4, valid_field="x"), "valid_field"),
    (dict(batch_size=4, output="jax"), "output"),
    (dict(batch_size=4, rank=2, world_size=2), "rank 2 .*world_size 2"),
    (dict(batch_size=4, rank=5, world_size=2), "rank 5"),
    (dict(batch_size=4, world_size=0), "world_size"),
    (dict(batch_size=4, stride=0, window=2), "stride"),
    (dict(batch_size=4, window=0), "window"),
    (dict(batch_size=4, window=13), "window"),
    (dict(batch_size=4, fields=["x", "nope"]), "nope"),
])
def test_bad_values_raise_value_error_naming_the_option(ds, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        stoker.Loader(ds, **kwargs)


@pytest.mark.parametrize("name,value", [
    ("batch_size", 2**32 + 5),
    ("world_size", 2**32 + 1),
    ("rank", 2**32),
    ("prefetch", 2**32 + 2),
    ("block_group", 2**32 + 16),
    ("queue_depth", 2**32 + 64),
    ("threads", 2**31),
    ("seed", 2**64 + 3),
    ("epoch", 2**64),
    ("window", 2**64 + 2),
    ("stride", 2**64 + 1),
])
def test_out_of_range_ints_are_refused_not_wrapped(ds, name, value):
    kwargs = {"batch_size": 4, name: value}
    with pytest.raises((ValueError, OverflowError), match=name):
        stoker.Loader(ds, **kwargs)


def test_unknown_field_lists_the_fields(ds):
    with pytest.raises(ValueError) as ei:
        stoker.Loader(ds, batch_size=4, fields=["z"])
    msg = str(ei.value)
    assert "'z'" in msg and "x" in msg and "y" in msg


def test_window_longer_than_every_record(ds):
    with pytest.raises(ValueError) as ei:
        stoker.Loader(ds, batch_size=4, window=13)
    msg = str(ei.value)
    assert "window" in msg and "13" in msg and "12" in msg
    # The longest record is just long enough for 12.
    with stoker.Loader(ds, batch_size=4, window=12) as ld:
        assert ld.counts()["epoch_samples"] == 1


def test_missing_dataset(tmp_path):
    with pytest.raises(FileNotFoundError) as ei:
        stoker.Loader(tmp_path / "nothing.stk", batch_size=4)
    assert "nothing.stk" in str(ei.value)


def test_not_a_dataset(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    with pytest.raises((FileNotFoundError, stoker.StokerError)) as ei:
        stoker.Loader(d, batch_size=4)
    assert "empty" in str(ei.value)


def corrupt(path, offset, count=4):
    shard = path / "shard-000000.stk"
    data = bytearray(shard.read_bytes())
    for i in range(offset, offset + count):
        data[i] ^= 0xFF
    shard.write_bytes(bytes(data))
    return shard


@pytest.mark.parametrize("offset", [0, 8, 16, 40])
def test_corrupt_shard_header(ds, offset):
    shard = corrupt(ds, offset)
    with pytest.raises(stoker.StokerError) as ei:
        with stoker.Loader(ds, batch_size=4, backend="pool") as ld:
            for _ in ld:
                pass
    err = ei.value
    assert isinstance(err, RuntimeError)
    assert len(err.args) == 2
    code, message = err.args
    assert isinstance(code, int) and code < 0
    assert isinstance(message, str)
    assert shard.name in message


def test_stoker_error_is_exported():
    assert stoker.StokerError is stoker._stoker.StokerError
    assert issubclass(stoker.StokerError, RuntimeError)
    assert "StokerError" in stoker.__all__


def assert_not_complete(path):
    """Opening `path` fails: no dataset, or an incomplete one."""
    if not os.path.exists(path):
        return
    assert not os.path.exists(os.path.join(path, "manifest.json"))
    with pytest.raises((FileNotFoundError, stoker.StokerError)) as ei:
        stoker.Loader(path, batch_size=1)
    assert "incomplete" in str(ei.value) or isinstance(ei.value, FileNotFoundError)


def test_write_dict_with_mismatched_lengths(tmp_path):
    path = tmp_path / "bad.stk"
    with pytest.raises(ValueError) as ei:
        stoker.write(path, {"a": np.zeros(3), "b": np.zeros((4, 2))})
    assert "first dimension" in str(ei.value) and "3" in str(ei.value)
    assert_not_complete(path)
    with pytest.raises(FileNotFoundError):
        stoker.Loader(path, batch_size=1)


def test_write_dict_with_a_scalar(tmp_path):
    path = tmp_path / "bad.stk"
    with pytest.raises(ValueError, match="first dimension"):
        stoker.write(path, {"a": np.zeros(3), "b": np.float32(1)})
    assert_not_complete(path)


def test_write_records_with_a_changing_field_set(tmp_path):
    path = tmp_path / "bad.stk"
    recs = [{"a": np.zeros(3), "b": np.int8(1)} for _ in range(5)]
    recs.append({"a": np.zeros(3), "c": np.int8(1)})
    with pytest.raises(ValueError) as ei:
        stoker.write(path, recs)
    msg = str(ei.value)
    assert "record 5" in msg and "'c'" in msg and "'b'" in msg
    assert_not_complete(path)
    with pytest.raises(stoker.StokerError) as ei:
        stoker.Loader(path, batch_size=1)
    assert "incomplete" in ei.value.args[1]


def test_write_records_with_a_changing_shape(tmp_path):
    path = tmp_path / "bad.stk"
    recs = [{"a": np.zeros(3)}, {"a": np.zeros(3)}, {"a": np.zeros(4)}]
    with pytest.raises((ValueError, stoker.StokerError)):
        stoker.write(path, recs)
    assert_not_complete(path)


def test_write_records_with_an_exception_in_the_source(tmp_path):
    path = tmp_path / "bad.stk"

    def source():
        for i in range(10):
            if i == 6:
                raise KeyError("the source broke")
            yield {"a": np.full(2, i)}

    with pytest.raises(KeyError, match="the source broke"):
        stoker.write(path, source())
    assert_not_complete(path)


@pytest.mark.parametrize("bad,pattern", [
    ({}, "no fields"),
    ({"a": np.array([["x", "y"]])}, "dtype"),  # (1-d strings are a string field)
    ({"a": np.zeros(3, dtype=">f4")}, "big-endian"),
    ({"a": np.zeros(3, dtype=object)}, "dtype"),
])
def test_write_bad_dict_sources(tmp_path, bad, pattern):
    path = tmp_path / "bad.stk"
    with pytest.raises(ValueError, match=pattern):
        stoker.write(path, bad)
    assert_not_complete(path)


def test_write_empty_iterable(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        stoker.write(tmp_path / "e.stk", iter([]))


def test_write_existing_dataset_needs_overwrite(tmp_path):
    path = tmp_path / "twice.stk"
    stoker.write(path, {"a": np.arange(4)})
    # (A StokerError with -EEXIST today; FileExistsError would do as well.)
    with pytest.raises((FileExistsError, stoker.StokerError)) as ei:
        stoker.write(path, {"a": np.arange(4)})
    assert "twice.stk" in str(ei.value) and "overwrite" in str(ei.value)
    if isinstance(ei.value, stoker.StokerError):
        assert ei.value.args[0] == -errno.EEXIST
    # The dataset is untouched.
    with stoker.Loader(path, batch_size=10, shuffle="sequential") as ld:
        np.testing.assert_array_equal(ld.next()["a"], np.arange(4))


def test_write_arrow_table(tmp_path):
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"a": np.arange(6, dtype=np.int64), "b": np.arange(6) * 0.5})
    path = tmp_path / "arrow.stk"
    try:
        n = stoker.write(path, table)
    except TypeError as e:
        assert "__arrow_c_stream__" in str(e) or "Arrow" in str(e)
        assert_not_complete(path)
        return
    # Arrow sources are supported by this version: then they must be right.
    assert n == 6
    with stoker.Loader(path, batch_size=6, shuffle="sequential") as ld:
        b = ld.next()
        np.testing.assert_array_equal(b["a"], np.arange(6))
        np.testing.assert_array_equal(b["b"], np.arange(6) * 0.5)


def test_state_and_epoch_errors(ds):
    with stoker.Loader(ds, batch_size=4) as ld:
        with pytest.raises(TypeError, match="epoch"):
            ld.set_epoch("1")
        with pytest.raises(ValueError, match="epoch"):
            ld.set_epoch(-1)


def test_one_hierarchy_of_errors(tmp_path):
    """Every error stoker raises for a reason of its own is a StokerError;
    its kinds are also the built-in exceptions callers already catch."""
    import stoker
    cases = []
    with pytest.raises(stoker.StokerError) as e1:
        stoker.Loader(tmp_path / "missing.stk", batch_size=4)
    cases.append(e1.value)
    assert isinstance(e1.value, FileNotFoundError) and isinstance(e1.value, stoker.NotFound)
    stoker.write(tmp_path / "d", {"x": np.zeros((4, 2), np.float32)})
    with pytest.raises(stoker.StokerError) as e2:
        stoker.Loader(tmp_path / "d", batch_size=0)
    assert isinstance(e2.value, ValueError) and isinstance(e2.value, stoker.InvalidArgument)
    with pytest.raises(stoker.StokerError) as e3:
        stoker.Loader(tmp_path / "d", batch_size=2, fields=["nope"])
    assert isinstance(e3.value, ValueError)
    cases += [e2.value, e3.value]
    for e in cases:
        assert str(e) == e.message and e.message and isinstance(e.code, int)
        assert "(" not in str(e)[:1]  # the message itself, not a tuple
    # A damaged shard is a plain StokerError naming the file.
    shard = next(p for p in (tmp_path / "d").iterdir() if p.suffix == ".stk")
    raw = bytearray(shard.read_bytes())
    raw[-40] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(stoker.StokerError) as e4:
        with stoker.Loader(tmp_path / "d", batch_size=4, shuffle="sequential") as ld:
            list(ld)
    assert str(shard.name) in str(e4.value) or "shard" in str(e4.value)
