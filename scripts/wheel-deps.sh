#!/usr/bin/env bash
# Builds the third-party libraries a wheel carries, as static archives, for
# one target: zstd, xxHash, Jansson, zlib and liburing, from Debian's
# source packages (bookworm), each pinned by name and SHA-256 and checked
# before it is unpacked; nothing of theirs is committed here.  The compiler
# is zig's clang (PyPI's ziglang), aimed at glibc 2.28, so that the objects
# ask nothing of glibc newer than RHEL 8 and Ubuntu 20.04 have.
#
# libcurl is not built: stoker loads the system's at run time (for its TLS
# library and CA certificates); only curl's headers are taken.
#
# Usage: wheel-deps.sh ARCH OUT   (ARCH: x86_64 or aarch64)
#        wheel-deps.sh native OUT   (this machine's compiler, $CC or cc: what
#        a build from the sdist does where the libraries are not installed)
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
if [ "$ARCH" = native ]; then
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

fetch() {  # name dir file sha -> unpacked source in $OUT/src/name
    local name=$1 dir=$2 file=$3 sha=$4
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
    rm -rf "$OUT/src/$name" && mkdir -p "$OUT/src/$name"
    # Unpacked by Python's tarfile (gzip, bzip2 and xz alike, where tar
    # may lack the xz or bzip2 program), the top directory stripped.
    python3 - "$CACHE/$file" "$OUT/src/$name" <<'PYX'
import sys, tarfile
src, dest = sys.argv[1], sys.argv[2]
with tarfile.open(src) as tf:
    members = []
    for m in tf.getmembers():
        parts = m.name.split("/", 1)
        if len(parts) < 2 or not parts[1] or m.issym() and m.linkname.startswith("/") \
                or ".." in m.name.split("/"):
            continue
        m.name = parts[1]
        members.append(m)
    tf.extractall(dest, members=members)
PYX
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

rm -rf "$OUT/obj" "$OUT"/obj-*.o
echo "wheel-deps: $ARCH libraries in $OUT/lib: $(cd "$OUT/lib" && ls *.a | tr '\n' ' ')"
