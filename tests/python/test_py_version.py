"""One version number: the header's STK_VERSION_STRING is the package's
(pyproject takes it from there), stoker.__version__, `stoker --version`
and the shared library's file name."""
import importlib.metadata
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
