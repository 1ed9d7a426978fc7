#!/usr/bin/env bash
# Installs the stoker Python package into .venv (pip install .), again only
# when a source file changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
want=$( (git ls-files -co --exclude-standard -- src include python tools CMakeLists.txt pyproject.toml \
        | sort | xargs cat) | sha256sum | cut -d' ' -f1)
stamp=.venv/.stoker-src.sha
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "py-install: building and installing the stoker package into .venv"
    .venv/bin/python -m pip install -q --no-build-isolation --no-deps . 2>&1 | grep -v "is ignored" || true
    .venv/bin/python -c "import stoker" 
    echo "$want" >"$stamp"
fi
