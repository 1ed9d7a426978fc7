#!/usr/bin/env bash
# Builds the third-party libraries a wheel carries, as static archives, for
# one target: zstd, xxHash, Jansson, zlib and liburing, and for the wheels
# the media decoders' (libjpeg-turbo, libspng, libwebp's decoder, libFLAC,
# libmpg123, libogg, libvorbis, libopus, opusfile and libsoxr), from
# Debian's source packages (bookworm), each pinned by name and SHA-256 and
# checked before it is unpacked, with Debian's own patches to them (its
# security fixes among them); nothing of theirs is committed here.  The compiler
# is zig's clang (PyPI's ziglang), aimed at glibc 2.28, so that the objects
# ask nothing of glibc newer than RHEL 8 and Ubuntu 20.04 have.
#
# libcurl is not built: stoker loads the system's at run time (for its TLS
# library and CA certificates); only curl's headers are taken.
#
# Usage: wheel-deps.sh ARCH OUT   (ARCH: x86_64 or aarch64)
#        wheel-deps.sh native OUT   (this machine's compiler, $CC or cc: what
#        a build from the sdist does where the libraries are not installed;
#        the media libraries are left out there: a build from the sdist
#        decodes what the system's libraries allow)
# Leaves OUT/lib/*.a, OUT/include, OUT/lib/pkgconfig/*.pc, OUT/licenses/*
# and OUT/zcc (the compiler wrapper the rest of the build uses).
set -euo pipefail
ARCH=$1
OUT=$(realpath -m "$2")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
CACHE=${STK_SRC_CACHE:-$ROOT/.cache/wheel-src}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
TARGET=$ARCH-linux-gnu.2.28
mkdir -p "$OUT"/{lib/pkgconfig,include,licenses,src} "$CACHE"

# The compiler: zig cc for the target, as one executable path for CMake
# and configure scripts.  -fno-sanitize=undefined: zig turns UBSan's trap
# mode on in debug builds, which libraries built here never want.
#
# And every call of memcpy, memmove, memset, memcmp, bcmp and strlen binds
# to glibc's: zig links its compiler_rt as one object, which also defines
# those (generic code, weak); an object that needs anything of it (128-bit
# division, say) pulls them in, and they then win over glibc's, which pick
# the widest vector unit at load time.  Measured so: the loader's windows
# (memcpy-bound) ran 8% slower in the wheel, 60% of its time in zig's
# memcpy.  A versioned reference can only be met by glibc.
NATIVE=0
if [ "$ARCH" = native ]; then
    NATIVE=1
    NATIVE_CC=${CC:-cc}
    ARCH=$(uname -m)
    cat > "$OUT/zcc" <<NCC
#!/bin/sh
exec $NATIVE_CC "\$@"
NCC
    cat > "$OUT/zar" <<NAR
#!/bin/sh
exec ${AR:-ar} "\$@"
NAR
    : > "$OUT/glibc-string.h"
elif true; then
if [ "$ARCH" = x86_64 ]; then V=GLIBC_2.2.5; VCPY=GLIBC_2.14; else V=GLIBC_2.17; VCPY=GLIBC_2.17; fi
cat > "$OUT/glibc-string.h" <<H
#ifndef __ASSEMBLER__
__asm__(".symver memcpy,memcpy@$VCPY");
__asm__(".symver memmove,memmove@$V");
__asm__(".symver memset,memset@$V");
__asm__(".symver memcmp,memcmp@$V");
__asm__(".symver bcmp,bcmp@$V");
__asm__(".symver strlen,strlen@$V");
#endif
H
cat > "$OUT/zcc" <<ZCC
#!/bin/sh
exec "$PY" -m ziglang cc -target $TARGET -fno-sanitize=undefined -include $OUT/glibc-string.h "\$@"
ZCC
cat > "$OUT/zar" <<ZAR
#!/bin/sh
exec "$PY" -m ziglang ar "\$@"
ZAR
fi
chmod +x "$OUT/zcc" "$OUT/zar"
CC="$OUT/zcc"
CFLAGS="-O2 -fPIC -g0"

# name, pool directory, file, SHA-256 (from bookworm's Sources index)
SOURCES=(
  "zstd pool/main/libz/libzstd libzstd_1.5.4+dfsg2.orig.tar.xz 8cf4bbb65e77ec348d052c8d6230eba66d435bddf64c8b5be2fcb16880c19953"
  "xxhash pool/main/x/xxhash xxhash_0.8.1.orig.tar.gz 3bb6b7d6f30c591dd65aaaff1c8b7a5b94d81687998ca9400082c739a690436c"
  "jansson pool/main/j/jansson jansson_2.14.orig.tar.gz c739578bf6b764aa0752db9a2fdadcfe921c78f1228c7ec0bb47fa804c55d17b"
  "zlib pool/main/z/zlib zlib_1.2.13.dfsg.orig.tar.bz2 71feb7947e3c00ef125f83b79a4e529bde31171e5babe48b391f06758d1ab0a1"
  "liburing pool/main/libu/liburing liburing_2.3.orig.tar.gz 2eac26f880125d83f75ba8641fde5d88226dd352d3cee95d45a9128758a8f1be"
  "curl pool/main/c/curl curl_7.88.1.orig.tar.gz cdb38b72e36bc5d33d5b8810f8018ece1baa29a8f215b4495e495ded82bbf3c7"
)
# The media libraries, for the wheels: the original tarball, then Debian's
# packaging (debian/patches is applied as Debian's build applies it:
# libwebp's CVE-2023-4863, mpg123's CVE-2024-10573 and opusfile's
# CVE-2022-47021 fixes are there, not in the original tarballs).
MEDIA_SOURCES=(
  "jpeg pool/main/libj/libjpeg-turbo libjpeg-turbo_2.1.5.orig.tar.gz 254f3642b04e309fee775123133c6464181addc150499561020312ec61c1bf7c libjpeg-turbo_2.1.5-2.debian.tar.xz cdb2433c2f7101345c1ffa14efb943787c675b86354691a32490845fe4bc9237"
  "spng pool/main/libs/libspng libspng_0.7.3.orig.tar.gz a50cadbe808ffda1a7fab17d145f52a23b163f34b3eb3696c7ecb5a52340fc1d libspng_0.7.3-3.debian.tar.xz d24b992ef0839350dda99083a0c62a0bb1e403800ba9e9dfcf57754ba297d187"
  "webp pool/main/libw/libwebp libwebp_1.2.4.orig.tar.gz 7bf5a8a28cc69bcfa8cb214f2c3095703c6b73ac5fba4d5480c205331d9494df libwebp_1.2.4-0.2+deb12u1.debian.tar.xz 69cdba4dfe2e1b34d55fa80c1b29c31cacd40dd183812d6bcca7e508a2f7afcd"
  "flac pool/main/f/flac flac_1.4.2+ds.orig.tar.xz 47274ac8fcb1f0e6caa91d29f943925d7a40c0a3f6357c3275773bdb1ee46638 flac_1.4.2+ds-2.debian.tar.xz 8e3132e8e4a6e459c5a360c8a7e85c2aa6e2a0612687ef124ff65bcae82e90d8"
  "mpg123 pool/main/m/mpg123 mpg123_1.31.2.orig.tar.bz2 b17f22905e31f43b6b401dfdf6a71ed11bb7d056f68db449d70b9f9ae839c7de mpg123_1.31.2-1+deb12u1.debian.tar.xz 9fc7eeeb4be67525fb7901022955b646832f095499612672ad7c24a1b3303599"
  "ogg pool/main/libo/libogg libogg_1.3.5.orig.tar.xz c4d91be36fc8e54deae7575241e03f4211eb102afb3fc0775fbbc1b740016705 libogg_1.3.5-3.debian.tar.xz 980cc7c95d72d2a9c56cf9d602b8296c6551528890f28fee6769b801ea0e54f3"
  "vorbis pool/main/libv/libvorbis libvorbis_1.3.7.orig.tar.gz 0e982409a9c3fc82ee06e08205b1355e5c6aa4c36bca58146ef399621b0ce5ab libvorbis_1.3.7-1.debian.tar.xz c5c40944a3fc1cdd1ce019ef21f580ce5ed3b9f30e0cba7b3d859e8d9fea631f"
  "opus pool/main/o/opus opus_1.3.1.orig.tar.gz 65b58e1e25b2a114157014736a3d9dfeaad8d41be1c8179866f144a2fb44ff9d opus_1.3.1-3.debian.tar.xz f4a145f0d5b9140106396fc0b0c515b1c3abd59f2aa5fb62b36b69886aa411bc"
  "opusfile pool/main/o/opusfile opusfile_0.12.orig.tar.gz 118d8601c12dd6a44f52423e68ca9083cc9f2bfe72da7a8c1acb22a80ae3550b opusfile_0.12-4.debian.tar.xz 1a0340f086d69be70f19a8a8670b068c29fc8411e3d4790ba6e9bd2c1b91a91b"
  "soxr pool/main/libs/libsoxr libsoxr_0.1.3.orig.tar.xz b111c15fdc8c029989330ff559184198c161100a59312f5dc19ddeb9b5a15889 libsoxr_0.1.3-4.debian.tar.xz ae691692ccee841407c2fc7ebb2f25908ccd0adb256cf55944c71325cef14e71"
)

download() {  # dir file sha -> $CACHE/file, its SHA-256 checked
    local dir=$1 file=$2 sha=$3
    if [ ! -f "$CACHE/$file" ] || ! echo "$sha  $CACHE/$file" | sha256sum -c --status; then
        if command -v curl >/dev/null; then
            curl -fsSL --retry 3 -o "$CACHE/$file.part" "$MIRROR/$dir/$file"
        else  # a machine with a compiler and Python but no curl
            python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
                "$MIRROR/$dir/$file" "$CACHE/$file.part"
        fi
        mv "$CACHE/$file.part" "$CACHE/$file"
    fi
    if ! echo "$sha  $CACHE/$file" | sha256sum -c --status; then
        echo "wheel-deps: $file: SHA-256 is not the pinned $sha" >&2
        exit 1
    fi
}

unpack() {  # tarball dest strip(1: the top directory stripped; 0: kept)
    # Unpacked by Python's tarfile (gzip, bzip2 and xz alike, where tar
    # may lack the xz or bzip2 program).
    python3 - "$@" <<'PYX'
import sys, tarfile
src, dest, strip = sys.argv[1], sys.argv[2], int(sys.argv[3])
with tarfile.open(src) as tf:
    members = []
    for m in tf.getmembers():
        parts = m.name.split("/", strip)
        if len(parts) < strip + 1 or not parts[-1] or m.issym() and m.linkname.startswith("/") \
                or ".." in m.name.split("/"):
            continue
        m.name = parts[-1]
        members.append(m)
    tf.extractall(dest, members=members)
PYX
}

fetch() {  # name dir file sha [debian-file debian-sha] -> source in $OUT/src/name
    local name=$1 dir=$2 file=$3 sha=$4
    download "$dir" "$file" "$sha"
    rm -rf "$OUT/src/$name" && mkdir -p "$OUT/src/$name"
    unpack "$CACHE/$file" "$OUT/src/$name" 1
    if [ $# -ge 6 ]; then
        download "$dir" "$5" "$6"
        unpack "$CACHE/$5" "$OUT/src/$name" 0
        local series=$OUT/src/$name/debian/patches/series p
        if [ -f "$series" ]; then
            while read -r p; do
                case "$p" in ''|'#'*) continue ;; esac
                patch -s -p1 -d "$OUT/src/$name" < "$OUT/src/$name/debian/patches/$p" ||
                    { echo "wheel-deps: $name: Debian's $p does not apply" >&2; exit 1; }
            done < "$series"
        fi
    fi
}

objs_to_lib() {  # lib-name objects...
    local lib=$1
    shift
    rm -f "$OUT/lib/$lib"
    "$OUT/zar" rcs "$OUT/lib/$lib" "$@"
}

pc() {  # name version libs
    cat > "$OUT/lib/pkgconfig/$1.pc" <<PC
prefix=$OUT
Name: $1
Description: $1 (static, for stoker's wheel)
Version: $2
Cflags: -I\${prefix}/include
Libs: -L\${prefix}/lib $3
PC
}

for s in "${SOURCES[@]}"; do fetch $s; done
if [ $NATIVE = 0 ]; then
    for s in "${MEDIA_SOURCES[@]}"; do fetch $s; done
fi

# zstd: the library's C sources (and the x86-64 decoder's assembly).
S=$OUT/src/zstd/lib
mkdir -p "$OUT/obj/zstd"
objs=()
for f in "$S"/common/*.c "$S"/compress/*.c "$S"/decompress/*.c; do
    o=$OUT/obj/zstd/$(basename "${f%.c}").o
    $CC $CFLAGS -DZSTD_MULTITHREAD -I"$S" -I"$S/common" -c "$f" -o "$o" &
    objs+=("$o")
done
if [ "$ARCH" = x86_64 ]; then
    $CC $CFLAGS -c "$S/decompress/huf_decompress_amd64.S" -o "$OUT/obj/zstd/huf_amd64.o"
    objs+=("$OUT/obj/zstd/huf_amd64.o")
fi
wait
objs_to_lib libzstd.a "${objs[@]}"
cp "$S/zstd.h" "$S/zstd_errors.h" "$S/zdict.h" "$OUT/include/"
cp "$OUT/src/zstd/LICENSE" "$OUT/licenses/zstd.LICENSE"
pc libzstd 1.5.4 "-lzstd -lpthread"

# xxHash: the library, and on x86-64 its dispatching entry points (the
# widest vector unit the CPU has, chosen at run time), as Debian builds it.
S=$OUT/src/xxhash
$CC $CFLAGS -c "$S/xxhash.c" -o "$OUT/obj-xxhash.o"
xobjs=("$OUT/obj-xxhash.o")
if [ "$ARCH" = x86_64 ]; then
    $CC $CFLAGS -c "$S/xxh_x86dispatch.c" -o "$OUT/obj-xxhash-dispatch.o"
    xobjs+=("$OUT/obj-xxhash-dispatch.o")
fi
objs_to_lib libxxhash.a "${xobjs[@]}"
cp "$S/xxhash.h" "$S/xxh3.h" "$S/xxh_x86dispatch.h" "$OUT/include/"
cp "$S/LICENSE" "$OUT/licenses/xxhash.LICENSE"
pc libxxhash 0.8.1 "-lxxhash"

# zlib: the library's sources at the top of its tree.
S=$OUT/src/zlib
mkdir -p "$OUT/obj/zlib"
objs=()
for f in adler32 compress crc32 deflate gzclose gzlib gzread gzwrite infback inffast inflate \
         inftrees trees uncompr zutil; do
    $CC $CFLAGS -DHAVE_UNISTD_H -DHAVE_STDARG_H -D_LARGEFILE64_SOURCE=1 -I"$S" -c "$S/$f.c" \
        -o "$OUT/obj/zlib/$f.o" &
    objs+=("$OUT/obj/zlib/$f.o")
done
wait
objs_to_lib libz.a "${objs[@]}"
cp "$S/zlib.h" "$S/zconf.h" "$OUT/include/"
sed -n '/Copyright notice/,$p' "$S/README" > "$OUT/licenses/zlib.LICENSE"
pc zlib 1.2.13 "-lz"

# Jansson: its configuration header made from the template with what
# every glibc has (what its own configure finds on Linux).
S=$OUT/src/jansson
sed -e 's/@json_inline@/inline/' -e 's/@json_have_long_long@/1/' \
    -e 's/@json_have_localeconv@/1/' -e 's/@json_have_atomic_builtins@/1/' \
    -e 's/@json_have_sync_builtins@/1/' -e 's/@json_have_sync_builtins@/1/' \
    "$S/src/jansson_config.h.in" > "$OUT/include/jansson_config.h"
mkdir -p "$OUT/obj/jansson-cfg"
cat > "$OUT/obj/jansson-cfg/jansson_private_config.h" <<'CFG'
#define HAVE_STDINT_H 1
#define HAVE_SCHED_H 1
#define HAVE_INTTYPES_H 1
#define HAVE_UNISTD_H 1
#define HAVE_FCNTL_H 1
#define HAVE_SYS_TYPES_H 1
#define HAVE_SYS_STAT_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SCHED_YIELD 1
#define HAVE_GETPID 1
#define HAVE_GETTIMEOFDAY 1
#define HAVE_LOCALECONV 1
#define HAVE_ATOMIC_BUILTINS 1
#define HAVE_SYNC_BUILTINS 1
#define USE_URANDOM 1
#define INITIAL_HASHTABLE_ORDER 3
CFG
mkdir -p "$OUT/obj/jansson"
objs=()
jcfg=$OUT/obj/jansson-cfg
for f in "$S"/src/*.c; do
    o=$OUT/obj/jansson/$(basename "${f%.c}").o
    $CC $CFLAGS -DHAVE_CONFIG_H -I"$jcfg" -I"$OUT/include" -I"$S/src" -c "$f" -o "$o" &
    objs+=("$o")
done
wait
objs_to_lib libjansson.a "${objs[@]}"
cp "$S/src/jansson.h" "$OUT/include/"
cp "$S/LICENSE" "$OUT/licenses/jansson.LICENSE"
pc jansson 2.14 "-ljansson"

# liburing: its own configure (which writes config-host.h and compat.h for
# the kernel headers at hand), then its four sources compiled as its
# Makefile would (no make needed).
S=$OUT/src/liburing
( cd "$S" && ./configure --cc="$CC" >/dev/null )
# With libc: liburing's own small libc (CONFIG_NOLIBC, its default on
# x86-64 and aarch64) would need -ffreestanding objects of its own.
sed -i '/CONFIG_NOLIBC/d' "$S/config-host.h"
mkdir -p "$OUT/obj/liburing"
objs=()
for f in setup queue register syscall; do
    $CC $CFLAGS -D_GNU_SOURCE -I"$S/src/include" -include "$S/config-host.h" \
        -Wno-unused-parameter -Wno-sign-compare -c "$S/src/$f.c" -o "$OUT/obj/liburing/$f.o"
    objs+=("$OUT/obj/liburing/$f.o")
done
objs_to_lib liburing.a "${objs[@]}"
mkdir -p "$OUT/include/liburing"
cp "$S/src/include/liburing.h" "$OUT/include/"
cp "$S/src/include/liburing/"*.h "$OUT/include/liburing/"
cp "$S/COPYING" "$OUT/licenses/liburing.LICENSE"
pc liburing 2.3 "-luring"

# curl: its headers only (src/remote/curl.h), for STK_CURL_INCLUDE_DIR.
mkdir -p "$OUT/curl-include"
cp -r "$OUT/src/curl/include/curl" "$OUT/curl-include/"

# The media libraries, for the wheels only.  Compiled with the same
# compiler and flags, their symbols hidden (-fvisibility=hidden, and the
# macros of headers that would mark them default set empty): linked into
# the extension and the command line, they are not exported from either.
# Where a library's own build chooses its SIMD code (libjpeg-turbo,
# libwebp, libFLAC, mpg123, libopus, libsoxr), its CMake build is used,
# configured for the target and stopped at the library; the small ones
# are compiled here file by file.
media() {
MFLAGS="$CFLAGS -fvisibility=hidden"
cmake_lib() {  # name source-dir target cmake-args... -> built in $OUT/obj/name
    local name=$1 src=$2 target=$3
    shift 3
    local cross=()
    [ "$ARCH" = "$(uname -m)" ] || cross=(-DCMAKE_SYSTEM_NAME=Linux)
    cmake -S "$src" -B "$OUT/obj/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_FLAGS_RELEASE=-DNDEBUG -DCMAKE_C_COMPILER="$CC" -DCMAKE_AR="$OUT/zar" \
        -DCMAKE_RANLIB=/bin/true -DCMAKE_C_FLAGS="$MFLAGS" -DCMAKE_ASM_FLAGS="$MFLAGS" \
        -DCMAKE_SYSTEM_PROCESSOR="$ARCH" "${cross[@]}" -DBUILD_SHARED_LIBS=OFF \
        -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "$@" > "$OUT/obj/$name.log" 2>&1 &&
    cmake --build "$OUT/obj/$name" --target "$target" >> "$OUT/obj/$name.log" 2>&1 ||
        { tail -30 "$OUT/obj/$name.log" >&2; echo "wheel-deps: $name failed" >&2; exit 1; }
}
mkdir -p "$OUT/obj"

# libjpeg-turbo: the libjpeg (6b) API, 8-bit samples, with its SIMD code
# (x86-64: assembled by nasm, chosen at run time; aarch64: NEON, always
# there).  REQUIRE_SIMD: a build without it fails rather than decoding
# at a third of the speed.
S=$OUT/src/jpeg
cmake_lib jpeg "$S" jpeg-static -DENABLE_SHARED=OFF -DENABLE_STATIC=ON -DWITH_TURBOJPEG=OFF \
    -DWITH_JAVA=OFF -DREQUIRE_SIMD=ON -DCMAKE_ASM_NASM_COMPILER=nasm
cp "$OUT/obj/jpeg/libjpeg.a" "$OUT/lib/"
cp "$S/jpeglib.h" "$S/jerror.h" "$S/jmorecfg.h" "$OUT/obj/jpeg/jconfig.h" "$OUT/include/"
cat "$S/LICENSE.md" "$S/README.ijg" > "$OUT/licenses/libjpeg-turbo.LICENSE"
pc libjpeg 2.1.5 "-ljpeg"

# libspng: one file; zlib is the one built above.  Its SIMD filters are
# SSE2 (every x86-64) and NEON (every aarch64).
S=$OUT/src/spng
$CC $MFLAGS -DSPNG_STATIC -I"$OUT/include" -c "$S/spng/spng.c" -o "$OUT/obj/spng.o"
objs_to_lib libspng.a "$OUT/obj/spng.o"
cp "$S/spng/spng.h" "$OUT/include/"
cp "$S/LICENSE" "$OUT/licenses/libspng.LICENSE"
pc spng 0.7.3 "-lspng -lz -lm"
sed -i 's/^Cflags: .*/& -DSPNG_STATIC/' "$OUT/lib/pkgconfig/spng.pc"

# libwebp: the decoder library alone (src/dec, src/dsp, src/utils), whose
# SSE2/SSE4.1 code is picked at run time by its CPU check.
S=$OUT/src/webp
cmake_lib webp "$S" webpdecoder -DWEBP_BUILD_ANIM_UTILS=OFF -DWEBP_BUILD_CWEBP=OFF \
    -DWEBP_BUILD_DWEBP=OFF -DWEBP_BUILD_GIF2WEBP=OFF -DWEBP_BUILD_IMG2WEBP=OFF \
    -DWEBP_BUILD_VWEBP=OFF -DWEBP_BUILD_WEBPINFO=OFF -DWEBP_BUILD_WEBPMUX=OFF \
    -DWEBP_BUILD_LIBWEBPMUX=OFF -DWEBP_BUILD_EXTRAS=OFF -DCMAKE_C_FLAGS="$MFLAGS -DWEBP_EXTERN=extern"
cp "$OUT/obj/webp/libwebpdecoder.a" "$OUT/lib/"
mkdir -p "$OUT/include/webp"
cp "$S/src/webp/decode.h" "$S/src/webp/types.h" "$OUT/include/webp/"
cat "$S/COPYING" "$S/PATENTS" > "$OUT/licenses/libwebp.LICENSE"
pc libwebp 1.2.4 "-lwebpdecoder -lm -lpthread"

# libFLAC: without Ogg FLAC; its SSE and AVX2 code is picked at run time.
S=$OUT/src/flac
cmake_lib flac "$S" FLAC -DBUILD_CXXLIBS=OFF -DBUILD_PROGRAMS=OFF -DBUILD_EXAMPLES=OFF \
    -DBUILD_TESTING=OFF -DBUILD_DOCS=OFF -DINSTALL_MANPAGES=OFF -DWITH_OGG=OFF \
    -DWITH_STACK_PROTECTOR=OFF
cp "$OUT/obj/flac/src/libFLAC/libFLAC.a" "$OUT/lib/"
mkdir -p "$OUT/include/FLAC"
cp "$S"/include/FLAC/*.h "$OUT/include/FLAC/"
cp "$S/COPYING.Xiph" "$OUT/licenses/libFLAC.LICENSE"
pc flac 1.4.2 "-lFLAC -lm"
sed -i 's/^Cflags: .*/& -DFLAC__NO_DLL/' "$OUT/lib/pkgconfig/flac.pc"

# mpg123: libmpg123 alone, from its CMake port (which writes the config.h
# its configure would), with the dispatching decoder: x86-64's SSE/AVX
# synths or aarch64's NEON ones, chosen at run time, and the generic one
# as the fallback.  Its assembly marks its entry points global only; here
# they are hidden too.
S=$OUT/src/mpg123
for f in "$S"/src/libmpg123/*.S; do
    sed -i 's/^\([[:space:]]*\)\(\.globl\|GLOBAL_SYMBOL\)[[:space:]]\+\(.*\)$/&\n\1.hidden \3/' "$f"
done
cmake_lib mpg123 "$S/ports/cmake" libmpg123 -DBUILD_LIBOUT123=OFF -DBUILD_PROGRAMS=OFF \
    -DNETWORK=OFF -DIPV6=OFF
cp "$OUT/obj/mpg123/src/libmpg123/libmpg123.a" "$OUT/lib/"
cp "$OUT/obj/mpg123/src/libmpg123/mpg123.h" "$S/src/include/fmt123.h" "$OUT/include/" 2>/dev/null ||
    cp "$OUT/obj/mpg123/src/libmpg123/mpg123.h" "$S/src/libmpg123/fmt123.h" "$OUT/include/"
cp "$S/COPYING" "$OUT/licenses/mpg123.LICENSE"
pc libmpg123 1.31.2 "-lmpg123 -lm"

# libogg: two files, and the types header its configure would write.
S=$OUT/src/ogg
mkdir -p "$OUT/include/ogg"
sed -e 's/@INCLUDE_INTTYPES_H@/1/' -e 's/@INCLUDE_STDINT_H@/1/' -e 's/@INCLUDE_SYS_TYPES_H@/1/' \
    -e 's/@SIZE16@/int16_t/' -e 's/@USIZE16@/uint16_t/' -e 's/@SIZE32@/int32_t/' \
    -e 's/@USIZE32@/uint32_t/' -e 's/@SIZE64@/int64_t/' -e 's/@USIZE64@/uint64_t/' \
    "$S/include/ogg/config_types.h.in" > "$OUT/include/ogg/config_types.h"
cp "$S/include/ogg/ogg.h" "$S/include/ogg/os_types.h" "$OUT/include/ogg/"
for f in bitwise framing; do
    $CC $MFLAGS -I"$OUT/include" -c "$S/src/$f.c" -o "$OUT/obj/ogg-$f.o"
done
objs_to_lib libogg.a "$OUT"/obj/ogg-*.o
cp "$S/COPYING" "$OUT/licenses/libogg.LICENSE"
pc ogg 1.3.5 "-logg"

# libvorbis: the decoder's files (vorbisenc left out) and vorbisfile, as
# its Makefile lists them.
S=$OUT/src/vorbis
mkdir -p "$OUT/obj/vorbis" "$OUT/include/vorbis"
objs=()
for f in mdct smallft block envelope window lsp lpc analysis synthesis psy info floor1 floor0 \
         res0 mapping0 registry codebook sharedbook lookup bitrate vorbisfile; do
    $CC $MFLAGS -D_REENTRANT -fsigned-char -I"$OUT/include" -I"$S/include" -I"$S/lib" \
        -c "$S/lib/$f.c" -o "$OUT/obj/vorbis/$f.o" &
    objs+=("$OUT/obj/vorbis/$f.o")
done
wait
objs_to_lib libvorbis.a "${objs[@]}"
cp "$S/include/vorbis/codec.h" "$S/include/vorbis/vorbisfile.h" "$OUT/include/vorbis/"
cp "$S/COPYING" "$OUT/licenses/libvorbis.LICENSE"
pc vorbisfile 1.3.7 "-lvorbis -logg -lm"

# libopus: floating point, with its run-time CPU dispatch (SSE4.1 and AVX
# on x86-64; NEON on aarch64).  OPUS_EXPORT set empty: its header marks
# the API default-visible when the library itself is built.
S=$OUT/src/opus
# (Its release tarball lacks the file that sets the default build type,
# which is set here anyway.)
[ -f "$S/opus_buildtype.cmake" ] || : > "$S/opus_buildtype.cmake"
cmake_lib opus "$S" opus -DOPUS_BUILD_PROGRAMS=OFF -DOPUS_BUILD_TESTING=OFF \
    -DOPUS_STACK_PROTECTOR=OFF -DCMAKE_C_FLAGS="$MFLAGS -DOPUS_EXPORT="
cp "$OUT/obj/opus/libopus.a" "$OUT/lib/"
mkdir -p "$OUT/include/opus"
cp "$S"/include/*.h "$OUT/include/opus/"
cp "$S/COPYING" "$OUT/licenses/libopus.LICENSE"
pc opus 1.3.1 "-lopus -lm"
sed -i 's|^Cflags: .*|& -I${prefix}/include/opus|' "$OUT/lib/pkgconfig/opus.pc"

# opusfile: its four files for memory and file streams (no HTTP), with
# the float API stoker reads.  Its header makes its API default-visible
# under GCC's pragma; OP_GNUC_PREREQ set to 0 turns that off (with the
# other GCC-only attributes, warnings only).
S=$OUT/src/opusfile
mkdir -p "$OUT/obj/opusfile"
for f in info internal opusfile stream; do
    $CC $MFLAGS '-DOP_GNUC_PREREQ(_maj,_min)=0' -DOP_HAVE_LRINTF -DOP_HAVE_CLOCK_GETTIME -I"$S/include" -I"$OUT/include" \
        -I"$OUT/include/opus" -c "$S/src/$f.c" -o "$OUT/obj/opusfile/$f.o"
done
objs_to_lib libopusfile.a "$OUT"/obj/opusfile/*.o
cp "$S/include/opusfile.h" "$OUT/include/opus/"
cp "$S/COPYING" "$OUT/licenses/opusfile.LICENSE"
pc opusfile 0.12 "-lopusfile -lopus -logg -lm"
sed -i 's|^Cflags: .*|& -I${prefix}/include/opus|' "$OUT/lib/pkgconfig/opusfile.pc"

# libsoxr: without OpenMP and the libsamplerate interface; its SIMD
# engine (SSE on x86-64) is chosen at run time.
S=$OUT/src/soxr
cmake_lib soxr "$S" soxr -DBUILD_TESTS=OFF -DBUILD_EXAMPLES=OFF -DWITH_OPENMP=OFF \
    -DWITH_LSR_BINDINGS=OFF
cp "$OUT/obj/soxr/src/libsoxr.a" "$OUT/lib/"
cp "$S/src/soxr.h" "$OUT/include/"
cat "$S/LICENCE" "$S/COPYING.LGPL" > "$OUT/licenses/libsoxr.LICENSE"
pc soxr 0.1.3 "-lsoxr -lm"
}
[ $NATIVE = 1 ] || media

rm -rf "$OUT/obj" "$OUT"/obj-*.o
echo "wheel-deps: $ARCH libraries in $OUT/lib: $(cd "$OUT/lib" && ls *.a | tr '\n' ' ')"
