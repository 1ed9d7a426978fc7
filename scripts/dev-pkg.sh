#!/usr/bin/env bash
# Builds the extension and the command line into a build directory of one's
# own (default build-dev) and assembles the Python package beside them, so
# that a change can be tried without reinstalling .venv's copy:
#   scripts/dev-pkg.sh build-x
#   PYTHONPATH=build-x/pkg STOKER_BUILD=build-x .venv/bin/python -m pytest tests/python/test_x.py
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-dev}
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTK_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$PWD/.venv/bin/python" >/dev/null
rm -f "$B"/_stoker*.so
cmake --build "$B" --target _stoker stoker_cli
rm -rf "$B/pkg" && mkdir -p "$B/pkg/stoker"
# The Python files are linked, not copied: an edit is seen without a rebuild.
for f in python/stoker/*.py python/stoker/*.pyi python/stoker/py.typed; do
    ln -s "$PWD/$f" "$B/pkg/stoker/"
done
cp "$B"/_stoker*.so "$B/pkg/stoker/"
echo "PYTHONPATH=$B/pkg STOKER_BUILD=$B"
