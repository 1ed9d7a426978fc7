"""Images decoded by the loader (issue 38): 224x224 random-resized crops with
a random horizontal flip, uint8 [3, 224, 224], one epoch in random order,
images/s, against the loaders users pick for this and against the decoders'
own full-image rate.

The data (made once under bench/out/media_images/<mode>-<images>/, untimed, from a
fixed seed): photograph-like images (a smooth colour field, shaded shapes
with soft edges, multi-scale texture and sensor noise, never flat colour)
of mixed sizes averaging about 500x375 like ImageNet's, laid out as an
ImageFolder tree (one sub-folder a class).  Most are JPEG, quality 75-95,
4:2:0 or 4:4:4, some progressive, some with optimised Huffman tables; a few
are grayscale JPEG, a few CMYK JPEG (Adobe), a few PNG with an alpha
channel.  Packed for stoker with stoker.write(fields={"image":
stoker.Image()}), the files' bytes as they are.

Contenders, each in a process of its own, every one in each repetition in
a rotating order, page cache warm, all with one thread or worker per core:

    stoker             stoker.Loader over the packed dataset, decode=
                       DecodeImage(224, crop="random_resized", flip=True,
                       layout="CHW"), shuffle="random", threads=cores
    stoker in place    the same over stoker.index(folder), where this
                       build indexes image folders
    torchvision        ImageFolder (Pillow's decode) + RandomResizedCrop(224),
                       RandomHorizontalFlip, PILToTensor in a torch
                       DataLoader, num_workers=cores, persistent workers
    DALI (CPU)         fn.readers.file, fn.decoders.image_random_crop
                       (device="cpu"), fn.resize, fn.flip, fn.transpose to
                       CHW; num_threads=cores, no GPU
    FFCV               not run: where it does not install (as here), why is
                       recorded; a runner is to be written where it does
    decode limit       bench/jpeg_limit.c: libjpeg-turbo (and libspng for
                       the PNGs) decoding every file whole, at full size, on
                       cores threads from memory: the full-decode rate

Each loader makes a few warm-up batches, then one whole epoch is timed
(DALI, whose reader runs on across epochs, makes as many batches as an
epoch holds).  Then a cold first epoch of stoker's packed dataset, its
shards evicted from the page cache (posix_fadvise DONTNEED), against the
device's sequential read rate (stoker-limits seqread, O_DIRECT).

Each contender's figures are images/s and images per CPU-second (the user
and system time of its processes, DataLoader workers included, over the
timed epoch): on a machine shared with other work the second moves much
less with the load than the first.

    python bench/media_images.py [--full] [--images N] [--batch B] [--reps R]
    python bench/media_images.py --report bench/out/media_images-quick-2000.json

Quick mode (the default): 2,000 images, batches of 128, 3 repetitions, a few
minutes on 2 cores; --full: 20,000 images, batches of 256, 5 repetitions.
Writes the "media_images" section of docs/BENCHMARKS.md (--no-doc: print
only); --report rewrites it from a run's saved results.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (BUILD, OUT, ROOT, child_result, drop_cache, machine, median,  # noqa: E402
                    tree_cpu, write_section)

CORES = len(os.sched_getaffinity(0))
SIZE = 224
GEN_VERSION = 1  # bump when the images made change, so old data is remade
LIMIT = BUILD / "jpeg_limit"
LIMITS = BUILD / "stoker-limits"
LOADERS = ["stoker", "stoker in place", "torchvision", "DALI (CPU)", "FFCV"]


# ---- the images ----------------------------------------------------------

def image_spec(rng):
    """Size, format and encoder settings of one image, ImageNet-like."""
    aspect = rng.choice([4 / 3, 3 / 2, 16 / 9, 1.0, 5 / 4], p=[0.6, 0.25, 0.07, 0.05, 0.03])
    long = 500 if rng.random() < 0.65 else int(np.clip(rng.lognormal(np.log(460), 0.35), 160, 1400))
    short = max(64, int(round(long / aspect)))
    w, h = (long, short) if rng.random() < 0.88 else (short, long)
    u = rng.random()
    fmt = "png" if u < 0.03 else "gray" if u < 0.05 else "cmyk" if u < 0.06 else "rgb"
    return {"w": w, "h": h, "fmt": fmt, "quality": int(rng.integers(75, 96)),
            "progressive": bool(rng.random() < 0.15), "optimize": bool(rng.random() < 0.5),
            "subsampling": 0 if rng.random() < 0.15 else 2}


def upsampled(rng, h, w, cell):
    """Value noise: a coarse grid of N(0, 1) resized smoothly to h x w."""
    from PIL import Image
    g = rng.standard_normal((h // cell + 2, w // cell + 2), dtype=np.float32)
    return np.asarray(Image.fromarray(g, "F").resize((w, h), Image.BICUBIC), np.float32)


def photo(rng, h, w):
    """uint8 [h, w, 3] with a photograph's statistics: smooth illumination,
    large shaded objects and small clutter with soft edges, colour texture at
    several scales, sensor noise."""
    from PIL import Image, ImageDraw, ImageFilter
    palette = rng.uniform(30, 225, 3)
    g = int(rng.integers(3, 7))
    field = 0.55 * rng.uniform(0, 255, (g, g, 3)) + 0.45 * palette
    im = Image.fromarray(field.astype(np.uint8)).resize((w, h), Image.BICUBIC)
    draw = ImageDraw.Draw(im)
    big = int(rng.integers(2, 9))
    for k in range(big + int(rng.integers(30, 160))):
        r = rng.uniform(0.1, 0.7) if k < big else rng.uniform(0.01, 0.08)
        x0, y0 = rng.uniform(-0.1, 1.0) * w, rng.uniform(-0.1, 1.0) * h
        x1, y1 = x0 + r * w * rng.uniform(0.3, 1.5), y0 + r * h * rng.uniform(0.3, 1.5)
        fill = tuple(int(c) for c in np.clip(rng.normal(palette, 70), 0, 255))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=fill)
        else:
            pts = [(rng.uniform(x0, x1), rng.uniform(y0, y1)) for _ in range(int(rng.integers(3, 7)))]
            draw.polygon(pts, fill=fill)
    im = im.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.4, 1.2))))
    x = np.asarray(im, np.float32)
    x = x + (upsampled(rng, h, w, 96) * float(rng.uniform(8, 25)))[..., None]
    for cell, lo, hi in ((24, 5, 16), (6, 5, 16), (2, 6, 20)):
        amp = float(rng.uniform(lo, hi))
        luma = upsampled(rng, h, w, cell)
        x += (luma * amp)[..., None] * rng.uniform(0.7, 1.3, 3).astype(np.float32)
        x[..., int(rng.integers(0, 3))] += upsampled(rng, h, w, cell) * amp * 0.5
    x += rng.standard_normal((h, w, 3), dtype=np.float32) * float(rng.uniform(2.0, 6.0))
    return np.clip(x, 0, 255).astype(np.uint8)


def make_one(args):
    """Writes image i of class c under `folder`; returns its path and spec."""
    from PIL import Image
    folder, i, c, seed = args
    rng = np.random.default_rng([seed, i])
    s = image_spec(rng)
    px = photo(rng, s["h"], s["w"])
    d = Path(folder) / f"class_{c:03d}"
    if s["fmt"] == "png":
        a = np.clip(128 + upsampled(rng, s["h"], s["w"], 64) * 90, 0, 255).astype(np.uint8)
        path = d / f"img_{i:06d}.png"
        Image.fromarray(np.dstack([px, a]), "RGBA").save(path, compress_level=6)
    else:
        im = Image.fromarray(px)
        im = im.convert("L") if s["fmt"] == "gray" else im.convert("CMYK") if s["fmt"] == "cmyk" \
            else im
        kw = {"quality": s["quality"], "progressive": s["progressive"], "optimize": s["optimize"]}
        if s["fmt"] == "rgb":
            kw["subsampling"] = s["subsampling"]
        path = d / f"img_{i:06d}.jpg"
        im.save(path, "JPEG", **kw)
    return str(path), s


def make_data(d, n, classes, seed=38):
    """The ImageFolder tree, its file list and the packed dataset under d,
    made once for these parameters."""
    want = {"images": n, "classes": classes, "seed": seed, "version": GEN_VERSION}
    pf = d / "params.json"
    if pf.exists() and json.loads(pf.read_text()).get("want") == want:
        return json.loads(pf.read_text())
    if d.exists():
        shutil.rmtree(d)
    folder = d / "folder"
    for c in range(classes):
        (folder / f"class_{c:03d}").mkdir(parents=True)
    print(f"media_images: making {n:,} images in {folder} ...", flush=True)
    t = time.perf_counter()
    from multiprocessing import Pool
    with Pool(CORES) as pool:
        made = pool.map(make_one, [(str(folder), i, i % classes, seed) for i in range(n)],
                        chunksize=16)
    t_make = time.perf_counter() - t
    files = sorted(p for p, _ in made)
    (d / "files.txt").write_text("\n".join(files) + "\n")
    specs = [s for _, s in made]
    sizes = [os.path.getsize(p) for p in files]
    stats = {
        "mean_w": float(np.mean([s["w"] for s in specs])),
        "mean_h": float(np.mean([s["h"] for s in specs])),
        "mean_mpix": float(np.mean([s["w"] * s["h"] for s in specs])) / 1e6,
        "mean_kib": float(np.mean(sizes)) / 1024, "total_mb": sum(sizes) / 1e6,
        "counts": {k: sum(s["fmt"] == k for s in specs) for k in ("rgb", "gray", "cmyk", "png")},
        "progressive": sum(s["progressive"] and s["fmt"] != "png" for s in specs),
        "q_min": min(s["quality"] for s in specs), "q_max": max(s["quality"] for s in specs),
    }
    t = time.perf_counter()
    pack(folder, d / "packed.stk")
    t_pack = time.perf_counter() - t
    p = {"want": want, "stats": stats, "make_s": t_make, "pack_s": t_pack}
    pf.write_text(json.dumps(p))
    return p


def folder_records(folder):
    """(path, label) in ImageFolder's order: classes sorted, files sorted."""
    classes = sorted(e.name for e in os.scandir(folder) if e.is_dir())
    for c, name in enumerate(classes):
        for f in sorted(os.listdir(Path(folder) / name)):
            yield Path(folder) / name / f, c


def pack(folder, out):
    import stoker
    recs = ({"image": p.read_bytes(), "label": np.int64(c)} for p, c in folder_records(folder))
    stoker.write(str(out), recs, fields={"image": stoker.Image()}, overwrite=True)


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
    ld = stoker.Loader(a.path, a.batch, shuffle="random", threads=CORES, seed=a.seed,
                       decode={a.field: stoker.DecodeImage(SIZE, crop="random_resized",
                                                           flip=True, layout="CHW")})
    t0, c0 = time.perf_counter(), tree_cpu()
    n = 0
    if a.warm:
        for i, b in enumerate(ld):
            if i + 1 >= a.warm:
                break
        ld.set_epoch(1)
        t0, c0 = time.perf_counter(), tree_cpu()
    for b in ld:
        x = b[a.field]
        assert x.shape[1:] == (3, SIZE, SIZE) and x.dtype == np.uint8, x.shape
        n += x.shape[0]
    return n, time.perf_counter() - t0, tree_cpu() - c0


# torchvision lives apart from .venv (requirements-bench.txt, "# site:").
BENCH_SITE = Path(__file__).resolve().parents[1] / ".bench-site"


def tv_import():
    """torchvision, also where its PyPI wheel's C++ operators do not load.

    The wheel PyPI has for torch 2.13 is built against torch's CUDA
    libraries; with the CPU build of torch its operator library does not
    load, and torchvision then fails on import registering a fake kernel
    for two of those operators (nms, qnms).  ImageFolder and the transforms
    used here never call them: their schemas are declared so that the
    import succeeds.  It is imported from .bench-site/ (scripts/deps.sh puts
    it there, off .venv's path)."""
    import torch
    if BENCH_SITE.is_dir() and str(BENCH_SITE) not in sys.path:
        sys.path.insert(0, str(BENCH_SITE))
    try:
        import torchvision
        return torchvision
    except RuntimeError as e:
        if "torchvision::nms" not in str(e):
            raise
    for m in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
        del sys.modules[m]
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
    tv_import.lib = lib  # the library must outlive the import
    import torchvision
    return torchvision


def run_torchvision(a):
    import torch
    torch.set_num_threads(1)
    tv = tv_import()
    T = tv.transforms
    ds = tv.datasets.ImageFolder(a.path, T.Compose([
        T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(), T.PILToTensor()]))
    torch.manual_seed(a.seed)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=CORES,
                                     persistent_workers=True)
    t0, c0 = time.perf_counter(), tree_cpu()
    if a.warm:
        for i, _ in enumerate(dl):
            if i + 1 >= a.warm:
                break
        t0, c0 = time.perf_counter(), tree_cpu()
    n = 0
    for x, y in dl:
        assert x.shape[1:] == (3, SIZE, SIZE) and x.dtype == torch.uint8
        n += x.shape[0]
    return n, time.perf_counter() - t0, tree_cpu() - c0


def run_dali(a):
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=a.batch, num_threads=CORES, device_id=None, seed=a.seed + 1)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=a.path, random_shuffle=True, name="files")
        x = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        x = fn.resize(x, resize_x=SIZE, resize_y=SIZE)
        x = fn.flip(x, horizontal=fn.random.coin_flip())
        return fn.transpose(x, perm=[2, 0, 1]), labels

    p = pipe()
    p.build()
    epoch = p.epoch_size("files")
    iters = -(-epoch // a.batch)
    t0, c0 = time.perf_counter(), tree_cpu()
    for _ in range(a.warm):
        p.run()
    if a.warm:
        t0, c0 = time.perf_counter(), tree_cpu()
    n = 0
    for _ in range(iters):
        x, y = p.run()
        arr = x.as_array()
        assert arr.shape[1:] == (3, SIZE, SIZE) and arr.dtype == np.uint8, arr.shape
        n += arr.shape[0]
    return n, time.perf_counter() - t0, tree_cpu() - c0


CHILDREN = {"stoker": run_stoker, "stoker in place": run_stoker, "torchvision": run_torchvision,
            "DALI (CPU)": run_dali}


def child(a):
    import warnings
    warnings.filterwarnings("ignore")
    try:
        n, dt, cpu = CHILDREN[a.child](a)
        out = {"images": n, "seconds": dt, "rate": n / dt, "cpu": cpu, "per_cpu": n / cpu}
    except Exception as e:  # reported as "not measured: why", not a failed bench
        out = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
    print(json.dumps(out), flush=True)
    os._exit(0)  # leave DataLoader workers and DALI's threads behind at once


def measure(name, path, batch, seed, warm_batches, field="image", timeout=900):
    cmd = [sys.executable, __file__, "--child", name, "--path", str(path), "--batch", str(batch),
           "--seed", str(seed), "--warm", str(warm_batches), "--field", field]
    return child_result(cmd, timeout)


# ---- which contenders can run here ------------------------------------------

def availability(d):
    """{contender: None (runs) or why it is not measured}."""
    why = {}
    py = [sys.executable, "-c"]

    def imports(code):
        r = subprocess.run(py + [code], capture_output=True, text=True)
        return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["?"])[-1]

    why["stoker"] = None
    idx = d / "inplace.idx"
    try:
        import stoker
        stoker.index(str(d / "folder"), str(idx))
        fields = stoker.Loader(str(idx), 1).fields
        why["stoker in place"] = None if "image" in fields else \
            f"the index of the folder has fields {fields}, no image field"
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        why["stoker in place"] = f"stoker.index does not take an image folder in this build ({msg})"
    e = imports("import sys; sys.path.insert(0, 'bench'); import media_images as m; m.tv_import()")
    why["torchvision"] = e and f"torchvision does not import: {e}"
    e = imports("import nvidia.dali")
    why["DALI (CPU)"] = e and ("nvidia-dali-cuda120 is not installed (requirements-bench.txt)"
                               if "No module" in e else f"DALI does not import: {e}")
    e = imports("import ffcv")
    why["FFCV"] = ("not installable: ffcv 1.0.2, PyPI's latest, is a source package (2023) "
                   "whose build needs OpenCV's C++ development files (pkg-config opencv4), "
                   "which this machine lacks; installing them to build it was not "
                   "attempted") if e else \
        "installed, but its .beton writer is not wired into this benchmark"
    return why


def ensure_tools():
    """bench/jpeg_limit.c and stoker-limits, built into the build folder."""
    src = ROOT / "bench" / "jpeg_limit.c"
    newest = max(src.stat().st_mtime, (ROOT / "bench" / "bench_time.h").stat().st_mtime)
    if not LIMIT.exists() or LIMIT.stat().st_mtime < newest:
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libjpeg", "spng"],
                               capture_output=True, text=True, check=True).stdout.split()
        subprocess.run(["cc", "-O2", "-std=c11", "-Wall", "-Wextra", "-o", str(LIMIT), str(src),
                        *flags, "-lpthread"], check=True)
    if not LIMITS.exists():
        subprocess.run(["cmake", "--build", str(BUILD), "--target", "stoker-limits"], check=True,
                       stdout=subprocess.DEVNULL)


def decode_limit(d):
    out = subprocess.run([str(LIMIT), str(CORES), "1", str(d / "files.txt")], check=True,
                         capture_output=True, text=True).stdout.split()
    return {"rate": float(out[1]), "jpeg_rate": float(out[2]), "mpix": float(out[3]),
            "jpegs": int(out[4]), "pngs": int(out[5]), "per_cpu": float(out[7])}


# ---- the report --------------------------------------------------------------

def commit():
    """HEAD's short hash, and whether the C sources differ from it."""
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True,
                              text=True).stdout.strip()
    dirty = git("status", "--porcelain", "--", "src", "include", "CMakeLists.txt")
    return (git("rev-parse", "--short", "HEAD") or "an unknown commit") + \
        (" with uncommitted changes to its C sources" if dirty else "")


def pil_version():
    import PIL
    return PIL.__version__


def dali_version():
    r = subprocess.run([sys.executable, "-c", "import nvidia.dali as d; print(d.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "(not installed)"


def fmt_runs(xs, f="{:,.0f}"):
    return ", ".join(f.format(x) for x in xs)


def report(p, args, why, res, lim, cold, fresh, seq, elapsed, env):
    st = p["stats"]
    c = st["counts"]
    ok = {k: v for k, v in res.items() if v and all("rate" in r for r in v)}
    for k, v in res.items():
        if k not in ok and why.get(k) is None:
            errs = [r["error"] for r in v if "error" in r]
            why[k] = "failed: " + (errs[0] if errs else "no runs")
    # Two figures a contender: images/s (wall clock) and images per CPU-second
    # (its processes' user + system time over the same epoch).  On a machine
    # others share, the first follows their load; the second much less.
    rows = {k: [r["rate"] for r in v] for k, v in ok.items()}
    cpus = {k: [r["per_cpu"] for r in v] for k, v in ok.items()}
    rows["limit"] = [x["rate"] for x in lim]
    cpus["limit"] = [x["per_cpu"] for x in lim]
    rate = {k: median(v) for k, v in rows.items()}
    pcpu = {k: median(v) for k, v in cpus.items()}
    peers = [k for k in ok if not k.startswith("stoker")]
    best = max(peers, key=rate.get) if peers else None
    best_cpu = max(peers, key=pcpu.get) if peers else None
    s, sc = rate.get("stoker"), pcpu.get("stoker")
    lim_jpeg = median([x["jpeg_rate"] for x in lim])
    png_share = median([1 - (x["jpegs"] / x["jpeg_rate"]) / ((x["jpegs"] + x["pngs"]) / x["rate"])
                        for x in lim])

    def ratio(k, bold=True):
        if not s or k.startswith("stoker"):
            return " | "
        b = "**" if bold else ""
        return f"{b}{s / rate[k]:.2f}x{b} | {b}{sc / pcpu[k]:.2f}x{b}"

    lines = [
        "## Images decoded by the loader (issue 38)", "",
        f"Machine: {env['machine']}; shared with other work while it ran (load average "
        f"{env['load'][0]:.1f} at the start, {env['load'][1]:.1f} at the end). stoker at "
        f"{env['commit']}. Mode: {args.mode}. Medians of {args.reps} repetitions; every "
        "contender ran in each repetition, in a rotating order, each in a process of its own. "
        f"Produced by `python bench/media_images.py{' --full' if args.mode == 'full' else ''}` "
        f"({elapsed / 60:.1f} min).", "",
        f"Data: {args.images:,} photograph-like images made here (smooth colour fields, shaded "
        "shapes and small clutter with soft edges, colour texture at three scales, sensor "
        f"noise), in {args.classes} class folders (ImageFolder's layout): mean "
        f"{st['mean_w']:.0f} x {st['mean_h']:.0f} px ({st['mean_mpix']:.3f} MP), mean "
        f"{st['mean_kib']:.0f} KiB, {st['total_mb']:.0f} MB in all. {c['rgb']:,} RGB JPEG "
        f"(quality {st['q_min']}-{st['q_max']}, 4:2:0 or 4:4:4; {st['progressive']:,} of all "
        f"the JPEGs progressive), {c['gray']} grayscale JPEG, {c['cmyk']} CMYK JPEG, "
        f"{c['png']} PNG with alpha. Packed by stoker.write in {p['pack_s']:.1f} s (the "
        "files' bytes as they are).", "",
        f"Every loader: {SIZE}x{SIZE} random-resized crops (scale 0.08-1, ratio 3/4-4/3), "
        f"random horizontal flip, uint8 [{args.batch}, 3, {SIZE}, {SIZE}] batches, random "
        f"order, {CORES} threads or workers ({CORES} cores), page cache warm; {args.warm} "
        "warm-up batches, then one epoch timed. Images per CPU-second: the images of that "
        "epoch over the user and system time of the contender's processes (DataLoader "
        "workers included) in it; the machine is shared, so its load moves images/s "
        "between repetitions more than it moves this.", "",
        "| loader | images/s | images per CPU-s | stoker is (images/s) | stoker is (per "
        "CPU-s) | images/s, runs |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for k in LOADERS:
        if k in ok:
            lines.append(f"| {k} | {rate[k]:,.0f} | {pcpu[k]:,.0f} | {ratio(k)} | "
                         f"{fmt_runs(rows[k])} |")
        else:
            lines.append(f"| {k} | not measured: {why.get(k) or 'no runs'} | | | | |")
    lines.append("| decode limit: every file decoded whole (libjpeg-turbo, libspng) | "
                 f"{rate['limit']:,.0f} | {pcpu['limit']:,.0f} | {ratio('limit')} | "
                 f"{fmt_runs(rows['limit'])} |")
    lines.append(f"| decode limit, the {lim[0]['jpegs']:,} JPEGs alone | {lim_jpeg:,.0f} | | | | "
                 f"{fmt_runs([x['jpeg_rate'] for x in lim])} |")
    lines.append("")
    if s and best:
        # Ratios within each repetition too: the machine's load drifts between them.
        pp = [rows["stoker"][i] / max(rows[k][i] for k in peers) for i in range(args.reps)]
        pl = [rows["stoker"][i] / rows["limit"][i] for i in range(args.reps)]
        lines += [
            f"stoker / best peer: **{s / rate[best]:.2f}x** in images/s ({best}), "
            f"**{sc / pcpu[best_cpu]:.2f}x** per CPU-second ({best_cpu}); target >= 1.5x. "
            f"stoker / full-decode limit: **{s / rate['limit']:.2f}x** in images/s, "
            f"**{sc / pcpu['limit']:.2f}x** per CPU-second; target >= 1.0x. In images/s "
            "within each repetition (against that repetition's best peer and limit): "
            f"{fmt_runs(pp, '{:.2f}')} and {fmt_runs(pl, '{:.2f}')}.", ""]
    lines += [
        "The decode limit is bench/jpeg_limit.c: the files held in memory, each decoded whole "
        f"at full size to RGB on {CORES} threads (libjpeg-turbo with its default slow integer "
        "IDCT and fancy upsampling, the settings stoker decodes with; libspng for the PNGs), "
        "no crop, no resize, no copy into a batch; "
        f"{median([x['mpix'] for x in lim]):,.0f} megapixels/s. A loader can pass it only "
        "by decoding less than the whole image: stoker decodes a JPEG at the smallest DCT "
        "scale that still covers the output and only the crop's rows and iMCU columns. The "
        f"{c['png']} PNGs ({100 * c['png'] / args.images:.0f}% of the files) take "
        f"{100 * png_share:.0f}% of the full decode's time (the median, from the passes over "
        "all the files and over the JPEGs alone); every loader decodes a PNG whole.", "",
        "torchvision is PyPI's 0.28.0 wheel (built for CUDA; its C++ operators and "
        "torchvision.io's decoders do not load with the CPU build of torch, so its "
        "`decode_jpeg` could not be tried; ImageFolder decodes with Pillow "
        f"{pil_version()} in any case). DALI is nvidia-dali-cuda120 "
        f"{dali_version()} with `device_id=None`: no GPU.", "",
    ]
    cr = [x["rate"] for x in cold if "rate" in x]
    wr = [x["rate"] for x in fresh if "rate" in x]
    if cr and wr:
        mb = p["stats"]["total_mb"] / args.images  # MB an image
        lines += [
            "### Cold first epoch, packed", "",
            "stoker's shards evicted from the page cache (posix_fadvise DONTNEED) before each "
            "cold run; cold and warm timed alike, from the Loader's creation to the epoch's end "
            "(start-up and the first batches included, no warm-up), in the same repetitions.", "",
            "| case | images/s | MB/s read |",
            "|---|---:|---:|",
            f"| stoker, cold | {median(cr):,.0f} | {median(cr) * mb:,.1f} |",
            f"| stoker, warm | {median(wr):,.0f} | {median(wr) * mb:,.1f} |",
            f"| the device's sequential read (O_DIRECT) | | {median(seq) * 1e3:,.0f} |", "",
            f"Cold / warm: **{median(cr) / median(wr):.2f}**; the cold epoch reads "
            f"{median(cr) * mb / (median(seq) * 1e3):.3f} of the device's sequential rate: "
            "decoding, not the device, sets its pace. Repetitions: cold " + fmt_runs(cr) +
            "; warm " + fmt_runs(wr) + " images/s; sequential read " +
            fmt_runs([x * 1e3 for x in seq]) + " MB/s (stoker-limits seqread over the shards, "
            "the best of its request sizes and depths).", "",
        ]
    elif cold:
        errs = [x.get("error") for x in cold + fresh if "error" in x]
        lines += [f"Cold first epoch: not measured: {errs[0] if errs else 'no runs'}", ""]
    text = "\n".join(lines)
    return text, {"rate": rate, "per_cpu": pcpu, "best_peer": best, "best_peer_cpu": best_cpu,
                  "limit_jpeg": lim_jpeg}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="20,000 images, batches of 256, 5 reps")
    ap.add_argument("--images", type=int)
    ap.add_argument("--classes", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--reps", type=int)
    ap.add_argument("--warm", type=int, default=3, help="warm-up batches before the timed epoch")
    ap.add_argument("--no-doc", action="store_true", help="print, do not write BENCHMARKS.md")
    ap.add_argument("--report", metavar="JSON", help="write the section from a run's saved "
                    "results (bench/out/media_images-MODE-IMAGES.json) without running anything")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--field", default="image", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    if a.report:
        return render(json.loads(Path(a.report).read_text()), a.no_doc)
    a.mode = "full" if a.full else "quick"
    a.images = a.images or (20000 if a.full else 2000)
    a.classes = a.classes or (100 if a.full else 10)
    a.batch = a.batch or (256 if a.full else 128)
    a.reps = a.reps or (5 if a.full else 3)
    t_all = time.perf_counter()
    env = {"machine": machine(), "load": [os.getloadavg()[0]], "commit": commit()}
    d = OUT / "media_images" / f"{a.mode}-{a.images}"
    p = make_data(d, a.images, a.classes)
    ensure_tools()
    why = availability(d)
    for k, v in why.items():
        if v:
            print(f"media_images: {k}: not measured: {v}", flush=True)
    paths = {"stoker": d / "packed.stk", "stoker in place": d / "inplace.idx",
             "torchvision": d / "folder", "DALI (CPU)": d / "folder", "FFCV": d / "folder"}
    run_these = [k for k in LOADERS if why.get(k) is None]
    res = {k: [] for k in run_these}
    lim, cold, fresh, seq = [], [], [], []
    shards = files_under(d / "packed.stk")
    folder_files = (d / "files.txt").read_text().split()
    for rep in range(a.reps):
        k = rep % (len(run_these) + 1)
        order = (run_these + ["limit"])[k:] + (run_these + ["limit"])[:k]
        for name in order:
            if name == "limit":
                warm(folder_files)
                lim.append(decode_limit(d))
                print(f"rep {rep + 1}: {'decode limit':16s} {lim[-1]['rate']:8,.0f} images/s "
                      f"(JPEGs alone {lim[-1]['jpeg_rate']:,.0f}; {lim[-1]['per_cpu']:,.0f} per "
                      "CPU-s)", flush=True)
                continue
            warm(shards if name == "stoker" else
                 files_under(paths[name]) + (folder_files if name == "stoker in place" else []))
            r = measure(name, paths[name], a.batch, rep, a.warm)
            res[name].append(r)
            print(f"rep {rep + 1}: {name:16s} " +
                  (f"{r['rate']:8,.0f} images/s ({r['images']} in {r['seconds']:.2f} s, "
                   f"{r['per_cpu']:,.0f} per CPU-s)"
                   if "rate" in r else "failed: " + r["error"]), flush=True)
        if why.get("stoker") is None:
            drop_cache(shards)
            seq.append(float(subprocess.run([str(LIMITS), "seqread", *shards], check=True,
                                            capture_output=True, text=True).stdout.split()[1]))
            drop_cache(shards)
            cold.append(measure("stoker", paths["stoker"], a.batch, rep, 0))
            warm(shards)
            fresh.append(measure("stoker", paths["stoker"], a.batch, rep, 0))
            print(f"rep {rep + 1}: stoker cold       " +
                  (f"{cold[-1]['rate']:8,.0f} images/s" if "rate" in cold[-1] else
                   "failed: " + cold[-1]["error"]) +
                  (f", warm from creation {fresh[-1]['rate']:,.0f}" if "rate" in fresh[-1] else "")
                  + f"; seqread {seq[-1]:.2f} GB/s", flush=True)
    env["load"].append(os.getloadavg()[0])
    raw = {"args": {k: v for k, v in vars(a).items()}, "params": p, "why": why, "results": res,
           "limit": lim, "cold": cold, "warm_from_start": fresh, "seqread": seq,
           "elapsed": time.perf_counter() - t_all, "env": env}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"media_images-{a.mode}-{a.images}.json").write_text(json.dumps(raw))
    render(raw, a.no_doc)


def render(raw, no_doc):
    """The section from a run's results (also --report FILE, without running)."""
    a = argparse.Namespace(**raw["args"])
    text, fig = report(raw["params"], a, raw["why"], raw["results"], raw["limit"], raw["cold"],
                       raw["warm_from_start"], raw["seqread"], raw["elapsed"], raw["env"])
    if not no_doc:
        write_section("media_images", text)
    print(text)
    print(fig)


if __name__ == "__main__":
    main()
