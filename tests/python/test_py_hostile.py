"""Hostile inputs and careless neighbours (the writer's side): records that
do not match the schema, planted symlinks, foreign files, two writers."""
import os
import subprocess
import sys

import numpy as np
import pytest

import stoker
from stoker import _stoker


def opens_incomplete(path):
    with pytest.raises(stoker.StokerError) as ei:
        stoker.Loader(path, batch_size=1)
    return "incomplete" in str(ei.value) or "not a stoker dataset" in str(ei.value)


@pytest.mark.parametrize("bad, words", [
    ({"x": np.zeros((2, 2), np.float32)}, ["record 2", "'x'", "(2, 2)", "(*, 3)"]),
    ({"x": np.zeros((2, 3), np.float64)}, ["record 2", "'x'", "float64", "float32"]),
    ({"x": np.zeros((2, 3, 1), np.float32)}, ["record 2", "'x'", "shape"]),
])
def test_iterable_records_that_differ_from_the_first_are_refused(tmp_path, bad, words):
    recs = [{"x": np.ones((4, 3), np.float32), "y": np.int64(1)},
            {"x": np.ones((5, 3), np.float32), "y": np.int64(2)},
            {**bad, "y": np.int64(3)}]
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "d", iter(recs))
    for w in words:
        assert w in str(ei.value), str(ei.value)
    assert opens_incomplete(tmp_path / "d")


def test_fixed_fields_refuse_a_short_record(tmp_path):
    recs = [{"v": np.arange(8, dtype=np.int32)}, {"v": np.arange(8, dtype=np.int32)},
            {"v": np.arange(5, dtype=np.int32)}]
    with pytest.raises(ValueError) as ei:
        stoker.write(tmp_path / "d", recs, ragged=[])
    assert "record 2" in str(ei.value) and "'v'" in str(ei.value)


def test_the_writer_never_reads_past_a_value(tmp_path):
    """The raw Writer: a value far smaller than its rows say is refused,
    not read past (this crashed the process)."""
    w = _stoker.Writer(str(tmp_path / "d"), [("x", "f32", (-1, 1024), "none", 0)], 1 << 20, 64,
                       False, False, None)
    w.append([(np.zeros((4, 1024), np.float32), 4)])
    with pytest.raises(ValueError) as ei:
        w.append([(np.zeros(3, np.float32), 1 << 20)])
    assert "record 1" in str(ei.value) and "'x'" in str(ei.value)
    w.abort()
