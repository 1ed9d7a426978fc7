"""python -m stoker pack --from parquet ...: the parts of the command line
that need Python libraries (pyarrow reads Parquet). The `stoker` program
hands `pack --from parquet` to this module."""
import argparse
import glob
import json
import os
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
  --force               replace an existing dataset
  --no-sync             skip fsync
  -q, --quiet           no summary

Example:
  stoker pack --from parquet 'basins/*.parquet' --group-by basin --order-by date \\
      --field x=prcp,tmax,tmin,srad --field y=q -o basins.stk
"""


def _size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = s.strip().lower().rstrip("b").rstrip("i")
    return int(float(s[:-1]) * mult[s[-1]]) if s and s[-1] in mult else int(s)


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
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--no-sync", action="store_true")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    try:
        import pyarrow.dataset as pds
    except ImportError:
        print("stoker: error: --from parquet needs pyarrow (pip install pyarrow)", file=sys.stderr)
        return 2
    import stoker
    files = []
    for p in a.paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "**", "*.parquet"), recursive=True))
        else:
            hits = sorted(glob.glob(p))
            if not hits:
                print(f"stoker: error: {p}: no such file", file=sys.stderr)
                return 2
            files += hits
    if not files:
        print("stoker: error: no Parquet files found", file=sys.stderr)
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
    t0 = time.perf_counter()
    try:
        reader = pds.dataset(files, format="parquet").scanner().to_reader()
        n = stoker.write(a.output, reader, group_by=a.group_by, order_by=a.order_by,
                         fields=fields, compress=compress or None, static=static,
                         shard_bytes=_size(a.shard_size), overwrite=a.force,
                         sync=not a.no_sync, attrs={"source": "parquet", "files": len(files)})
    except (stoker.StokerError, ValueError, TypeError, OSError) as e:
        msg = str(e)
        print(f"stoker: error: {msg}", file=sys.stderr)
        return 2
    if not a.quiet:
        el = time.perf_counter() - t0
        print(f"packed {n} records from {len(files)} Parquet files into {a.output} "
              f"in {el:.2f} s")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pack"]:
        return pack_parquet(argv[1:])
    print("usage: python -m stoker pack --from parquet ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
