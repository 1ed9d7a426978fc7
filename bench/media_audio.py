"""Audio decoded by the loader (issue 38): 4 s random windows (64,000 frames
at 16 kHz) of speech clips, float32 [64, 64000, 1] batches, one epoch in
random order, clips/s and seconds of audio/s, FLAC and MP3, against the
loaders users write or pick for this and against the decoders' own rate.

The data (made once under bench/out/media_audio/<mode>-<clips>/, untimed,
from a fixed seed): speech-like clips of 2-20 s, as speech corpora hold
(LibriSpeech's utterances are mostly 10-16 s): espeak-ng speaking English
sentences with one of several voices, speeds and pitches, resampled to
16 kHz mono, with background noise (pink-ish hiss and a low hum, 20-40 dB
below the speech) and the speech's level varied.  Each clip is encoded
twice: FLAC (sox, compression level 5, 16 bit) and MP3 (ffmpeg's
libmp3lame, 32 kbit/s CBR: 16 kHz is MPEG-2 layer III).  One sub-folder a
voice, the voice's number the label.  Packed for stoker with
stoker.write(fields={"audio": stoker.Audio()}), the files' bytes as they
are.

Contenders, each in a process of its own, every one in each repetition in
a rotating order, page cache warm, one thread or worker per core:

    stoker                   stoker.Loader over the packed dataset, decode=
                             DecodeAudio(64000, sample_rate=16000,
                             random_offset=True), shuffle="random",
                             threads=cores
    stoker in place          the same over stoker.index(folder)
    soundfile, window        a torch Dataset that opens the file with
                             soundfile, draws a start where a whole window
                             fits, seeks there and reads only the window;
                             DataLoader(num_workers=cores), persistent workers
    soundfile, whole file    the same Dataset reading the whole clip, then
                             slicing the window (the naive way)
    torchcodec               AudioDecoder(file).get_samples_played_in_range
                             over the window, in the same DataLoader
    torchaudio               where its PyPI wheel loads with torch's CPU
                             build (torchaudio.load(frame_offset, num_frames))
    DALI (CPU)               fn.readers.file, fn.decoders.audio (CPU, mono),
                             fn.slice of a random window padded with zeros;
                             num_threads=cores, no GPU
    decode limit             bench/flac_limit.c (libFLAC) / bench/mp3_limit.c
                             (mpg123): every file decoded whole from memory on
                             cores threads: the full-decode rate; and the
                             same programs seeking to a random 4 s window and
                             decoding only it: the window limit

Each loader makes a few warm-up batches, then whole epochs are timed until
at least --min-seconds (3 s) have passed, so that a fast loader's short
epoch is not lost in the noise of a shared machine (DALI, whose reader
runs on across epochs, makes as many batches as an epoch holds, as often).
Windows shorter than 4 s (clips under 4 s) are padded with zeros by every
contender.  Besides clips/s, each contender's CPU time a clip is measured
(its process's threads and its DataLoader workers): on a machine whose
cores other work shares, clips/s follows that work, CPU time far less.

    python bench/media_audio.py [--full] [--clips N] [--reps R] [--profile]

Quick mode (the default): 640 clips, 3 repetitions; --full: 4,000 clips, 5
repetitions.  --profile adds the time of stoker's decode of one window
(DecodeAudio.decode, one thread) against the window limit on one thread.
Writes the "media_audio" section of docs/BENCHMARKS.md.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (BUILD, OUT, ROOT, child_result, machine, median, tree_cpu,  # noqa: E402
                    write_section)

CORES = len(os.sched_getaffinity(0))
RATE = 16000
WINDOW = 64000  # 4 s at 16 kHz
BATCH = 64
GEN_VERSION = 1  # bump when the clips made change, so old data is remade
FORMATS = ("flac", "mp3")
LIMIT = {"flac": BUILD / "flac_limit", "mp3": BUILD / "mp3_limit"}
LIMIT_SRC = {"flac": ("flac_limit.c", "flac"), "mp3": ("mp3_limit.c", "libmpg123")}
LOADERS = ["stoker", "stoker in place", "soundfile, window", "soundfile, whole file",
           "torchcodec", "torchaudio", "DALI (CPU)"]

# ---- the clips ----------------------------------------------------------------

SENTENCES = [
    "The river rose three feet overnight and covered the lower road.",
    "Please leave the keys on the table by the front door.",
    "She counted the boxes twice before she signed for the delivery.",
    "A cold wind came down from the hills just after sunset.",
    "We will meet at the station at half past nine tomorrow morning.",
    "The old clock in the hall stopped working during the storm.",
    "He painted the fence green because the hardware store had no white left.",
    "Most of the apples on the lower branches were eaten by deer.",
    "The train to the coast was delayed by almost an hour.",
    "Nobody noticed that the lights in the garden had been left on.",
    "Her brother learned to play the violin when he was seven.",
    "The committee will publish its report at the end of the month.",
    "Fresh bread is baked every morning in the shop on the corner.",
    "They walked along the beach until the tide began to turn.",
    "The children built a small bridge of stones across the stream.",
    "If the weather holds, the harvest should be finished by Friday.",
    "The letter arrived three weeks after it had been posted.",
    "A small boat drifted slowly past the harbour wall.",
    "He forgot his umbrella and came home soaked to the skin.",
    "The museum opens at ten and closes early on Sundays.",
    "Every winter the lake freezes hard enough to walk across.",
    "The doctor asked him to come back in two weeks for another test.",
    "Our neighbours keep bees at the bottom of their garden.",
    "The road was closed for repairs, so we took the longer way round.",
    "She wrote the numbers down in a small notebook she always carried.",
    "The library has more than a million books and old maps.",
    "Thick fog lay over the valley until almost midday.",
    "The engine made a strange noise whenever the car went uphill.",
    "They planted forty young oak trees along the edge of the field.",
    "At the end of the concert the audience stood and cheered.",
    "The recipe calls for two eggs, a cup of flour and a pinch of salt.",
    "He has lived in the same small house for over fifty years.",
    "The bus stops outside the school every twenty minutes.",
    "A family of foxes has made its den under the garden shed.",
    "The ship carried grain, timber and wool to ports along the coast.",
    "We heard thunder in the distance but the rain never came.",
    "The new bridge will carry both trains and cars across the river.",
    "She measured the room carefully before ordering the carpet.",
    "The farmer moved his sheep to higher ground before the flood.",
    "Light from the lamp fell across the pages of an open book.",
    "The meeting ran late and most people missed the last train home.",
    "His grandmother taught him how to mend nets and read the weather.",
    "The price of coal rose sharply during the long cold winter.",
    "Two swans landed on the pond and glided towards the reeds.",
    "The students were asked to describe the experiment in their own words.",
    "After the rain the streets smelled of wet stone and cut grass.",
]
# espeak-ng voices: language variant + voice variant (no MBROLA voices).
VOICES = ["en-us", "en-us+f3", "en-gb+m3", "en-gb-x-rp+f2", "en-gb-scotland+m1",
          "en-029+f4", "en-gb-x-gbclan+m5", "en-us+f5"]


def clip_spec(rng):
    """Length, voice, speed, pitch and noise of one clip."""
    return {"seconds": float(np.clip(rng.normal(11.0, 4.5), 2.0, 20.0)),
            "voice": int(rng.integers(len(VOICES))), "wpm": int(rng.integers(130, 196)),
            "pitch": int(rng.integers(25, 76)), "snr_db": float(rng.uniform(20, 40)),
            "peak_db": float(rng.uniform(-12, -2)), "first": int(rng.integers(len(SENTENCES)))}


def speech(rng, s, tmp):
    """float64 mono at RATE: espeak-ng speaking sentences for s["seconds"],
    with noise added."""
    import soundfile as sf
    from scipy.signal import resample_poly
    words, k, text = 0, s["first"], []
    while words * 60 / s["wpm"] < s["seconds"] + 1.5:
        text.append(SENTENCES[k % len(SENTENCES)])
        words += len(text[-1].split())
        k += int(rng.integers(1, 7))
    wav = Path(tmp) / "s.wav"
    subprocess.run(["espeak-ng", "-v", VOICES[s["voice"]], "-s", str(s["wpm"]), "-p",
                    str(s["pitch"]), "-g", str(int(rng.integers(2, 12))), "-w", str(wav),
                    " ".join(text)], check=True, capture_output=True)
    x, sr = sf.read(wav, dtype="float64")
    x = resample_poly(x, RATE, sr) if sr != RATE else x
    n = int(round(s["seconds"] * RATE))
    lead = int(rng.integers(0, RATE // 4))
    y = np.zeros(n)
    part = x[:max(0, n - lead)]
    y[lead:lead + len(part)] = part
    y *= 10 ** (s["peak_db"] / 20) / max(np.abs(y).max(), 1e-9)
    # Background: white noise shaped towards pink by a one-pole filter, and
    # a 50 or 60 Hz hum, at snr_db below the speech's RMS.
    from scipy.signal import lfilter
    noise = lfilter([1.0], [1.0, -0.95], rng.standard_normal(n))
    t = np.arange(n) / RATE
    noise = noise / noise.std() + 0.3 * np.sin(2 * np.pi * rng.choice([50, 60]) * t)
    rms = np.sqrt(np.mean(y[y != 0] ** 2)) if np.any(y) else 0.01
    y += noise / noise.std() * rms * 10 ** (-s["snr_db"] / 20)
    return np.clip(y, -1, 1 - 2 ** -15)


def make_one(args):
    """Makes clip i (FLAC and MP3) under `d`; returns its paths and spec."""
    import soundfile as sf
    d, i, seed = args
    rng = np.random.default_rng([seed, i])
    s = clip_spec(rng)
    name = f"voice_{s['voice']:02d}/clip_{i:06d}"
    with tempfile.TemporaryDirectory(prefix="media_audio") as tmp:
        y = speech(rng, s, tmp)
        wav = Path(tmp) / "clip.wav"
        sf.write(wav, y, RATE, subtype="PCM_16")
        flac, mp3 = Path(d) / "flac" / f"{name}.flac", Path(d) / "mp3" / f"{name}.mp3"
        subprocess.run(["sox", str(wav), "-C", "5", str(flac)], check=True, capture_output=True)
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", str(wav),
                        "-c:a", "libmp3lame", "-b:a", "32k", "-ar", str(RATE), "-ac", "1",
                        str(mp3)], check=True, capture_output=True)
    return {"flac": str(flac), "mp3": str(mp3), "spec": s}


def make_data(d, n, seed=38):
    """The clips, their file lists and the packed datasets under d, made
    once for these parameters."""
    want = {"clips": n, "seed": seed, "version": GEN_VERSION}
    pf = d / "params.json"
    if pf.exists() and json.loads(pf.read_text()).get("want") == want:
        return json.loads(pf.read_text())
    if d.exists():
        shutil.rmtree(d)
    for f in FORMATS:
        for v in range(len(VOICES)):
            (d / f / f"voice_{v:02d}").mkdir(parents=True)
    print(f"media_audio: making {n:,} clips in {d} ...", flush=True)
    t = time.perf_counter()
    from multiprocessing import Pool
    with Pool(CORES) as pool:
        made = pool.map(make_one, [(str(d), i, seed) for i in range(n)], chunksize=4)
    t_make = time.perf_counter() - t
    secs = [m["spec"]["seconds"] for m in made]
    stats = {"seconds": float(np.sum(secs)), "mean_s": float(np.mean(secs)),
             "min_s": float(np.min(secs)), "max_s": float(np.max(secs)),
             "under_window": int(sum(x * RATE < WINDOW for x in secs)),
             "voices": len({m["spec"]["voice"] for m in made})}
    pack_s = {}
    for f in FORMATS:
        files = sorted(m[f] for m in made)
        (d / f"{f}.txt").write_text("\n".join(files) + "\n")
        sizes = [os.path.getsize(p) for p in files]
        stats[f"{f}_mb"] = sum(sizes) / 1e6
        stats[f"{f}_kbps"] = sum(sizes) * 8 / 1e3 / stats["seconds"]
        t = time.perf_counter()
        pack(files, d / f"{f}.stk")
        pack_s[f] = time.perf_counter() - t
    p = {"want": want, "stats": stats, "make_s": t_make, "pack_s": pack_s}
    pf.write_text(json.dumps(p))
    return p


def label_of(path):
    return int(Path(path).parent.name.split("_")[1])


def pack(files, out):
    import stoker
    recs = ({"audio": Path(p).read_bytes(), "label": np.int64(label_of(p))} for p in files)
    stoker.write(str(out), recs, fields={"audio": stoker.Audio()}, overwrite=True)


def files_under(p):
    p = Path(p)
    return [str(p)] if p.is_file() else sorted(str(f) for f in p.rglob("*") if f.is_file())


def warm(paths):
    for f in paths:
        with open(f, "rb") as fh:
            while fh.read(1 << 20):
                pass


# ---- the contenders, each run in a child process ---------------------------

def run_stoker(a):
    import stoker
    ld = stoker.Loader(a.path, BATCH, shuffle="random", threads=CORES, seed=a.seed,
                       decode={"audio": stoker.DecodeAudio(WINDOW, sample_rate=RATE,
                                                           random_offset=True)})
    if a.warm:
        for i, b in enumerate(ld):
            if i + 1 >= a.warm:
                break
    c0, t0 = tree_cpu(), time.perf_counter()
    n, epoch = 0, 1
    while n == 0 or time.perf_counter() - t0 < a.min_seconds:
        ld.set_epoch(epoch)
        for b in ld:
            x = b["audio"]
            assert x.shape[1:] == (WINDOW, 1) and x.dtype == np.float32, x.shape
            n += x.shape[0]
        epoch += 1
    return n, time.perf_counter() - t0, tree_cpu() - c0


def fit(x):
    """[frames, channels] float32 -> [WINDOW, 1]: the channels' mean, padded
    with zeros or cut to WINDOW frames."""
    x = np.asarray(x, np.float32)
    if x.ndim == 2 and x.shape[1] > 1:
        x = x.mean(axis=1, keepdims=True)
    x = x.reshape(-1, 1)
    if len(x) < WINDOW:
        x = np.concatenate([x, np.zeros((WINDOW - len(x), 1), np.float32)])
    return x[:WINDOW]


def start_of(frames):
    """A window start, uniform among those where a whole window fits (the
    rule stoker follows, with the worker's own random numbers)."""
    return random.randrange(frames - WINDOW + 1) if frames > WINDOW else 0


class SoundfileWindow:
    """What a user writes for random windows with soundfile: open, seek to a
    random start, read only the window."""

    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        import soundfile as sf
        import torch
        with sf.SoundFile(self.files[i]) as f:
            f.seek(start_of(f.frames))
            x = f.read(WINDOW, dtype="float32", always_2d=True)
        return torch.from_numpy(fit(x)), label_of(self.files[i])


class SoundfileWhole(SoundfileWindow):
    """The naive way: read the whole clip, then slice the window."""

    def __getitem__(self, i):
        import soundfile as sf
        import torch
        x, _ = sf.read(self.files[i], dtype="float32", always_2d=True)
        s = start_of(len(x))
        return torch.from_numpy(fit(x[s:s + WINDOW])), label_of(self.files[i])


class TorchcodecWindow(SoundfileWindow):
    """torchcodec's AudioDecoder, asked for the window's time range."""

    def __getitem__(self, i):
        import torch
        from torchcodec.decoders import AudioDecoder
        d = AudioDecoder(self.files[i])
        sr = d.metadata.sample_rate
        frames = int(round(d.metadata.duration_seconds_from_header * sr))
        s = start_of(frames)
        x = d.get_samples_played_in_range(s / sr, (s + WINDOW) / sr).data
        return torch.from_numpy(fit(x.numpy().T)), label_of(self.files[i])


class TorchaudioWindow(SoundfileWindow):
    """torchaudio.load of the window (frame_offset, num_frames)."""

    def __getitem__(self, i):
        import torch
        import torchaudio
        frames = torchaudio.info(self.files[i]).num_frames
        x, _ = torchaudio.load(self.files[i], frame_offset=start_of(frames), num_frames=WINDOW)
        return torch.from_numpy(fit(x.numpy().T)), label_of(self.files[i])


DATASETS = {"soundfile, window": SoundfileWindow, "soundfile, whole file": SoundfileWhole,
            "torchcodec": TorchcodecWindow, "torchaudio": TorchaudioWindow}


def run_dataloader(a):
    import torch
    torch.set_num_threads(1)
    files = Path(a.path).read_text().split()
    torch.manual_seed(a.seed)
    dl = torch.utils.data.DataLoader(DATASETS[a.child](files), batch_size=BATCH, shuffle=True,
                                     num_workers=CORES, persistent_workers=True)
    if a.warm:
        for i, _ in enumerate(dl):
            if i + 1 >= a.warm:
                break
    c0, t0 = tree_cpu(), time.perf_counter()
    n = 0
    while n == 0 or time.perf_counter() - t0 < a.min_seconds:
        for x, y in dl:
            assert x.shape[1:] == (WINDOW, 1) and x.dtype == torch.float32, x.shape
            n += x.shape[0]
    return n, time.perf_counter() - t0, tree_cpu() - c0


def run_dali(a):
    from nvidia.dali import fn, math, pipeline_def, types
    files = Path(a.path).read_text().split()

    @pipeline_def(batch_size=BATCH, num_threads=CORES, device_id=None, seed=a.seed + 1)
    def pipe():
        enc, labels = fn.readers.file(files=files, labels=[label_of(p) for p in files],
                                      random_shuffle=True, name="files")
        x, _ = fn.decoders.audio(enc, dtype=types.FLOAT, downmix=True, sample_rate=RATE)
        n = fn.cast(x.shape(), dtype=types.FLOAT)
        start = math.floor(math.max(n - WINDOW, 0.0) * fn.random.uniform(range=[0.0, 1.0]))
        x = fn.slice(x, fn.cast(start, dtype=types.INT32), [WINDOW], axes=[0],
                     out_of_bounds_policy="pad")
        return fn.reshape(x, shape=[WINDOW, 1]), labels

    p = pipe()
    p.build()
    iters = -(-p.epoch_size("files") // BATCH)
    for _ in range(a.warm):
        p.run()
    c0, t0 = tree_cpu(), time.perf_counter()
    n = 0
    while n == 0 or time.perf_counter() - t0 < a.min_seconds:
        for _ in range(iters):
            x, y = p.run()
            arr = x.as_array()
            assert arr.shape[1:] == (WINDOW, 1) and arr.dtype == np.float32, arr.shape
            n += arr.shape[0]
    return n, time.perf_counter() - t0, tree_cpu() - c0


CHILDREN = {"stoker": run_stoker, "stoker in place": run_stoker, "DALI (CPU)": run_dali,
            **{k: run_dataloader for k in DATASETS}}


def child(a):
    import warnings
    warnings.filterwarnings("ignore")
    try:
        n, dt, cpu = CHILDREN[a.child](a)
        out = {"clips": n, "seconds": dt, "rate": n / dt, "cpu_ms": cpu * 1e3 / n}
    except Exception as e:  # reported as "not measured: why", not a failed bench
        out = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
    print(json.dumps(out), flush=True)
    os._exit(0)  # leave DataLoader workers and DALI's threads behind at once


def measure(name, path, seed, warm_batches, min_seconds, timeout=900):
    cmd = [sys.executable, __file__, "--child", name, "--path", str(path), "--seed", str(seed),
           "--warm", str(warm_batches), "--min-seconds", str(min_seconds)]
    return child_result(cmd, timeout)


# ---- which contenders can run here ------------------------------------------

def availability(d):
    """{contender: None (runs) or why it is not measured}, for each format."""
    why = {f: {} for f in FORMATS}
    py = [sys.executable, "-c"]

    def imports(code):
        r = subprocess.run(py + [code], capture_output=True, text=True)
        return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["?"])[-1]

    import stoker
    for f in FORMATS:
        why[f]["stoker"] = None
        try:
            stoker.index(str(d / f), str(d / f"{f}.idx"), source="audio")
            fields = stoker.Loader(str(d / f"{f}.idx"), 1).fields
            why[f]["stoker in place"] = None if "audio" in fields else \
                f"the index of the folder has fields {fields}, no audio field"
        except Exception as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            why[f]["stoker in place"] = f"stoker.index does not take the folder ({msg})"
    e = imports("import soundfile")
    for f in FORMATS:
        why[f]["soundfile, window"] = why[f]["soundfile, whole file"] = \
            e and f"soundfile does not import: {e}"
    e = imports("import torch; from torchcodec.decoders import AudioDecoder; "
                "assert torch.__version__.endswith('+cpu')")
    for f in FORMATS:
        why[f]["torchcodec"] = e and f"torchcodec does not load: {e}"
    e = imports("import torchaudio; torchaudio.info")
    ta = None
    if e:
        ta = ("torchaudio is not installed: its PyPI wheels (2.9.1 to 2.11.0, none for "
              "torch 2.13) link torch's CUDA build (libtorch_cuda.so, libcudart), which the CPU "
              "build of torch lacks, and the older ones its older C++ ABI; since 2.9 its "
              "load() is torchcodec's decoder, measured above") if "No module" in e else \
            f"torchaudio does not load: {e}"
    for f in FORMATS:
        why[f]["torchaudio"] = ta
    e = imports("import nvidia.dali")
    dali = e and ("nvidia-dali-cuda120 is not installed (requirements-bench.txt)"
                  if "No module" in e else f"DALI does not import: {e}")
    for f in FORMATS:
        why[f]["DALI (CPU)"] = dali
    if not dali:
        # DALI's bundled libsndfile decides which formats it reads.
        probe = ("import sys; sys.path.insert(0, 'bench'); import media_audio as m, types; "
                 "a = types.SimpleNamespace(path=sys.argv[1], seed=0, warm=0, min_seconds=0); "
                 "m.BATCH = 2; m.run_dali(a)")
        for f in FORMATS:
            one = d / f"{f}.one.txt"
            one.write_text((d / f"{f}.txt").read_text().split()[0] + "\n")
            r = subprocess.run(py + [probe, str(one)], capture_output=True, text=True,
                               cwd=ROOT)
            if r.returncode != 0:
                err = [x for x in r.stderr.splitlines() if "Failed to open" in x or
                       "Assert" in x] or [x for x in r.stderr.splitlines() if "Error" in x]
                why[f]["DALI (CPU)"] = ("DALI's audio decoder (its bundled libsndfile) does not "
                                        "read these files: " + (err[0].strip() if err else
                                                                "exit %d" % r.returncode))[:300]
    return why


def ensure_tools():
    """bench/flac_limit.c and bench/mp3_limit.c, built into the build folder."""
    for f, (src, pkg) in LIMIT_SRC.items():
        src = ROOT / "bench" / src
        newest = max(src.stat().st_mtime, (ROOT / "bench" / "audio_limit.h").stat().st_mtime,
                     (ROOT / "bench" / "bench_time.h").stat().st_mtime)
        if not LIMIT[f].exists() or LIMIT[f].stat().st_mtime < newest:
            flags = subprocess.run(["pkg-config", "--cflags", "--libs", pkg], capture_output=True,
                                   text=True, check=True).stdout.split()
            subprocess.run(["cc", "-O2", "-std=c11", "-Wall", "-Wextra", "-o", str(LIMIT[f]),
                            str(src), *flags, "-lpthread"], check=True)


def decode_limit(d, f, threads=CORES, window=0, passes=5):
    out = subprocess.run([str(LIMIT[f]), str(threads), str(passes), str(d / f"{f}.txt"),
                          str(window)], check=True, capture_output=True, text=True).stdout.split()
    return {"rate": float(out[1]), "audio_rate": float(out[2]), "clips": int(out[3]),
            "audio_s": float(out[4]), "cpu_ms": float(out[5])}


def profile(d, f, n=200):
    """CPU seconds per window: stoker's decode (DecodeAudio.decode, one
    thread, the clips in memory) against the limits' programs on one
    thread."""
    import stoker
    files = (d / f"{f}.txt").read_text().split()[:n]
    data = [Path(p).read_bytes() for p in files]
    dec = stoker.DecodeAudio(WINDOW, sample_rate=RATE, random_offset=True)
    best = []
    for rep in range(3):
        t = time.process_time()
        for i, b in enumerate(data):
            dec.decode(b, seed=rep, record=i)
        best.append((time.process_time() - t) / len(data))
    lst = d / f"{f}.profile.txt"
    lst.write_text("\n".join(files) + "\n")
    cpu = {}
    for what, w in (("window", WINDOW), ("full", 0)):
        out = subprocess.run([str(LIMIT[f]), "1", "3", str(lst), str(w)], check=True,
                             capture_output=True, text=True).stdout.split()
        cpu[what] = float(out[5]) * 1e-3
    return {"stoker_s": median(best), "window_limit_s": cpu["window"],
            "full_limit_s": cpu["full"], "clips": len(data)}


# ---- the report --------------------------------------------------------------

def fmt_runs(xs, f="{:,.0f}"):
    return ", ".join(f.format(x) for x in xs)


def table(f, why, res, lim, win, p):
    """The rows of one format's table, and its figures."""
    st = p["stats"]
    clip_s = st["seconds"] / p["want"]["clips"]
    ok = {k: v for k, v in res.items() if v and all("rate" in r for r in v)}
    rate = {k: median([r["rate"] for r in v]) for k, v in ok.items()}
    cpu = {k: median([r["cpu_ms"] for r in v]) for k, v in ok.items()}
    for k, v in res.items():
        if k not in rate and why.get(k) is None:
            errs = [r["error"] for r in v if "error" in r]
            why[k] = "failed: " + (errs[0] if errs else "no runs")
    peers = {k: x for k, x in rate.items() if not k.startswith("stoker")}
    best = max(peers, key=peers.get) if peers else None
    best_cpu = min(peers, key=lambda k: cpu[k]) if peers else None
    s, sc = rate.get("stoker"), cpu.get("stoker")
    lim_r, lim_c = median([x["rate"] for x in lim]), median([x["cpu_ms"] for x in lim])
    win_r, win_c = median([x["rate"] for x in win]), median([x["cpu_ms"] for x in win])
    rows = ["| loader | clips/s | audio s/s | stoker is | CPU ms a clip | stoker is (CPU) | "
            "runs (clips/s) |", "|---|---:|---:|---:|---:|---:|---|"]
    for k in LOADERS:
        if k in rate:
            ratio = "" if k == "stoker" or not s else f"**{s / rate[k]:.2f}x**"
            cr = "" if k == "stoker" or not sc else f"**{cpu[k] / sc:.2f}x**"
            rows.append(f"| {k} | {rate[k]:,.0f} | {rate[k] * WINDOW / RATE:,.0f} | {ratio} | "
                        f"{cpu[k]:.2f} | {cr} | {fmt_runs([r['rate'] for r in res[k]])} |")
        else:
            rows.append(f"| {k} | not measured: {why.get(k) or 'no runs'} | | | | | |")
    lib = "libFLAC" if f == "flac" else "mpg123"
    rows.append(f"| full-decode limit: every clip decoded whole ({lib}) | {lim_r:,.0f} | "
                f"{lim_r * clip_s:,.0f} decoded | " + (f"**{s / lim_r:.2f}x**" if s else "") +
                f" | {lim_c:.2f} | " + (f"**{lim_c / sc:.2f}x**" if sc else "") +
                f" | {fmt_runs([x['rate'] for x in lim])} |")
    rows.append(f"| window limit: seek, decode the 4 s window only ({lib}) | {win_r:,.0f} | "
                f"{win_r * WINDOW / RATE:,.0f} | " + (f"{s / win_r:.2f}x" if s else "") +
                f" | {win_c:.2f} | " + (f"{win_c / sc:.2f}x" if sc else "") +
                f" | {fmt_runs([x['rate'] for x in win])} |")
    fig = {"stoker": s, "best_peer": best, "best_peer_rate": peers.get(best), "limit": lim_r,
           "window_limit": win_r, "rates": rate, "cpu_ms": cpu, "best_peer_cpu": best_cpu,
           "limit_cpu_ms": lim_c, "window_limit_cpu_ms": win_c}
    return rows, fig


def report(p, args, why, res, lim, win, prof, elapsed):
    st = p["stats"]
    lines = [
        "## Audio decoded by the loader (issue 38)", "",
        f"Machine: {machine()}. Mode: {args.mode}. Medians of {args.reps} repetitions; every "
        "contender ran in each repetition, in a rotating order, each in a process of its own. "
        f"Produced by `python bench/media_audio.py{' --full' if args.mode == 'full' else ''}"
        f"{' --profile' if prof else ''}` ({elapsed / 60:.1f} min). The load average "
        f"(1 min) ran from {min(args.loads):.1f} to {max(args.loads):.1f} during the runs: "
        "other work shared the cores, which the repetitions' spread shows.", "",
        f"Data: {args.clips:,} speech clips made here: espeak-ng speaking English sentences "
        f"({st['voices']} voices, 130-195 words a minute, varied pitch), resampled to 16 kHz "
        "mono, with pink-ish noise and a mains hum 20-40 dB below the speech, peaks at -12 to "
        f"-2 dBFS; {st['min_s']:.1f}-{st['max_s']:.1f} s, mean {st['mean_s']:.1f} s, "
        f"{st['seconds'] / 3600:.2f} h in all ({st['under_window']} clips shorter than the "
        "window). FLAC (sox, level 5, 16 bit, 4096-frame blocks, a SEEKTABLE of one point, "
        f"so that a seek bisects the clip): {st['flac_mb']:.0f} MB, "
        f"{st['flac_kbps']:.0f} kbit/s; MP3 (libmp3lame, 32 kbit/s CBR, MPEG-2): "
        f"{st['mp3_mb']:.0f} MB. Packed by stoker.write in {p['pack_s']['flac']:.1f} s "
        f"(FLAC) and {p['pack_s']['mp3']:.1f} s (MP3), the files' bytes as they are.", "",
        f"Every loader: a random 4 s window of each clip ({WINDOW:,} frames at 16 kHz, zeros "
        f"past a short clip's end), float32 [{BATCH}, {WINDOW}, 1] batches, random order, "
        f"{CORES} threads or workers ({CORES} cores), page cache warm; {args.warm} warm-up "
        f"batches, then whole epochs timed until at least {args.min_seconds:g} s had passed. "
        "Audio s/s: seconds of audio delivered (4 s a clip); "
        "for the full-decode limit, seconds decoded. CPU ms a clip: the CPU time (user and "
        "system) of the loader's process, its threads and its DataLoader workers over the "
        "timed epochs, per clip delivered; on a machine whose cores other work shares, it "
        "changes far less than clips/s, and a loader with more runnable threads or processes "
        "does not gain by it. 'stoker is (CPU)' is the other's CPU time a clip over "
        "stoker's.", "",
    ]
    figs = {}
    for f in FORMATS:
        rows, fig = table(f, why[f], res[f], lim[f], win[f], p)
        figs[f] = fig
        lines += [f"### {f.upper()}", ""] + rows + [""]
        if fig["stoker"] and fig["best_peer"]:
            c, bc = fig["cpu_ms"], fig["best_peer_cpu"]
            lines += [f"stoker / best peer ({fig['best_peer']}): "
                      f"**{fig['stoker'] / fig['best_peer_rate']:.2f}x** in clips/s, "
                      f"**{c[bc] / c['stoker']:.2f}x** in CPU time a clip ({bc}) "
                      "(target >= 1.5x); stoker / full-decode limit: "
                      f"**{fig['stoker'] / fig['limit']:.2f}x** in clips/s, "
                      f"**{fig['limit_cpu_ms'] / c['stoker']:.2f}x** in CPU time; "
                      f"stoker / window limit: {fig['stoker'] / fig['window_limit']:.2f}x, "
                      f"{fig['window_limit_cpu_ms'] / c['stoker']:.2f}x.", ""]
    lines += [
        "The limits are bench/flac_limit.c and bench/mp3_limit.c: the files held in memory, "
        f"decoded on {CORES} threads, each with a decoder kept from file to file, into the "
        "decoder's own output (libFLAC's integers; mpg123's floats, gapless), with no "
        "mixing, no copy into a batch, no Python. The full-decode limit decodes every clip "
        "whole; a loader of 4 s windows passes it by decoding less. The window limit opens "
        "each clip, seeks to a random start (libFLAC's seek; for MP3 after mpg123_scan, the "
        "scan of every frame header that makes mpg123's seek exact, which stoker does too) and "
        "decodes the window only: what is left for a loader to spend on reading, batching "
        "and its own bookkeeping.", "",
    ]
    if prof:
        lines += ["### One window, one thread", "",
                  "CPU time of stoker's decode of a window (`DecodeAudio(64000, "
                  "sample_rate=16000, random_offset=True).decode(bytes)`, the clip in memory, "
                  "one thread, Python's call included) against the limits' programs on one "
                  f"thread, over the first {prof['flac']['clips']} clips:", "",
                  "| format | stoker's decode | window limit | full-decode limit | stoker / "
                  "window limit (time) |", "|---|---:|---:|---:|---:|"]
        for f in FORMATS:
            x = prof[f]
            lines.append(f"| {f.upper()} | {x['stoker_s'] * 1e3:.2f} ms | "
                         f"{x['window_limit_s'] * 1e3:.2f} ms | {x['full_limit_s'] * 1e3:.2f} ms"
                         f" | {x['stoker_s'] / x['window_limit_s']:.2f} |")
        lines.append("")
    return "\n".join(lines), figs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="4,000 clips, 5 repetitions")
    ap.add_argument("--clips", type=int)
    ap.add_argument("--reps", type=int)
    ap.add_argument("--warm", type=int, default=2, help="warm-up batches before the timed epochs")
    ap.add_argument("--min-seconds", type=float, default=3.0,
                    help="whole epochs are timed until at least this long has passed")
    ap.add_argument("--only", help="contenders to run, separated by ';' (while developing)")
    ap.add_argument("--profile", action="store_true",
                    help="also time stoker's decode of one window against the limit")
    ap.add_argument("--no-doc", action="store_true", help="print, do not write BENCHMARKS.md")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    a.mode = "full" if a.full else "quick"
    a.clips = a.clips or (4000 if a.full else 640)
    a.reps = a.reps or (5 if a.full else 3)
    t_all = time.perf_counter()
    d = OUT / "media_audio" / f"{a.mode}-{a.clips}"
    p = make_data(d, a.clips)
    ensure_tools()
    why = availability(d)
    only = set(a.only.split(";")) if a.only else None
    for f in FORMATS:
        for k, v in why[f].items():
            if v:
                print(f"media_audio: {f}: {k}: not measured: {v}", flush=True)
    paths = {"stoker": "{f}.stk", "stoker in place": "{f}.idx"}
    res = {f: {} for f in FORMATS}
    lim = {f: [] for f in FORMATS}
    win = {f: [] for f in FORMATS}
    a.loads = [os.getloadavg()[0]]
    for rep in range(a.reps):
        for f in FORMATS:
            run_these = [k for k in LOADERS if why[f].get(k) is None and
                         (only is None or k in only)]
            for k in run_these:
                res[f].setdefault(k, [])
            k0 = rep % (len(run_these) + 1)
            order = (run_these + ["limit"])[k0:] + (run_these + ["limit"])[:k0]
            clips = (d / f"{f}.txt").read_text().split()
            for name in order:
                if name == "limit":
                    warm(clips)
                    lim[f].append(decode_limit(d, f))
                    win[f].append(decode_limit(d, f, window=WINDOW))
                    print(f"rep {rep + 1}: {f:4s} {'limits':22s} full {lim[f][-1]['rate']:8,.0f} "
                          f"clips/s, window {win[f][-1]['rate']:8,.0f} clips/s", flush=True)
                    continue
                path = d / paths.get(name, "{f}.txt").format(f=f)
                warm(files_under(path) + (clips if name != "stoker" else []))
                r = measure(name, path, rep, a.warm, a.min_seconds)
                res[f][name].append(r)
                print(f"rep {rep + 1}: {f:4s} {name:22s} " +
                      (f"{r['rate']:8,.0f} clips/s ({r['clips']} in {r['seconds']:.2f} s)"
                       if "rate" in r else "failed: " + r["error"]), flush=True)
                a.loads.append(os.getloadavg()[0])
    prof = {f: profile(d, f) for f in FORMATS} if a.profile else None
    text, figs = report(p, a, why, res, lim, win, prof, time.perf_counter() - t_all)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"media_audio-{a.mode}.json").write_text(json.dumps(
        {"args": vars(a), "params": p, "why": why, "results": res, "limit": lim,
         "window_limit": win, "profile": prof, "figures": figs}))
    if not a.no_doc and not a.only:
        write_section("media_audio", text)
    print(text)
    print(json.dumps(figs, indent=1))


if __name__ == "__main__":
    main()
