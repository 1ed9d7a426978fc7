"""A batch that does not fit its Arrow stream's schema is refused, never
read by the schema as garbage: stoker.write checks a pyarrow reader's
batches (names and types), and the C writer checks every batch any stream
gives (columns, buffers, children, lengths, offsets, validity bitmaps)
before reading a row of it.  The C checks are driven through streams made
by hand (arrowc.HandStream), which give what no pyarrow reader would."""
import ctypes

import numpy as np
import pyarrow as pa
import pytest

import stoker
from arrowc import HandStream, child, point_buffer


def records_of(path):
    with stoker.Loader(path, batch_size=1, shuffle="sequential") as ld:
        return [{k: np.array(v) for k, v in b.items()} for b in ld]


def assert_incomplete(path):
    with pytest.raises(Exception) as ei:
        stoker.Loader(path, batch_size=1)
    assert "incomplete" in str(ei.value)


def refused(path, stream, *words, **kw):
    with pytest.raises(ValueError) as ei:
        stoker.write(path, stream, progress=False, **kw)
    msg = str(ei.value)
    for w in (str(path),) + words:
        assert w in msg, msg
    assert_incomplete(path)
    return msg


SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.float32())])


def good(n, start=0):
    return pa.record_batch({"a": pa.array(np.arange(start, start + n), pa.int64()),
                            "b": pa.array(np.arange(start, start + n) + 0.5, pa.float32())})


# ---- pyarrow readers: the types, which a C stream does not carry ----

@pytest.mark.parametrize("progress", [False, True])
def test_a_reader_batch_of_other_types_is_refused_by_its_number(tmp_path, progress):
    other = pa.record_batch({"a": pa.array([4, 5], pa.int32()),
                             "b": pa.array([4.5, 5.5], pa.float64())})
    reader = pa.RecordBatchReader.from_batches(SCHEMA, [good(3), other])
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "d", reader, progress=progress)
    msg = str(ei.value)
    for w in (str(tmp_path / "d"), "batch 1", "rows from 3", "'a'", "int32", "int64"):
        assert w in msg, msg
    assert_incomplete(tmp_path / "d")


def test_a_reader_batch_with_columns_swapped_is_refused(tmp_path):
    schema = pa.schema([("a", pa.float32()), ("b", pa.float32())])
    first = pa.record_batch({"a": pa.array([1.0], pa.float32()),
                             "b": pa.array([2.0], pa.float32())})
    swapped = pa.record_batch({"b": pa.array([3.0], pa.float32()),
                               "a": pa.array([4.0], pa.float32())})
    reader = pa.RecordBatchReader.from_batches(schema, [first, swapped])
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "d", reader, progress=False)
    assert "batch 1" in str(ei.value) and "'b'" in str(ei.value)


def test_a_reader_batch_differing_only_in_nullability_is_packed(tmp_path):
    strict = pa.schema([pa.field("a", pa.int64(), nullable=False), ("b", pa.float32())])
    reader = pa.RecordBatchReader.from_batches(strict, [good(2), good(3, 2)])
    assert stoker.write(tmp_path / "d", reader, progress=False) == 5
    assert [int(r["a"][0]) for r in records_of(tmp_path / "d")] == [0, 1, 2, 3, 4]


# ---- any C stream: what the arrays' layout shows ----

def test_hand_built_stream_of_fitting_batches_is_packed_as_pyarrow_holds_it(tmp_path):
    """The checks refuse nothing sound: sliced columns, nulls with their
    bitmap, lists, list views, fixed-size lists, string views (inline and
    not), dictionaries."""
    n = 12
    t = pa.table({
        "f": pa.array([None if i % 4 == 1 else i * 0.25 for i in range(n)], pa.float64()),
        "l": pa.array([list(range(i % 3)) for i in range(n)], pa.list_(pa.int32())),
        "lv": pa.array([[i, i + 1] for i in range(n)], pa.list_view(pa.int16())),
        "w": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(3 * n, dtype=np.float32)), 3),
        "s": pa.array([("x" * (i * 2)) for i in range(n)], pa.string_view()),
        "d": pa.array(["lo", "hi", "lo"] * (n // 3)).dictionary_encode(),
    })
    batches = [t.slice(0, 5).to_batches()[0], t.slice(5, 7).to_batches()[0]]
    assert batches[1].column(0).offset == 5  # sliced, not copied
    with HandStream(t.schema, batches) as s:
        assert stoker.write(tmp_path / "d", s, progress=False) == n
    recs = records_of(tmp_path / "d")
    assert len(recs) == n
    for i, r in enumerate(recs):
        want = t["f"][i].as_py()
        assert (np.isnan(r["f"][0]) if want is None else r["f"][0] == want)
        np.testing.assert_array_equal(r["l"], t["l"][i].as_py())
        np.testing.assert_array_equal(r["lv"], t["lv"][i].as_py())
        np.testing.assert_array_equal(r["w"][0], t["w"][i].as_py())
        assert r["s"][0] == t["s"][i].as_py()
        assert r["d"][0] == t["d"][i].as_py()


def test_a_batch_with_a_column_missing_is_refused_by_its_number(tmp_path):
    short = pa.record_batch({"a": pa.array([9], pa.int64())})
    with HandStream(SCHEMA, [good(3), short]) as s:
        refused(tmp_path / "d", s, "batch 1", "rows from 3", "1 columns", "has 2")


def test_a_batch_of_another_layout_is_refused_naming_the_column(tmp_path):
    schema = pa.schema([("a", pa.int64()), ("s", pa.string())])
    first = pa.record_batch({"a": pa.array([1], pa.int64()), "s": pa.array(["x"])})
    other = pa.record_batch({"a": pa.array([2], pa.int64()), "s": pa.array([7], pa.int64())})
    with HandStream(schema, [first, other]) as s:
        refused(tmp_path / "d", s, "batch 1", "column 's'", "2 buffers", "3")


def test_a_fixed_size_list_narrower_than_the_schema_is_refused(tmp_path):
    schema = pa.schema([("w", pa.list_(pa.float32(), 4))])
    wide = pa.record_batch({"w": pa.FixedSizeListArray.from_arrays(
        pa.array(np.zeros(8, np.float32)), 4)})
    narrow = pa.record_batch({"w": pa.FixedSizeListArray.from_arrays(
        pa.array(np.ones(6, np.float32)), 2)})
    with HandStream(schema, [wide, narrow]) as s:
        refused(tmp_path / "d", s, "batch 1", "column 'w'", "6 elements", "3 rows of 4")


def list_batch(rows):
    return pa.record_batch({"l": pa.array(rows, pa.list_(pa.int32()))})


@pytest.mark.parametrize("offsets, words", [
    ([0, 2, 99], ["reach 99", "3 elements"]),
    ([0, 3, 1], ["offset 2", "must not decrease"]),
])
def test_list_offsets_outside_the_child_are_refused(tmp_path, offsets, words):
    def alter(s, i, a):
        if i == 1:
            point_buffer(s, child(a, 0), 1, np.array(offsets, np.int32))
    with HandStream(list_batch([[0]]).schema, [list_batch([[1, 2]]), list_batch([[1, 2], [3]])],
                    alter) as s:
        refused(tmp_path / "d", s, "batch 1", "column 'l'", *words)


def test_string_offsets_that_decrease_are_refused(tmp_path):
    def alter(s, i, a):
        if i == 0:
            point_buffer(s, child(a, 0), 1, np.array([0, 5, 2], np.int32))
    b = pa.record_batch({"s": pa.array(["ab", "cde"])})
    with HandStream(b.schema, [b], alter) as s:
        refused(tmp_path / "d", s, "batch 0", "column 's'", "must not decrease")


def test_nulls_counted_without_a_validity_bitmap_are_refused(tmp_path):
    """Read as they lay, the null's slot would be packed as a number (0.0)
    where the column says null (NaN)."""
    def alter(s, i, a):
        if i == 1:
            child(a, 0).buffers[0] = None
    b = pa.record_batch({"f": pa.array([1.0, None, 3.0])})
    with HandStream(b.schema, [pa.record_batch({"f": pa.array([0.5])}), b], alter) as s:
        refused(tmp_path / "d", s, "batch 1", "column 'f'", "1 nulls", "no validity bitmap")


def test_a_column_shorter_than_its_batch_is_refused(tmp_path):
    def alter(s, i, a):
        if i == 0:
            child(a, 1).length = 1
    with HandStream(SCHEMA, [good(3)], alter) as s:
        refused(tmp_path / "d", s, "batch 0", "column 'b'", "1 rows", "3")


def test_a_string_view_past_its_data_buffer_is_refused(tmp_path):
    def alter(s, i, a):
        if i == 0:
            views = np.frombuffer(ctypes.string_at(child(a, 0).buffers[1], 16), np.uint8).copy()
            views[8:12] = np.frombuffer(np.int32(3).tobytes(), np.uint8)  # buffer 3 of 1
            point_buffer(s, child(a, 0), 1, views)
    b = pa.record_batch({"s": pa.array(["a string longer than twelve"], pa.string_view())})
    with HandStream(b.schema, [b], alter) as s:
        refused(tmp_path / "d", s, "batch 0", "column 's'", "data buffer 3 of 1")


def test_a_dictionary_column_without_its_dictionary_is_refused(tmp_path):
    def alter(s, i, a):
        if i == 0:
            child(a, 0).dictionary = None
    b = pa.record_batch({"d": pa.array(["x", "y"]).dictionary_encode()})
    with HandStream(b.schema, [b], alter) as s:
        refused(tmp_path / "d", s, "batch 0", "column 'd'", "no dictionary")


def test_a_refused_batch_leaves_what_was_written_to_resume(tmp_path):
    """The records before the refused batch stay on disk (the dataset is
    incomplete, never complete and partial), and a resumed write of the
    mended stream completes it with every record."""
    path = tmp_path / "d"
    first = [good(400, k * 400) for k in range(3)]
    bad = pa.record_batch({"a": pa.array([0], pa.int64())})
    with HandStream(SCHEMA, first + [bad]) as s:
        refused(path, s, "batch 3", "rows from 1200", shard_bytes=4096)
    assert any(p.suffix == ".stk" for p in path.iterdir())
    with HandStream(SCHEMA, first + [good(50, 1200)]) as s:
        assert stoker.write(path, s, progress=False, resume=True, shard_bytes=4096) == 1250
    got = records_of(path)
    assert [int(r["a"][0]) for r in got] == list(range(1250))
    assert [float(r["b"][0]) for r in got] == [i + 0.5 for i in range(1250)]
