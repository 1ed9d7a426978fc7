"""What a new user's first minutes do with the installed wheel, in a root
file system that has no compiler and none of stoker's libraries: pack a
Parquet folder, a dict of arrays and a folder of WAV files, index an HDF5
file, read each back in every order and compare the values, verify, ask
the doctor, feed a DataLoader with two workers, and check that stoker
loads nothing outside the wheel but glibc (run by scripts/wheel-check.sh
inside the root, with the venv's python; prints one line per check)."""
import os
import subprocess
import sys
import tempfile
import wave

import numpy as np


def maps():
    """The shared objects this process has mapped."""
    with open("/proc/self/maps") as f:
        return {line.split()[-1] for line in f if ".so" in line.split()[-1]}


GLIBC = ("libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "ld-linux")


def check_maps(before, when):
    """What stoker added to the process: its own files only, and glibc."""
    site = os.path.dirname(os.path.dirname(__import__("stoker").__file__))
    extra = sorted(p for p in maps() - before
                   if not p.startswith(os.path.join(site, "stoker") + os.sep)
                   and not any(g in os.path.basename(p) for g in GLIBC))
    assert not extra, f"{when}: stoker loaded {extra}"
    print(f"ok: {when}: nothing loaded outside the wheel and glibc")


def cli(*args, **kw):
    exe = os.path.join(os.path.dirname(sys.executable), "stoker")
    p = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, **kw)
    assert p.returncode == 0, (args, p.returncode, p.stderr)
    return p.stdout + p.stderr


def every_order(path, field, want, **kw):
    """Every record of `path`, in each order, equals `want` (rows)."""
    import stoker
    for shuffle in ("sequential", "random", "block"):
        with stoker.Loader(path, batch_size=7, shuffle=shuffle, seed=3, **kw) as ld:
            got = [np.asarray(r) for b in ld for r in np.asarray(b[field])]
        assert len(got) == len(want), (path, shuffle, len(got), len(want))
        if shuffle == "sequential":
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)
        else:
            key = lambda a: a.tobytes()  # noqa: E731
            assert sorted(map(key, got)) == sorted(map(key, want)), (path, shuffle)
    print(f"ok: {os.path.basename(path)}: {len(want)} records equal in 3 orders")


def main():
    before = maps()  # numpy and the interpreter's own
    import stoker
    check_maps(before, "import stoker")
    tmp = tempfile.mkdtemp()
    rng = np.random.default_rng(0)

    # A dict of arrays.
    x = rng.standard_normal((500, 16)).astype(np.float32)
    stoker.write(f"{tmp}/dict.stk", {"x": x, "y": np.arange(500, dtype=np.int64)})
    every_order(f"{tmp}/dict.stk", "x", list(x))

    # A folder of Parquet files, through the command line.
    import pyarrow as pa
    import pyarrow.parquet as pq
    os.makedirs(f"{tmp}/pq")
    rows = []
    for f in range(4):
        a = rng.standard_normal(250).astype(np.float32)
        b = np.arange(f * 250, (f + 1) * 250, dtype=np.int64)
        pq.write_table(pa.table({"a": a, "b": b}), f"{tmp}/pq/part-{f}.parquet")
        rows += [np.array([v], np.float32) for v in a]
    cli("pack", "--from", "parquet", f"{tmp}/pq", "--field", "a=a", "-o", f"{tmp}/pq.stk", "-q")
    every_order(f"{tmp}/pq.stk", "a", rows)

    # A folder of WAV files, indexed in place.
    os.makedirs(f"{tmp}/wav")
    clips = []
    for i in range(6):
        pcm = (rng.standard_normal(1600) * 3000).astype("<i2")
        with wave.open(f"{tmp}/wav/clip{i}.wav", "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(pcm.tobytes())
        clips.append(pcm.reshape(-1, 1))
    stoker.index(f"{tmp}/wav", f"{tmp}/wav.idx")
    # (A record is a frame; the clips follow one another in name order.)
    with stoker.Loader(f"{tmp}/wav.idx", batch_size=400, shuffle="sequential") as ld:
        got = np.concatenate([np.asarray(b[next(iter(b.keys()))]) for b in ld])
    np.testing.assert_array_equal(got.reshape(-1), np.concatenate(clips).reshape(-1))
    print(f"ok: wav: {len(clips)} clips, {len(got)} frames equal")

    # An HDF5 file, indexed in place through h5py's libhdf5.
    import h5py
    h = rng.integers(-999, 999, (300, 8)).astype(np.int32)
    with h5py.File(f"{tmp}/s.h5", "w") as f:
        f.create_dataset("d", data=h, chunks=(32, 8), compression="gzip", shuffle=True)
    stoker.index(f"{tmp}/s.h5", f"{tmp}/h5.idx", dataset="d")
    every_order(f"{tmp}/h5.idx", "data", list(h))

    # No libcurl in this root: a remote dataset is refused saying what to
    # install, and the process goes on.
    have_curl = any(os.path.exists(f"{d}/libcurl.so.4")
                    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"))
    if not have_curl:
        try:
            stoker.Loader("s3://bucket/ds", batch_size=4, cache_dir=f"{tmp}/cache")
            raise AssertionError("a remote dataset opened without libcurl")
        except stoker.StokerError as e:
            said = str(e)
        assert "needs libcurl" in said and "apt-get install libcurl4" in said, said
        print("ok: without libcurl, s3:// says:", said[:90], "...")

    # The CUDA plugin is in the x86_64 wheel, loaded only when asked: with
    # no NVIDIA driver here, gpu_status says that is why.
    # (A build from the sdist without nvcc has none, and says so.)
    n, why = stoker.gpu_status()
    plugin = os.path.join(os.path.dirname(stoker.__file__), "libstoker_cuda.so")
    if os.path.exists(plugin):
        assert n == 0 and "libcuda.so.1" in why and "driver" in why, why
    else:
        assert os.uname().machine != "x86_64" or os.environ.get("STK_CHECK_SDIST"), plugin
        assert n == 0 and "without CUDA support" in why, why
    print("ok: gpu_status:", why)

    out = cli("verify", f"{tmp}/dict.stk")
    assert "intact" in out, out
    print("ok: stoker verify:", out.strip().splitlines()[-1])
    print("ok: stoker --version:", cli("--version").strip())
    out = cli("doctor", f"{tmp}/dict.stk", "--max-batches", "20", "--step-ms", "1")
    assert "input-bound" in out or "compute-bound" in out or "balanced" in out, out
    print("ok: stoker doctor:", [ln for ln in out.splitlines() if "bound" in ln or
                                 "balanced" in ln][0].strip())

    # A DataLoader with two workers (not in the emulated smoke run).
    if os.environ.get("STK_CHECK_SMOKE"):
        print("skipped: torch (a smoke run: under emulation, or no CPU build of torch here)")
        return
    import torch
    import stoker.torch as st
    ds = st.Dataset(f"{tmp}/dict.stk", batch_size=10, shuffle="random", seed=1)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    ys = sorted(int(v) for b in dl for v in b["y"])
    assert ys == list(range(500)), ys[:10]
    print("ok: DataLoader, 2 workers: 500 records, each once")
    # After the loaders ran, the interpreter's own modules (the DataLoader's
    # multiprocessing, torch's and pyarrow's imports) are mapped too: what
    # must not be is any library stoker could have needed from the system.
    theirs = ("libzstd", "liburing", "libxxhash", "libjansson", "libcurl", "libhdf5",
              "libstoker")
    site = os.path.dirname(os.path.dirname(stoker.__file__))
    bad = sorted(p for p in maps() if any(t in os.path.basename(p) for t in theirs)
                 and not p.startswith(os.path.join(site, "stoker") + os.sep)
                 and not p.startswith(os.path.join(site, "h5py.libs") + os.sep))
    assert not bad, f"after loaders ran: {bad}"
    print("ok: after loaders ran: no zstd, liburing, xxHash, Jansson, libcurl or libhdf5 "
          "from the system")


if __name__ == "__main__":
    main()
