#!/usr/bin/env bash
# Runs each fuzz target under libFuzzer (clang, with ASan and UBSan, UBSan
# findings fatal) for FUZZ_SECONDS (default 60), or for FUZZ_RUNS inputs
# when that is set, and prints how many inputs it executed.
# New coverage goes to a scratch corpus under build-fuzz/; a crashing input
# is saved to tests/fuzz/crashers/TARGET/, which `make test` replays.
# FUZZ_MERGE=1 then minimises the scratch corpus into tests/fuzz/corpus/TARGET
# (libFuzzer -merge=1: the smallest inputs that keep the coverage).
# FUZZ_TARGETS picks targets (default: all); FUZZ_CASES=0 skips the options
# property test at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang >/dev/null || { echo "fuzz: installing clang"; apt-get install -y -qq clang >/dev/null; }
SECS=${FUZZ_SECONDS:-60}
B=build-fuzz
mkdir -p $B/obj
HDF5="$(pkg-config --cflags hdf5 2>/dev/null | sed "s/^/-DSTK_HAVE_HDF5 /")"
# The media decoders' libraries, each where pkg-config finds it, with the
# define CMakeLists.txt gives src/media for it (STK_MEDIA); a format whose
# library is missing builds without it and decodes as STK_EUNSUPPORTED.
MEDIA="" MEDIA_LIBS=""
for pair in libjpeg:JPEG spng:SPNG libwebp:WEBP flac:FLAC libmpg123:MPG123 \
            vorbisfile:VORBIS opusfile:OPUS soxr:SOXR; do
    pkg-config --exists "${pair%%:*}" || continue
    MEDIA="$MEDIA -DSTK_HAVE_${pair##*:} $(pkg-config --cflags "${pair%%:*}")"
    MEDIA_LIBS="$MEDIA_LIBS $(pkg-config --libs "${pair%%:*}")"
done
LIBS="$(pkg-config --libs libzstd liburing libxxhash jansson zlib libcurl) $(pkg-config --libs hdf5 2>/dev/null || true) $MEDIA_LIBS"
CFLAGS="-g -O1 -std=c11 -D_FILE_OFFSET_BITS=64 -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc
    $(pkg-config --cflags libzstd liburing libxxhash jansson zlib libcurl) $HDF5 $MEDIA"
# Objects are kept between runs; all are rebuilt when the flags change (a
# library found or lost) or a header is newer than the last build.
echo "$CFLAGS" >$B/obj/flags.new
if ! cmp -s $B/obj/flags.new $B/obj/flags ||
   [ -n "$(find include src -name '*.h' -newer $B/obj/flags 2>/dev/null | head -1)" ]; then
    rm -f $B/obj/*.o
fi
mv $B/obj/flags.new $B/obj/flags
# The library once, instrumented for coverage; hash_avx2.c needs -mavx2 (as
# in CMakeLists.txt), or the AVX2 hash is left out and nothing links.
for s in src/*/*.c; do
    o=$B/obj/$(echo "$s" | tr / _).o
    [ "$o" -nt "$s" ] && continue
    extra=""; [ "$s" = src/core/hash_avx2.c ] && extra=-mavx2
    clang $CFLAGS $extra -fsanitize=fuzzer-no-link,address,undefined -c "$s" -o "$o"
done
rm -f $B/libstk-fuzz.a && ar rcs $B/libstk-fuzz.a $B/obj/*.o
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# libhdf5 1.10, libvorbisfile and libopusfile leak on some damaged files
# (their own memory); see tests/fuzz/*.supp.  LeakSanitizer takes one file:
# all of them.
cat tests/fuzz/*.supp >$B/lsan.supp
export LSAN_OPTIONS=suppressions=$PWD/$B/lsan.supp
for t in ${FUZZ_TARGETS:-manifest npy shard wav index response url hdf5 image audio}; do
    clang $CFLAGS -D_GNU_SOURCE -DSTK_FUZZ_IN_PROCESS -fsanitize=fuzzer,address,undefined tests/fuzz/fuzz_$t.c \
        $B/libstk-fuzz.a $LIBS -lpthread -lm -o $B/fuzz_$t
    mkdir -p $B/corpus-$t
    cp -n tests/fuzz/corpus/$t/* $B/corpus-$t/ 2>/dev/null || true
    if [ -n "${FUZZ_RUNS:-}" ]; then LIMIT="-runs=$FUZZ_RUNS"; else LIMIT="-max_total_time=$SECS"; fi
    echo "== fuzz_$t ($LIMIT)"
    $B/fuzz_$t $B/corpus-$t $LIMIT -timeout=10 -artifact_prefix=tests/fuzz/crashers/$t/ \
        -print_final_stats=1 2>&1 | grep -E "stat::number_of_executed_units|ERROR|crash-" || true
    if [ "${FUZZ_MERGE:-0}" = 1 ]; then
        mkdir -p $B/merged-$t && rm -f $B/merged-$t/*
        $B/fuzz_$t -merge=1 $B/merged-$t tests/fuzz/corpus/$t $B/corpus-$t >/dev/null 2>&1
        rm -f tests/fuzz/corpus/$t/* && cp $B/merged-$t/* tests/fuzz/corpus/$t/
        echo "   corpus: $(ls tests/fuzz/corpus/$t | wc -l) inputs, $(du -sh tests/fuzz/corpus/$t | cut -f1)"
    fi
done

# The Loader's options and the writer's record checks: a property test with
# many more random cases than `make test` runs (each in a child process, so
# that a crash or a hang is caught and the case named).
[ "${FUZZ_CASES:-2000}" = 0 ] && exit 0
echo "== options and records: ${FUZZ_CASES:-2000} cases"
STOKER_FUZZ_CASES="${FUZZ_CASES:-2000}" STOKER_FUZZ_SEED="${FUZZ_SEED:-$RANDOM}" \
    STOKER_BUILD="${BUILD:-build}" .venv/bin/python -m pytest -q tests/python/test_py_fuzz_options.py
