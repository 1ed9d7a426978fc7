"""What a user is told when the path is not something stoker reads: a URL of
another scheme, a Parquet, .npy, WAV or HDF5 file or folder given where a
dataset goes, files of two kinds given to one index, a server that refuses
connections or speaks plain HTTP to https://; each from Python and from the
command line, naming what to do instead."""
import http.server
import socket
import subprocess
import sys
import threading
import wave

import numpy as np
import pytest

import stoker
from conftest import stoker_exe


def cli(*args, cwd=None, timeout=60):
    return subprocess.run([str(stoker_exe()), *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


READ = "these are: s3://, http://, https://, local paths"


@pytest.mark.parametrize("url", ["gs://bucket/ds", "az://container/ds",
                                 "abfs://c@acct.dfs.core.windows.net/ds", "hdfs://namenode/ds",
                                 "ftp://host/ds", "file:///tmp/ds"],
                         ids=lambda u: u.split(":")[0])
def test_another_scheme_is_refused_naming_those_read(url, tmp_path):
    said = f"{url.split('://')[0]}:// is not supported"
    for call in (lambda: stoker.Loader(url, 4), lambda: stoker.index(url, tmp_path / "x.idx")):
        with pytest.raises(stoker.InvalidArgument) as e:
            call()
        assert said in str(e.value) and READ in str(e.value), e.value
    for cmd in (["read", url], ["inspect", url], ["verify", url],
                ["index", url, "-o", tmp_path / "x.idx"]):
        r = cli(*cmd)
        assert r.returncode == 2, (cmd, r.stderr)
        assert said in r.stderr and READ in r.stderr, (cmd, r.stderr)
        assert "No such file" not in r.stderr


def test_gcs_is_told_how_to_read_it_through_s3():
    with pytest.raises(stoker.InvalidArgument) as e:
        stoker.Loader("gs://bucket/ds", 4)
    msg = str(e.value)
    assert "AWS_ENDPOINT_URL=https://storage.googleapis.com" in msg, msg
    assert "HMAC" in msg and "AWS_ACCESS_KEY_ID" in msg and "AWS_SECRET_ACCESS_KEY" in msg, msg
    assert "s3://BUCKET/PATH" in msg, msg


def test_a_directory_named_like_a_url_is_still_opened(tmp_path, monkeypatch):
    """"gs://b/ds" on disk is the directory gs:/b/ds: opened as what it is."""
    monkeypatch.chdir(tmp_path)
    stoker.write("gs:/b/ds", {"x": np.arange(10, dtype=np.int32)})
    with stoker.Loader("gs://b/ds", 10) as ld:
        assert np.array_equal(np.sort(np.asarray(next(iter(ld))["x"])), np.arange(10))


def wav(path, frames=100):
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(np.zeros(frames, np.int16).tobytes())
    return path


@pytest.fixture
def foreign(tmp_path):
    """Files of each kind stoker packs or indexes, alone and in folders."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    t = pa.table({"a": np.arange(10), "b": np.arange(10.0)})
    (tmp_path / "pq").mkdir()
    pq.write_table(t, tmp_path / "x.parquet")
    pq.write_table(t, tmp_path / "pq" / "part-0.parquet")
    pq.write_table(t, tmp_path / "pq" / "part-1.parquet")
    (tmp_path / "series").mkdir()
    np.save(tmp_path / "a.npy", np.zeros((4, 3), np.float32))
    for i in range(2):
        np.save(tmp_path / "series" / f"s{i}.npy", np.zeros((5, 3), np.float32))
    for i in range(3):
        wav(tmp_path / "clips" / f"c{i}.wav")
    wav(tmp_path / "a.wav")
    (tmp_path / "a.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(200))
    return tmp_path


@pytest.mark.parametrize("name,said,command", [
    ("x.parquet", "this is a Parquet file", "stoker pack --from parquet x.parquet"),
    ("pq", "this is a folder of Parquet files (2)", "stoker pack --from parquet pq"),
    ("a.npy", "this is a .npy file", "stoker index a.npy"),
    ("series", "this is a folder of .npy files (2)", "stoker index series"),
    ("a.wav", "this is a WAV file", "stoker index a.wav"),
    ("clips", "this is a folder of WAV files (3)", "stoker index clips"),
    ("a.h5", "this is an HDF5 file", "stoker index a.h5"),
])
def test_data_files_opened_as_a_dataset_say_how_to_make_one(foreign, monkeypatch, name, said,
                                                            command):
    monkeypatch.chdir(foreign)
    with pytest.raises(stoker.InvalidArgument) as e:
        stoker.Loader(name, 4)
    msg = str(e.value)
    assert msg.startswith(f"{name}: {said}, not a stoker dataset"), msg
    assert command in msg and "JSON" not in msg, msg
    if "Parquet" in said:
        assert f'stoker.write("DATASET", stoker.parquet("{name}"))' in msg, msg
    else:
        assert f'stoker.index("{name}",' in msg, msg
    for cmd in ("read", "inspect", "verify"):
        r = cli(cmd, name, cwd=foreign)
        assert r.returncode == 2 and said in r.stderr and command in r.stderr, (cmd, r.stderr)


def test_the_advice_for_a_parquet_folder_works(foreign, monkeypatch):
    """What the message says to run makes a dataset that opens."""
    monkeypatch.chdir(foreign)
    stoker.write("DATASET", stoker.parquet("pq"))
    with stoker.Loader("DATASET", 20, shuffle="sequential") as ld:
        assert sorted(np.asarray(next(iter(ld))["a"]).tolist()) == sorted(list(range(10)) * 2)


def test_an_index_of_two_kinds_is_refused_listing_what_would_be_left_out(foreign):
    out = foreign / "mix.idx"
    r = cli("index", "clips/", "series/", "-o", out, cwd=foreign)
    assert r.returncode == 2, r.stdout + r.stderr
    for part in ("files of two kinds", "3 wav files", "2 npy files",
                 "series/s0.npy, series/s1.npy", "--from wav"):
        assert part in r.stderr, r.stderr
    assert not out.exists()
    # Named files alike, and from Python.
    r = cli("index", "a.wav", "a.npy", "-o", out, cwd=foreign)
    assert r.returncode == 2 and "1 npy file (a.npy)" in r.stderr, r.stderr
    with pytest.raises(stoker.InvalidArgument) as e:
        stoker.index([foreign / "clips", foreign / "series"], out)
    assert "files of two kinds" in str(e.value) and "s1.npy" in str(e.value), e.value
    assert not out.exists()
    # One kind asked for: the others are left out as asked.
    assert stoker.index([foreign / "clips", foreign / "series"], out, source="wav") == 3
    # Each kind in an index of its own.
    assert stoker.index(foreign / "series", foreign / "series.idx") == 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


OPEN = """
import sys, stoker
try:
    stoker.Loader(sys.argv[1], 4, cache_dir=sys.argv[2])
except stoker.StokerError as e:
    print(type(e).__name__, e.code, e)
"""


def open_in_child(url, tmp_path):
    """Opens url in a child process, which must end well within the
    timeout: (exception name, code, message)."""
    p = subprocess.run([sys.executable, "-c", OPEN, url, str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    name, code, msg = p.stdout.strip().split(" ", 2)
    return name, int(code), msg


def test_a_port_nothing_listens_on_fails_after_a_few_tries(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/ds"
    name, code, msg = open_in_child(url, tmp_path)
    assert name == "ConnectionRefused" and code == -111, (name, code, msg)
    assert "cannot connect" in msg and f"port {port}" in msg and "after 4 attempts" in msg, msg
    assert issubclass(stoker.ConnectionRefused, ConnectionRefusedError)
    assert issubclass(stoker.ConnectionRefused, stoker.RemoteError)
    r = cli("inspect", url, "--cache-dir", tmp_path / "c")
    assert r.returncode == 2 and "cannot connect" in r.stderr and "4 attempts" in r.stderr, r.stderr


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def test_https_to_a_plain_http_server_is_a_tls_error_at_once(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/ds"
        name, code, msg = open_in_child(url, tmp_path)
        assert name == "TLSError" and "TLS failed" in msg and "not retried" in msg, msg
        r = cli("read", url, "--cache-dir", tmp_path / "c")
        assert r.returncode == 2 and "TLS failed" in r.stderr and "attempts" not in r.stderr
    finally:
        server.shutdown()
        server.server_close()
