#!/usr/bin/env bash
# Runs each fuzz target under libFuzzer (clang, with ASan and UBSan) for
# FUZZ_SECONDS (default 60) and prints how many inputs it executed.
# New coverage goes to a scratch corpus under build-fuzz/; a crashing input
# is saved to tests/fuzz/crashers/TARGET/, which `make test` replays.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang >/dev/null || { echo "fuzz: installing clang"; apt-get install -y -qq clang >/dev/null; }
SECS=${FUZZ_SECONDS:-60}
B=build-fuzz
mkdir -p $B
LIBS="$(pkg-config --cflags --libs libzstd liburing libxxhash jansson zlib libcurl) $(pkg-config --cflags --libs hdf5 2>/dev/null | sed "s/^/-DSTK_HAVE_HDF5 /")"
SRC=$(ls src/*/*.c)
for t in ${FUZZ_TARGETS:-manifest npy shard wav index response url}; do
    clang -g -O1 -std=c11 -D_FILE_OFFSET_BITS=64 -D_POSIX_C_SOURCE=200809L -fsanitize=fuzzer,address,undefined \
        -Iinclude -Isrc $SRC tests/fuzz/fuzz_$t.c $LIBS -lpthread -lm -o $B/fuzz_$t
    mkdir -p $B/corpus-$t
    cp -n tests/fuzz/corpus/$t/* $B/corpus-$t/ 2>/dev/null || true
    echo "== fuzz_$t for ${SECS}s"
    $B/fuzz_$t $B/corpus-$t -max_total_time="$SECS" -artifact_prefix=tests/fuzz/crashers/$t/ \
        -print_final_stats=1 2>&1 | grep -E "stat::number_of_executed_units|ERROR|crash-" || true
done

# The Loader's options and the writer's record checks: a property test with
# many more random cases than `make test` runs (each in a child process, so
# that a crash or a hang is caught and the case named).
echo "== options and records: ${FUZZ_CASES:-2000} cases"
STOKER_FUZZ_CASES="${FUZZ_CASES:-2000}" STOKER_FUZZ_SEED="${FUZZ_SEED:-$RANDOM}" \
    STOKER_BUILD="${BUILD:-build}" .venv/bin/python -m pytest -q tests/python/test_py_fuzz_options.py
