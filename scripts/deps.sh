#!/usr/bin/env bash
# Installs what building and testing stoker needs, and only what is missing:
# Debian packages through apt-get, Python tools into the project's .venv.
# Safe to run again; a second run on a ready machine takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the tests render the report's HTML page in it, headless
# (tests/python/test_report_html.py).  nasm: libjpeg-turbo's x86-64 SIMD
# code in the wheel (scripts/wheel-deps.sh).
PKGS=(gcc g++ make pkg-config ninja-build libzstd-dev liburing-dev libxxhash-dev
      libjansson-dev zlib1g-dev libhdf5-dev libcurl4-openssl-dev python3-venv chromium
      libjpeg62-turbo-dev libspng-dev libwebp-dev libflac-dev libmpg123-dev libvorbis-dev
      libopusfile-dev libsoxr-dev sox ffmpeg espeak-ng nasm)
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

# extra FILE WHAT: the packages of FILE, on top of requirements-dev.txt,
# installed into .venv when either file changed since the last time, with
# requirements-dev.txt as constraints (an extra never moves a package the
# tests pin: make test after make bench tests what CI tests).  Its
# "# no-deps: PKG" lines are installed without their declared dependencies,
# which that file lists by hand; torch must stay the CPU build pinned.
extra() {
    local req=$1 what=$2 stamp want nodeps
    stamp=.venv/.${req%.txt}.sha
    want=$(cat "$REQ" "$req" | sha256sum | cut -d' ' -f1)
    [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || return 0
    echo "deps: installing $what from $req"
    .venv/bin/python -m pip install -q -r "$req" -c "$REQ"
    nodeps=$(sed -n 's/^# no-deps: *//p' "$req")
    # shellcheck disable=SC2086
    [ -z "$nodeps" ] || .venv/bin/python -m pip install -q --no-deps $nodeps
    # "# site: PKG" lines go to .bench-site/, without their dependencies,
    # off .venv's path: a package that must not be importable by everything
    # (the benchmark that uses one puts the directory on its own path).
    site=$(sed -n 's/^# site: *//p' "$req")
    # shellcheck disable=SC2086
    [ -z "$site" ] || .venv/bin/python -m pip install -q --no-deps --upgrade --target .bench-site $site
    .venv/bin/python -c 'import torch, sys; v = torch.__version__.split("+")[0]; sys.exit(0 if v == "2.13.0" else "deps: torch " + v + " replaced 2.13.0")'
    echo "$want" >"$stamp"
}

# With ENGINES=1 (make test-full) or BENCH=1 (make bench): Dask and Ray.
if [ "${ENGINES:-0}" = 1 ] || [ "${BENCH:-0}" = 1 ]; then
    extra requirements-engines.txt "Dask and Ray"
fi
# With BENCH=1: the benchmarks' peers and tools.
if [ "${BENCH:-0}" = 1 ]; then
    extra requirements-bench.txt "the benchmarks' packages"
fi
