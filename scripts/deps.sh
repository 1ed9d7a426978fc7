#!/usr/bin/env bash
# Installs what building and testing stoker needs, and only what is missing:
# Debian packages through apt-get, Python tools into the project's .venv.
# Safe to run again; a second run on a ready machine takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the tests render the report's HTML page in it, headless
# (tests/python/test_report_html.py).
PKGS=(gcc g++ make pkg-config ninja-build libzstd-dev liburing-dev libxxhash-dev
      libjansson-dev zlib1g-dev libhdf5-dev libcurl4-openssl-dev python3-venv chromium)
command -v cmake >/dev/null 2>&1 || PKGS+=(cmake)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# python3-venv is not needed where python3 already has a working venv module.
if [ ${#missing[@]} -gt 0 ] && python3 -c 'import venv, ensurepip' 2>/dev/null; then
    missing=("${missing[@]/python3-venv}")
    read -r -a missing <<<"${missing[*]}"
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing Debian packages: ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The virtual environment for the Python tests and tools; rebuilt when the
# requirements change.
REQ=requirements-dev.txt
STAMP=.venv/.requirements.sha
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    echo "deps: preparing .venv from $REQ"
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -r "$REQ"
    echo "$want" >"$STAMP"
fi

# With ENGINES=1 (make test-full, make bench): Dask and Ray, from
# requirements-engines.txt.
if [ "${ENGINES:-0}" = 1 ] || [ "${BENCH:-0}" = 1 ]; then
    EREQ=requirements-engines.txt
    ESTAMP=.venv/.requirements-engines.sha
    ewant=$(cat "$REQ" "$EREQ" | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$ESTAMP" 2>/dev/null)" != "$ewant" ]; then
        echo "deps: installing Dask and Ray from $EREQ"
        .venv/bin/python -m pip install -q -r "$EREQ"
        echo "$ewant" >"$ESTAMP"
    fi
fi

# With BENCH=1 (make bench): the benchmarks' peers and tools, from
# requirements-bench.txt. Its "# no-deps: PKG" lines are installed without
# their declared dependencies, which that file lists by hand.
if [ "${BENCH:-0}" = 1 ]; then
    BREQ=requirements-bench.txt
    BSTAMP=.venv/.requirements-bench.sha
    bwant=$(cat "$REQ" "$BREQ" | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$BSTAMP" 2>/dev/null)" != "$bwant" ]; then
        echo "deps: installing the benchmarks' packages from $BREQ"
        .venv/bin/python -m pip install -q -r "$BREQ"
        nodeps=$(sed -n 's/^# no-deps: *//p' "$BREQ")
        # shellcheck disable=SC2086
        [ -z "$nodeps" ] || .venv/bin/python -m pip install -q --no-deps $nodeps
        .venv/bin/python -c 'import torch, sys; v = torch.__version__.split("+")[0]; sys.exit(0 if v == "2.13.0" else "deps: torch " + v + " replaced 2.13.0")'
        echo "$bwant" >"$BSTAMP"
    fi
fi
