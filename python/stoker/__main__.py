"""python -m stoker pack --from parquet ... | read|doctor MIXTURE.json: the
parts of the command line that need Python (pyarrow reads Parquet; a
mixture of sources is stoker.Mixture). The `stoker` program hands
`pack --from parquet` and `read`/`doctor` of a .json mixture to this
module."""
import argparse
import glob
import json
import os
import re
import sys
import time

HELP = """\
Usage: stoker pack --from parquet GLOB... -o DATASET [options]

Packs Parquet files (read with pyarrow, streamed to stoker's C packer
through the Arrow C stream interface) into a dataset. Without --group-by
every row is a record; with it, every distinct value of the column is one
record holding its rows, sorted by --order-by.

  --group-by COL        one record per distinct value of COL
  --order-by COL        sort each record's rows by COL
  --field NAME=C1,C2..  stack columns into one field (repeatable; default:
                        one field per column)
  --static F1,F2..      with --group-by: exactly these fields hold one value
                        per record (default: every field whose rows are equal
                        within every group, such as a basin's attributes)
  --no-static           with --group-by: every field keeps its rows
  --compress NAME[:L]   zstd-compress field NAME (repeatable)
  --shard-size SIZE     shard size target (default 256M)
  --part I/N            pack part I of N (the I-th of N equal runs of the
                        sorted files; with --group-by a group's files must
                        fall in one part); `stoker merge` joins the parts
  --resume              continue an interrupted pack of the same files with
                        the same options (what it finished is kept; other
                        files or options are refused)
  --force               replace an existing dataset
  --no-sync             skip fsync
  --format-version N    1: the shard format every stoker reads; 2: records of
                        fixed-shape fields found by arithmetic; 0 (default):
                        2 where every field is fixed and uncompressed, else 1
  -q, --quiet           no summary

GLOB may be an s3:// URL: a prefix (every .parquet object under it), an
object, or a pattern (s3://bucket/basins/*.parquet), read with pyarrow's
S3 file system and the loader's credentials and endpoint (AWS_* variables,
AWS_ENDPOINT_URL for S3-compatible servers).

Example:
  stoker pack --from parquet 'basins/*.parquet' --group-by basin --order-by date \\
      --field x=prcp,tmax,tmin,srad --field y=q -o basins.stk

Usage: stoker pack --from arrow DIR|FILE... -o DATASET [the options above]

Packs Arrow IPC files, mapped rather than read: a directory's .arrow files
(a Hugging Face save_to_disk directory: one split's), or named Arrow IPC
stream or file (Feather v2) files, in order, of one schema.

Example:
  stoker pack --from arrow wiki/train -o wiki-train.stk
"""


def _size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = s.strip().lower().rstrip("b").rstrip("i")
    return int(float(s[:-1]) * mult[s[-1]]) if s and s[-1] in mult else int(s)


def _inputs_digest(files, options):
    """What the pack is made from (each file's name, identity, size and
    time, in order, and the options that shape the records) as the short
    string the writer records, with each input on a line of its own: resume
    refuses a journal that recorded another digest, and names the input
    that changed from the lines."""
    import hashlib
    h = hashlib.sha256()
    lines = []
    for f in files:
        h.update(repr(f).encode())
        h.update(b"\n")
        ends = hashlib.sha256()
        if f and f[0] != "s3":
            # A local file's first and last 4 KiB too: one rewritten in
            # place with its size and time put back still differs where its
            # header or footer changed (an object's ETag already says so).
            with open(f[0], "rb") as fh:
                ends.update(fh.read(4096))
                size = os.fstat(fh.fileno()).st_size
                if size > 4096:
                    fh.seek(max(size - 4096, 4096))
                    ends.update(fh.read(4096))
            h.update(ends.digest())
            name, size, mtime = f[0], f[3], f[4]
        else:
            name, size, mtime = f[1], f[2], f[3] if len(f) > 3 else 0
            ends.update(repr(f[4:]).encode())
        lines.append(f"{name}\t{size}\t{mtime}\t{ends.hexdigest()[:16]}\n")
    h.update(repr(options).encode())
    listed = "".join(lines)
    if any(c in ln[:ln.index("\t")] for ln in lines for c in "\t\n") or not listed:
        listed = None  # a name that cannot be listed: the digest alone
    return ("parquet-" + h.hexdigest()[:48], listed)


def _with_progress(reader, files, fs):
    """The reader, drawing a progress bar on stderr as its rows are read
    (the total from the files' footers)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    total = sum(pq.ParquetFile(f, filesystem=fs).metadata.num_rows for f in files)

    def batches():
        done, t0, last = 0, time.monotonic(), 0.0
        for b in reader:
            done += b.num_rows
            now = time.monotonic()
            if now - last > 0.2 or done == total:
                last = now
                frac = done / total if total else 1.0
                bar = "#" * int(30 * frac)
                rate = done / max(now - t0, 1e-9)
                sys.stderr.write(f"\rreading {len(files)} Parquet files [{bar:<30}] "
                                 f"{done:,}/{total:,} rows, {rate:,.0f} rows/s")
                sys.stderr.flush()
            yield b
        sys.stderr.write("\n")

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def pack_parquet(argv):
    if any(a in ("-h", "--help") for a in argv):
        print(HELP, end="")
        return 0
    ap = argparse.ArgumentParser(prog="stoker pack --from parquet", add_help=False)
    ap.add_argument("--from", dest="fmt", required=True)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--group-by")
    ap.add_argument("--order-by")
    ap.add_argument("--field", action="append", default=[])
    ap.add_argument("--compress", action="append", default=[])
    ap.add_argument("--static", action="append", default=[])
    ap.add_argument("--no-static", action="store_true")
    ap.add_argument("--shard-size", default="256M")
    ap.add_argument("--part")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--no-sync", action="store_true")
    ap.add_argument("--format-version", type=int, choices=(0, 1, 2), default=0)
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.fmt not in ("parquet", "arrow"):
        print(f"stoker pack: --from {a.fmt}: this path reads parquet and arrow", file=sys.stderr)
        return 2
    try:
        import pyarrow.dataset as pds
    except ImportError:
        print(f"stoker: error: --from {a.fmt} needs pyarrow (pip install pyarrow)",
              file=sys.stderr)
        return 2
    import stoker
    from ._parquet import resolve
    from . import _hf
    try:
        if a.fmt == "arrow":
            files, ident = _hf.ipc_files(a.paths)
            s3 = None
        else:
            files, ident, s3 = resolve(a.paths)
    except (OSError, ValueError, stoker.StokerError) as e:
        print(f"stoker: error: {e}", file=sys.stderr)
        return 2
    fields = None
    if a.field:
        fields = {}
        for spec in a.field:
            name, _, cols = spec.partition("=")
            if not name or not cols:
                print(f"stoker pack: --field wants NAME=COL[,COL...], not '{spec}'",
                      file=sys.stderr)
                return 2
            fields[name] = cols.split(",")
    compress = {}
    for spec in a.compress:
        name, _, level = spec.partition(":")
        compress[name] = int(level) if level else True
    static = None
    if a.no_static:
        static = []
    elif a.static:
        static = [f for spec in a.static for f in spec.split(",") if f]
    # Every part of a split pack records the same digest (of all the
    # files), so that merge can tell parts of one pack from another's.
    inputs = _inputs_digest(ident, (a.group_by, a.order_by, fields, static, compress,
                                    a.shard_size))
    part = None
    if a.part:
        i, _, n = a.part.partition("/")
        if not (i.isdigit() and n.isdigit()) or not 0 <= int(i) < int(n):
            print(f"stoker pack: --part wants I/N with 0 <= I < N, not '{a.part}'",
                  file=sys.stderr)
            return 2
        part = (int(i), int(n))
        lo, hi = len(files) * part[0] // part[1], len(files) * (part[0] + 1) // part[1]
        files, ident = files[lo:hi], ident[lo:hi]
    t0 = time.perf_counter()
    try:
        if a.fmt == "arrow":
            reader = _hf.ipc_reader(files)
        else:
            reader = pds.dataset(files, format="parquet", filesystem=s3).scanner().to_reader()
            if not a.quiet and sys.stderr.isatty():
                reader = _with_progress(reader, files, s3)
        n = stoker.write(a.output, reader, group_by=a.group_by, order_by=a.order_by,
                         fields=fields, compress=compress or None, static=static,
                         shard_bytes=_size(a.shard_size), overwrite=a.force,
                         sync=not a.no_sync, attrs={"source": a.fmt, "files": len(files)},
                         part=part, resume=a.resume, inputs=inputs,
                         format_version=a.format_version,
                         progress=False)  # (its own bar, from the files' footers)
    except (stoker.StokerError, ValueError, TypeError, OSError) as e:
        msg = str(e)
        print(f"stoker: error: {msg}", file=sys.stderr)
        return 2
    if not a.quiet:
        el = time.perf_counter() - t0
        kind = "Arrow" if a.fmt == "arrow" else "Parquet"
        print(f"packed {n} records from {len(files)} {kind} files into {a.output} "
              f"in {el:.2f} s")
        from ._write import last_order_report, order_note
        note = order_note(last_order_report) if a.group_by and a.order_by else None
        if a.group_by and not a.order_by:
            note = unordered_note(reader.schema, a.group_by)
        if note:
            print(note)
    return 0


def unordered_note(schema, group_by):
    """What a grouped pack without --order-by says: each group's rows are
    in the order they were read, which is the files' order, shuffled if the
    files are; a column of dates or times is named as the likely order."""
    timelike = [f.name for f in schema if f.name != group_by and (
        str(f.type).startswith(("date", "timestamp", "time"))
        or f.name.lower() in ("date", "time", "datetime", "timestamp", "day", "step", "t"))]
    line = (f"each group's rows are in the order they were read (no --order-by): "
            f"series from unsorted files are unsorted")
    if timelike:
        line += f"; to order them by time: --order-by {timelike[0]}"
    return line


def read_mixture(argv, doctor):
    """stoker read|doctor MIXTURE.json: one run of a mixture, taking each
    batch and giving it back the way a training loop would; reports samples/s,
    GB/s of batch data, the stall (the share of the time spent waiting for
    batches) and each source's share.  doctor also spends --step-ms of CPU
    after each batch, as a model would, and says whether the run was bound
    by its input."""
    cmd = "doctor" if doctor else "read"
    ap = argparse.ArgumentParser(prog=f"stoker {cmd} MIXTURE.json")
    ap.add_argument("path")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--shuffle", default=None)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--epoch", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--world-size", type=int, default=None)
    ap.add_argument("--streams", type=int, default=None)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--budget", default="1G")
    ap.add_argument("--prefetch", type=int, default=0)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--max-batches", type=int, default=None)
    ap.add_argument("--step-ms", type=float, default=0.0 if not doctor else 0.0)
    ap.add_argument("--json", action="store_true")
    if doctor:
        ap.add_argument("--html", default=None, metavar="FILE",
                        help="also write the report as one self-contained page")
    a = ap.parse_args(argv)
    import numpy as np
    import stoker
    from ._mix import load_description
    try:
        d = load_description(a.path)
        opts = {k: d[k] for k in ("exhaust", "homogeneous", "seed", "shuffle", "streams")
                if k in d}
        for k in ("seed", "shuffle", "streams"):
            if getattr(a, k) is not None:
                opts[k] = getattr(a, k)
        mx = stoker.Loader(d["sources"], a.batch, epoch=a.epoch, rank=a.rank,
                           world_size=a.world_size, threads=a.threads,
                           memory_budget=_size(a.budget), prefetch=a.prefetch,
                           backend=a.backend, verify=not a.no_verify, **opts)
    except (stoker.StokerError, ValueError, TypeError, OSError) as e:
        print(f"stoker {cmd}: error: {e}", file=sys.stderr)
        return 2
    max_batches = a.max_batches if a.max_batches is not None else (200 if doctor else None)
    samples = nbytes = batches = 0
    per = np.zeros(len(mx.sources), np.int64)
    waited = 0.0
    t0 = time.perf_counter()
    try:
        with mx:
            for _ in range(a.epochs):
                taken = 0
                it = iter(mx)
                while max_batches is None or taken < max_batches:
                    w0 = time.perf_counter()
                    b = next(it, None)
                    waited += time.perf_counter() - w0
                    if b is None:
                        break
                    taken += 1
                    batches += 1
                    src = np.asarray(b["source"])
                    samples += len(src)
                    per += np.bincount(src, minlength=len(per))
                    nbytes += sum(np.asarray(v).nbytes for k, v in b.items() if k != "source")
                    if a.step_ms > 0:
                        end = time.perf_counter() + a.step_ms / 1e3
                        while time.perf_counter() < end:
                            pass
                    b = None
                if max_batches is not None and taken >= max_batches:
                    mx.set_epoch(mx.epoch + 1)
            if doctor and a.html:
                # The page is stoker.profile's (a mixture profiles as a
                # loader does), from runs of its own over the same batches.
                def spin(_batch, s=a.step_ms / 1e3):
                    end = time.perf_counter() + s
                    while time.perf_counter() < end:
                        pass
                stoker.profile(mx, step=spin if a.step_ms > 0 else None,
                               batches=max_batches or 200).to_html(a.html)
    except stoker.StokerError as e:
        print(f"stoker {cmd}: error: {e}", file=sys.stderr)
        return 2
    el = time.perf_counter() - t0
    stall = waited / el if el > 0 else 0.0
    out = {"samples": samples, "batches": batches, "seconds": el,
           "samples_per_s": samples / el if el > 0 else 0.0,
           "gb_per_s": nbytes / el / 1e9 if el > 0 else 0.0, "stall": stall,
           "sources": [{"path": s.path, "samples": int(n),
                        "share": float(n) / samples if samples else 0.0}
                       for s, n in zip(mx.sources, per)]}
    if doctor:
        out["verdict"] = ("loader alone" if a.step_ms <= 0 else
                          "input-bound" if stall > 0.1 else
                          "balanced" if stall > 0.02 else "compute-bound")
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"{samples} samples in {batches} batches, {el:.3f} s: {out['samples_per_s']:,.0f} "
          f"samples/s, {out['gb_per_s']:.3f} GB/s, stall {100 * stall:.1f}%")
    for i, s in enumerate(out["sources"]):
        print(f"  source {i} {s['path']}: {s['samples']} samples ({100 * s['share']:.1f}%)")
    if doctor:
        print(f"verdict: {out['verdict']}" + ("" if a.step_ms > 0 else
              " (give --step-ms, the model's time per batch, to judge a training run)"))
    return 0

MEDIA_HELP = """\
Usage: stoker pack --from images DIR -o DATASET [options]
       stoker pack --from audio DIR -o DATASET [options]

Packs a folder of images (.jpg .jpeg .png .webp) or audio clips (.flac .mp3
.ogg .opus), each file one record stored as it is (never re-encoded), for
Loader(decode=...) to decode.  Every file's header is read as it is packed:
one that is not such media stops the pack, named.  Records:
  image | audio   the file's bytes (a field typed "image" or "audio")
  label           int64: the index of the file's class, its first sub-folder
                  under DIR in sorted order (as torchvision's ImageFolder);
                  the class names are the dataset's attrs["classes"]
  path            the file's path under DIR (a string)
Files come in the byte order of their paths.

  -o, --output DATASET  the dataset to write
  --labels TABLE        labels from a CSV (header: file,label) or Parquet
                        table of file (a path under DIR) and label (an int,
                        or a class name: names are numbered in sorted
                        order); files it does not list are refused
  --no-labels           no label field (and no classes)
  --field NAME          the media field's name (default image or audio)
  --shard-size SIZE     bytes per shard (default 256M)
  --force               replace an existing dataset
  --no-sync             do not fsync the shards
  -q, --quiet           no progress or summary

Example:
  stoker pack --from images imagenet/train -o train.stk
  stoker read train.stk --help   # and in Python:
  stoker.Loader("train.stk", 256, decode={"image": stoker.DecodeImage(224, flip=True)})
"""

_MEDIA_EXT = {"images": (".jpg", ".jpeg", ".png", ".webp"),
              "audio": (".flac", ".mp3", ".ogg", ".opus")}


def _media_files(root, exts):
    out = []
    for dirpath, dirs, names in os.walk(root, followlinks=True):
        dirs.sort()
        for n in names:
            if n.lower().endswith(exts):
                out.append(os.path.join(dirpath, n))
    return sorted(out, key=lambda p: os.fsencode(p))


def _label_table(path):
    """{file: label} from a CSV (file,label) or Parquet table."""
    if path.lower().endswith((".parquet", ".pq")):
        import pyarrow.parquet as pq
        t = pq.read_table(path)
        if t.num_columns < 2:
            raise ValueError(f"{path}: a labels table needs two columns, file and label")
        files, labels = t.column(0).to_pylist(), t.column(1).to_pylist()
    else:
        import csv
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        if not rows or len(rows[0]) < 2:
            raise ValueError(f"{path}: a labels table needs a header and two columns, "
                             "file and label")
        files, labels = [r[0] for r in rows[1:]], [r[1] for r in rows[1:]]
        if all(x.lstrip("-").isdigit() for x in labels):
            labels = [int(x) for x in labels]
    return dict(zip((os.path.normpath(f) for f in files), labels))


def pack_media(argv):
    if any(a in ("-h", "--help") for a in argv):
        print(MEDIA_HELP, end="")
        return 0
    ap = argparse.ArgumentParser(prog="stoker pack --from images|audio", add_help=False)
    ap.add_argument("--from", dest="fmt", required=True)
    ap.add_argument("paths", nargs=1)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--labels")
    ap.add_argument("--no-labels", action="store_true")
    ap.add_argument("--field")
    ap.add_argument("--shard-size", default="256M")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--no-sync", action="store_true")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    import numpy as np
    import stoker
    root = a.paths[0]
    kind = "image" if a.fmt == "images" else "audio"
    field = a.field or kind
    if not os.path.isdir(root):
        print(f"stoker: error: {root}: not a directory (pack --from {a.fmt} takes a folder)",
              file=sys.stderr)
        return 2
    files = _media_files(root, _MEDIA_EXT[a.fmt])
    if not files:
        print(f"stoker: error: {root}: no {' '.join(_MEDIA_EXT[a.fmt])} files found",
              file=sys.stderr)
        return 2
    rel = [os.path.relpath(f, root) for f in files]
    attrs = {"source": a.fmt, "files": len(files)}
    labels = None
    try:
        if a.labels:
            table = _label_table(a.labels)
            missing = [r for r in rel if os.path.normpath(r) not in table]
            if missing:
                raise ValueError(f"{a.labels}: no label for {missing[0]}"
                                 + (f" (and {len(missing) - 1} more files)" if len(missing) > 1
                                    else ""))
            raw = [table[os.path.normpath(r)] for r in rel]
            if all(isinstance(x, int) for x in raw):
                labels = raw
            else:
                classes = sorted({str(x) for x in raw})
                attrs["classes"] = classes
                idx = {c: i for i, c in enumerate(classes)}
                labels = [idx[str(x)] for x in raw]
        elif not a.no_labels:
            tops = [r.split(os.sep)[0] if os.sep in r else "" for r in rel]
            if all(tops):
                classes = sorted(set(tops))
                attrs["classes"] = classes
                idx = {c: i for i, c in enumerate(classes)}
                labels = [idx[t] for t in tops]
            else:
                flat = next(r for r, t in zip(rel, tops) if not t)
                raise ValueError(f"{root}: {flat} is not in a class sub-folder; give --labels "
                                 "TABLE or --no-labels")
    except (OSError, ValueError) as e:
        print(f"stoker: error: {e}", file=sys.stderr)
        return 2

    def records():
        for i, (f, r) in enumerate(zip(files, rel)):
            with open(f, "rb") as fh:
                rec = {field: fh.read()}
            if labels is not None:
                rec["label"] = np.int64(labels[i])
            rec["path"] = r
            yield rec

    t0 = time.perf_counter()
    try:
        n = stoker.write(a.output, records(), fields={field: getattr(stoker, kind.title())()},
                         shard_bytes=_size(a.shard_size), overwrite=a.force,
                         sync=not a.no_sync, attrs=attrs,
                         progress=None if not a.quiet else False)
    except (stoker.StokerError, ValueError, TypeError, OSError) as e:
        msg = str(e)
        # (A record number is a file: say which.)
        m = re.match(r".*record (\d+)", msg)
        if m and int(m.group(1)) < len(files):
            msg = f"{files[int(m.group(1))]}: {msg}"
        print(f"stoker: error: {msg}", file=sys.stderr)
        return 2
    if not a.quiet:
        print(f"packed {n} {kind} files from {root} into {a.output} in "
              f"{time.perf_counter() - t0:.2f} s"
              + (f" ({len(attrs['classes'])} classes)" if "classes" in attrs else ""))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pack"]:
        fmt = argv[argv.index("--from") + 1] if "--from" in argv[:-1] else None
        if fmt in ("images", "audio"):
            return pack_media(argv[1:])
        return pack_parquet(argv[1:])
    if argv[:1] in (["read"], ["doctor"]):
        return read_mixture(argv[1:], argv[0] == "doctor")
    print("usage: python -m stoker pack --from parquet ... | read|doctor MIXTURE.json ...",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
