#!/usr/bin/env bash
# The sdist built where there is no wheel: a clean Debian root (bookworm,
# amd64, the wheel check's) given a C compiler and the build tools only
# (gcc, cmake, ninja, pkgconf, and the interpreter's own headers, which any
# build of a Python extension needs), none of stoker's libraries nor their
# -dev packages: `pip install stoker-*.tar.gz` must fetch and build them
# (CMakeLists.txt, STK_FETCH_DEPS), and the result passes the wheel check's
# smoke run.  Needs root; says so and exits 0 without it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=$ROOT/.venv/bin/python
. scripts/clean-root.sh
root_needed sdist-check
rm -f dist/stoker-*.tar.gz
"$PY" -m build --sdist -o dist/ . >/dev/null
SDIST=$(ls dist/stoker-*.tar.gz)
BASE=.cache/bookworm-amd64-minbase.tar
[ -f "$BASE" ] || scripts/wheel-check.sh x86_64 >/dev/null  # makes the root file system
W=$ROOT/build-wheel/sdist-check
R=$W/root
root_fresh
root_mount
root_apt gcc libc6-dev cmake ninja-build pkgconf python3-dev python3-venv
# (zlib1g-dev comes with python3-dev, whose headers include it: it may be
# there; the build takes the fetched zlib all the same.)
for pkg in libzstd-dev liburing-dev libxxhash-dev libjansson-dev libcurl4-openssl-dev libhdf5-dev; do
    if chroot "$R" dpkg -s "$pkg" >/dev/null 2>&1; then
        echo "sdist-check: the root has $pkg" >&2
        exit 1
    fi
done
mkdir -p "$R/wheels" "$R/check/tests/fuzz/crashers"
cp "$SDIST" "$R/check/"
# What pip needs, from a folder (this machine reaches PyPI through a proxy
# whose certificate the clean root does not trust): the users' companions,
# and the build's own requirements (scikit-build-core, and CMake from PyPI:
# bookworm's 3.25 is older than the 3.26 the stable ABI's module needs).
"$PY" -m pip download -q --only-binary :all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform any -d "$W/wheels" \
    numpy pyarrow h5py pytest scikit-build-core "cmake>=3.26" ninja 2>&1 |
    grep -v "^WARNING: Location" || true
cp "$W"/wheels/*.whl "$R/wheels/"
cp -r tests/python tests/wheel "$R/check/tests/"
cp -r tests/fuzz/crashers/hdf5 "$R/check/tests/fuzz/crashers/"
cat > "$R/check/run.sh" <<'RUN'
set -eu
cd /check
python3 -m venv /v
/v/bin/pip install -q --no-index --find-links /wheels numpy pyarrow h5py pytest
/v/bin/pip install -q --no-index --find-links /wheels /check/stoker-*.tar.gz
STK_CHECK_SMOKE=1 STK_CHECK_SDIST=1 /v/bin/python tests/wheel/check_installed.py
STOKER_BUILD=/v/bin /v/bin/python -m pytest -q -p no:cacheprovider \
    tests/python/test_py_values.py tests/python/test_py_verify.py tests/python/test_cli_verify.py
RUN
chroot "$R" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 /bin/sh /check/run.sh
echo "sdist-check: $(basename "$SDIST"): built and checked in a root with a compiler and no -dev library"
