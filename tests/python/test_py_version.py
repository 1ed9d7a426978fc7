"""One version number: the header's STK_VERSION_STRING is the package's
(pyproject takes it from there), stoker.__version__, `stoker --version`
and the shared library's file name."""
import importlib.metadata
import os
import re
import subprocess

import stoker
from conftest import stoker_exe
from stkcli import REPO_ROOT


def test_one_version_everywhere():
    exe = stoker_exe()
    header = (REPO_ROOT / "include" / "stoker.h").read_text()
    want = re.search(r'#define STK_VERSION_STRING "([^"]+)"', header).group(1)
    major, minor, patch = (re.search(rf"#define STK_VERSION_{k} (\d+)", header).group(1)
                           for k in ("MAJOR", "MINOR", "PATCH"))
    assert want == f"{major}.{minor}.{patch}"
    assert stoker.__version__ == want
    assert importlib.metadata.version("stoker") == want
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split()[1] == want, out.stdout
    lib = exe.parent / f"libstoker.so.{want}"
    assert not lib.parent.joinpath("libstoker.so").exists() or lib.exists(), lib
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    assert f"## {want}" in changelog, "CHANGELOG.md has no section for this version"


def _other_cpythons():
    """CPython interpreters of this machine other than the running one:
    on PATH as python3.N, or pyenv's."""
    import glob
    import shutil
    import sys
    found = {}
    for minor in range(8, 20):
        for exe in [shutil.which(f"python3.{minor}")] + sorted(
                glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/python3.{minor}"))):
            if (exe and "/shims/" not in exe  # (pyenv's shims may name no interpreter)
                    and (3, minor) != sys.version_info[:2] and minor not in found):
                found[minor] = exe
    return found


def test_claimed_python_versions_are_the_tested_ones(tmp_path):
    """pyproject's requires-python is the stable-ABI floor the extension is
    built for, and the built module (one _stoker.abi3.so) loads and runs in
    every newer CPython this machine has; an older one is refused by the
    build rather than half-working."""
    import sys
    meta = (REPO_ROOT / "pyproject.toml").read_text()
    floor = re.search(r'requires-python = ">=3\.(\d+)"', meta).group(1)
    cmake = (REPO_ROOT / "CMakeLists.txt").read_text()
    assert f"USE_SABI 3.{floor}" in cmake and f"VERSION_LESS 3.{floor}" in cmake
    assert sys.version_info[:2] >= (3, int(floor))
    so = stoker._stoker.__file__
    assert so.endswith(".abi3.so"), so
    # The module alone, with the one file it imports (_errors.py): the
    # other interpreters have no NumPy.
    import shutil
    pkg = tmp_path / "stoker"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copy(os.path.join(os.path.dirname(stoker.__file__), "_errors.py"), pkg)
    shutil.copy(so, pkg)
    code = "import stoker._stoker as m; print(m.version, m.loader_defaults()['shuffle'])"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    tried = 0
    for minor, exe in _other_cpythons().items():
        if minor < int(floor):
            continue
        out = subprocess.run([exe, "-c", code], capture_output=True, text=True,
                             cwd=tmp_path, env=env)
        assert out.returncode == 0, (exe, out.stderr[-500:])
        assert out.stdout.split()[0] == stoker.__version__, (exe, out.stdout)
        tried += 1
    print(f"the abi3 module loaded in {tried} other CPython(s)")
