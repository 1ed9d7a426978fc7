#!/usr/bin/env bash
# Runs the Python package's tests against an extension built with
# AddressSanitizer and UBSan (the interpreter itself is not instrumented, so
# the ASan runtime is preloaded; leak detection is off because CPython keeps
# memory until exit by design).  DataLoader workers start from a fork server
# (tests/python/conftest.py says why).
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-pyasan
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSTK_SANITIZE=address,undefined \
    -DSTK_BUILD_TESTS=OFF -DSTK_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PWD/.venv/bin/python" >/dev/null
# The module is _stoker.abi3.so (the stable ABI); one of another name left
# from an earlier build would be imported before it, so none is kept.
rm -f $B/_stoker*.so
cmake --build $B --target _stoker stoker_cli
rm -rf $B/pkg && mkdir -p $B/pkg/stoker
cp python/stoker/*.py python/stoker/*.pyi python/stoker/py.typed $B/pkg/stoker/
cp $B/_stoker*.so $B/pkg/stoker/
LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1 \
PYTHONPATH="$PWD/$B/pkg" STOKER_BUILD=$B STOKER_TEST_START_METHOD=forkserver \
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/python -k "test_py_ or test_strings or test_hf or test_media" "$@"
