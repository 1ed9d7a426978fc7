"""Hugging Face `datasets` against stoker: one shuffled epoch over the same
table, a token-like int32 list column and a text column, in batches.

The table (made once under bench/out/hf/, untimed): --records rows, each a
list of 32-480 int32 tokens (mean 256: 1 KiB) and a text of 40-400 ASCII
characters; saved with `save_to_disk` and opened with `load_from_disk`
(memory-mapped, as a training script opens it), and packed by
`stoker.write` from that dataset.  The page cache is warm (each contender's
files read once before).

Contenders, every one in each repetition, rotating order, in this process;
one epoch each, random order, batches of --batch, every batch's fields
touched (len of each), medians of --reps:

    HF numpy           ds.shuffle(seed).with_format("numpy").iter(batch)
    HF arrow           ds.shuffle(seed).with_format("arrow").iter(batch)
                       (HF's fastest format: no per-row conversion)
    HF flatten+numpy   ds.shuffle(seed).flatten_indices() (timed: it
                       rewrites the table in shuffled order, which the
                       datasets docs advise before iterating), then numpy
    HF iterable        ds.to_iterable_dataset(num_shards=64)
                       .shuffle(seed, buffer_size=1000) in numpy format
                       (the docs' fast path; an approximate shuffle: shards
                       in random order, rows through a 1,000-row buffer)
    stoker list        stoker.Loader(shuffle="random"): text as lists of str
    stoker arrow       the same, strings="arrow"
    stoker torch       the same, output="torch" (tokens and text as
                       tensors with offsets)

    python bench/hf.py [--records 100000] [--batch 256] [--reps 5]

Writes the "hf" section of docs/BENCHMARKS.md.
"""
import argparse
import shutil
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import common  # noqa: E402


def make(out, n):
    import datasets
    import pyarrow as pa
    rng = np.random.default_rng(0)
    lens = rng.integers(32, 481, n)
    offs = np.zeros(n + 1, np.int32)
    np.cumsum(lens, out=offs[1:])
    vals = rng.integers(0, 50_000, int(offs[-1]), dtype=np.int32)
    toks = pa.ListArray.from_arrays(pa.array(offs), pa.array(vals))
    tl = rng.integers(40, 401, n)
    toffs = np.zeros(n + 1, np.int32)
    np.cumsum(tl, out=toffs[1:])
    chars = rng.integers(97, 123, int(toffs[-1]), dtype=np.uint8)
    chars[rng.random(len(chars)) < 0.15] = 32
    text = pa.StringArray.from_buffers(n, pa.py_buffer(toffs), pa.py_buffer(chars))
    table = pa.table({"tokens": toks, "text": text})
    ds = datasets.Dataset(datasets.table.InMemoryTable(table))
    ds.save_to_disk(str(out / "hf"))


def epoch_hf(ds, fmt, batch, seed, flatten=False):
    d = ds.shuffle(seed=seed)
    if flatten:
        d = d.flatten_indices()
    n = 0
    for b in d.with_format(fmt).iter(batch_size=batch):
        n += len(b["tokens"])
        len(b["text"])
    return n


def epoch_hf_iterable(ds, batch, seed):
    d = ds.to_iterable_dataset(num_shards=64).shuffle(seed=seed, buffer_size=1000)
    n = 0
    for b in d.with_format("numpy").iter(batch_size=batch):
        n += len(b["tokens"])
        len(b["text"])
    return n


def epoch_stoker(path, batch, seed, **kw):
    import stoker
    n = 0
    with stoker.Loader(path, batch, shuffle="random", seed=seed, **kw) as ld:
        for b in ld:
            n += len(b["tokens_offsets"]) - 1
            len(b["text"])
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print, leave BENCHMARKS.md")
    a = ap.parse_args()
    try:
        import datasets
    except ImportError:
        print("bench/hf.py: skipped: the datasets package is not installed "
              "(pip install -r requirements-dev.txt)", file=sys.stderr)
        return
    import stoker
    datasets.disable_progress_bars()
    out = common.OUT / "hf"
    tag = out / f"made-{a.records}"
    if not tag.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        make(out, a.records)
        tag.touch()
    ds = datasets.load_from_disk(str(out / "hf"))
    t0 = time.perf_counter()
    stoker.write(out / "stk", ds, overwrite=True)
    pack_s = time.perf_counter() - t0
    ds.cleanup_cache_files()
    for p in list((out / "hf").glob("data-*.arrow")) + list((out / "stk").glob("*.stk")):
        p.read_bytes()  # warm
    n = len(ds)
    cases = {
        "HF numpy": lambda s: epoch_hf(ds, "numpy", a.batch, s),
        "HF arrow": lambda s: epoch_hf(ds, "arrow", a.batch, s),
        "HF flatten+numpy": lambda s: epoch_hf(ds, "numpy", a.batch, s, flatten=True),
        "HF iterable": lambda s: epoch_hf_iterable(ds, a.batch, s),
        "stoker list": lambda s: epoch_stoker(out / "stk", a.batch, s),
        "stoker arrow": lambda s: epoch_stoker(out / "stk", a.batch, s, strings="arrow"),
        "stoker torch": lambda s: epoch_stoker(out / "stk", a.batch, s, output="torch"),
    }
    names = list(cases)
    times = {k: [] for k in names}
    for r in range(a.reps):
        for k in names[r % len(names):] + names[:r % len(names)]:
            t = time.perf_counter()
            got = cases[k](r)
            times[k].append(time.perf_counter() - t)
            assert got == n, (k, got, n)
            ds.cleanup_cache_files()  # (untimed: the shuffles' index and flatten files)
            print(f"rep {r} {k}: {times[k][-1]:.2f} s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["HF numpy"]
    data_mb = sum(p.stat().st_size for p in (out / "hf").glob("data-*.arrow")) / 2**20
    lines = [
        "## Hugging Face datasets against stoker, shuffled (issue: strings and HF sources)",
        "",
        f"Machine: {common.machine()}. datasets {datasets.__version__}. "
        f"{n:,} rows of a token list (int32, 32-480 tokens, mean 256) and a text "
        f"(40-400 ASCII characters), {data_mb:.0f} MiB of Arrow; the HF dataset opened "
        "with `load_from_disk` (memory-mapped), the stoker dataset packed from it by "
        f"`stoker.write(path, ds)` in {pack_s:.1f} s. Page cache warm. One epoch in "
        f"random order, batches of {a.batch}, every contender in each of {a.reps} "
        "repetitions in rotating order, in one process; medians. Produced by bench/hf.py.",
        "",
        "| contender | median s an epoch | rows/s | ratio to HF numpy |",
        "|---|---:|---:|---:|",
    ]
    for k in names:
        lines.append(f"| {k} | {med[k]:.2f} | {n / med[k]:,.0f} | "
                     f"{'baseline' if k == 'HF numpy' else f'**{base / med[k]:.2f}**'} |")
    lines += ["", "All repetitions (s): " + "; ".join(
        f"{k}: " + ", ".join(f"{x:.2f}" for x in times[k]) for k in names), "",
              f"Against HF's fastest uniform shuffle (arrow format), stoker's arrow strings "
              f"read the epoch {med['HF arrow'] / med['stoker arrow']:.1f}x as fast, and its "
              f"lists of str {med['HF arrow'] / med['stoker list']:.1f}x. "
              "HF iterable shuffles approximately (64 shards in random order, rows through a "
              "buffer of 1,000); the others draw a uniform permutation of the rows. HF "
              "flatten+numpy includes the flatten, which rewrites the whole table in "
              "shuffled order each epoch."]
    text = "\n".join(lines)
    print(text)
    if not a.no_write:
        common.write_section("hf", text)


if __name__ == "__main__":
    main()
