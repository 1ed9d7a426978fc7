"""The report as a page: Report.to_html and `stoker doctor --html`.

Each page is checked as written (the numbers on it are the report's, it
fetches nothing) and as Chromium renders it (headless, Debian's `chromium`):
the DOM after loading holds the charts, no script error is logged, and the
screenshot, kept beside the page in the test's tmp_path for a person to
look at, shows the charts' lines.  Without Chromium those checks are skipped,
saying so.
"""
import os
import re
import shutil
import struct
import subprocess
import time
import zlib
from html.parser import HTMLParser

import numpy as np
import pytest

import stoker

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RUN_COLOURS = ((0x1f, 0x77, 0xb4), (0xe6, 0x55, 0x0d))   # report.c's run_colour
LIMIT_COLOUR = (0xc0, 0x39, 0x2b)


@pytest.fixture
def toy(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "toy.stk"
    stoker.write(path, {"x": rng.standard_normal((4000, 64)).astype(np.float32),
                        "y": np.arange(4000, dtype=np.int64)})
    return path


class Page(HTMLParser):
    """What the tests read of a page: elements by id (their text and
    attributes), the SVG elements, and every attribute value."""

    def __init__(self, text):
        super().__init__()
        self.by_id, self.text_of, self.tags, self.attrs = {}, {}, [], []
        self._open = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        self.attrs.extend(v for _, v in attrs if v)
        if "id" in a:
            self.by_id[a["id"]] = a
            self.text_of[a["id"]] = ""
        self._open.append(a.get("id"))

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for i in self._open:
            if i is not None:
                self.text_of[i] += data

    def svg(self, tag):
        return [a for t, a in self.tags if t == tag]


def check_page(text, verdict, stall):
    """The page's own checks: the report's numbers, the charts, nothing
    fetched.  Returns the parsed page."""
    page = Page(text)
    assert page.text_of["verdict"] == verdict
    assert float(page.by_id["stall"]["data-value"]) == stall
    assert page.text_of["stall"] == f"{100 * stall:.1f}%"
    assert "throughput-0" in page.by_id and "ring-0" in page.by_id and "stages" in page.by_id
    lines = [a for a in page.svg("polyline") if a.get("class") == "series"]
    assert lines and all(len(a["points"].split()) >= 2 for a in lines)
    # Self-contained: no script, nothing loaded from anywhere.
    assert "<script" not in text.lower()
    for a in ("src", "href"):
        assert not any(a in attrs for _, attrs in page.tags), a
    assert not re.search(r"https?://|@import|url\(", text, re.I)
    return page


def png_pixels(path):
    """The RGB pixels, an array (height, width, 3), of an 8-bit RGB or RGBA
    PNG such as Chromium writes."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and not interlace, (depth, colour)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, w * bpp + 1)
    img = np.zeros((h, w * bpp), np.uint8)
    prev = np.zeros(w * bpp, np.int64)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int64)
        if f == 1:      # Sub: a running sum along each channel
            cur = np.cumsum(line.reshape(w, bpp), axis=0).ravel() & 255
        elif f == 2:    # Up
            cur = (line + prev) & 255
        elif f in (3, 4):   # Average, Paeth: byte by byte
            out, up = line.tolist(), prev.tolist()
            for i in range(len(out)):
                a = out[i - bpp] if i >= bpp else 0
                b = up[i]
                if f == 3:
                    out[i] = (out[i] + (a + b) // 2) & 255
                    continue
                c = up[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                out[i] = (out[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            cur = np.array(out, np.int64)
        else:
            cur = line
        img[y] = cur
        prev = cur
    return img.reshape(h, w, bpp)[:, :, :3]


def render(page_path, n_runs):
    """Chromium's DOM of the page and its screenshot (report.png beside the
    page), checked: the charts are in the DOM, no script error was logged,
    and the screenshot shows each run's colour and the limit's."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; "
                    "scripts/deps.sh installs it): the page was checked, not rendered")
    shot = page_path.parent / "report.png"
    common = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
              "--enable-logging=stderr", "--v=0", "--window-size=1000,2800"]
    # (Not under the sanitizers' runtime that make py-asan preloads.)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}
    run = subprocess.run(common + ["--dump-dom", f"--screenshot={shot}",
                                   page_path.resolve().as_uri()],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    assert "Uncaught" not in run.stderr and "CONSOLE" not in run.stderr, run.stderr[-2000:]
    rendered = Page(run.stdout)
    assert "throughput-0" in rendered.by_id and "ring-0" in rendered.by_id
    px = png_pixels(shot).astype(np.int16)
    for c in RUN_COLOURS[:n_runs] + (LIMIT_COLOUR,):
        near = np.all(np.abs(px - np.array(c, np.int16)) <= 12, axis=2)
        assert near.sum() > 50, f"hardly a pixel of colour {c} in {shot}"
    return rendered


def test_profile_page_shows_the_report(toy, tmp_path):
    with stoker.Loader(toy, batch_size=32, shuffle="random") as ld:
        r = stoker.profile(ld, step=lambda b: time.sleep(0.002), batches=60)
    out = tmp_path / "report.html"
    r.to_html(out)
    page = check_page(out.read_text(), r.verdict, r.stall)
    assert page.text_of["next"] == r.next
    assert "throughput-1" in page.by_id and "ring-1" in page.by_id and "waits" in page.by_id
    runs = page.text_of["runs"]
    assert "loader alone" in runs and "with the step" in runs
    assert f"{1e3 * r.step_seconds:.2f} ms" in runs
    # The series behind the charts covers each run: every batch, every byte.
    for name in ("alone", "with_step"):
        last = r.series[name][-1]
        assert last[1] == r.batches
        assert last[3] == r.batches * 32 * (64 * 4 + 8)
    render(out, 2)


def test_profile_page_of_the_loader_alone(toy, tmp_path):
    with stoker.Loader(toy, batch_size=32) as ld:
        r = stoker.profile(ld, batches=40)
    out = tmp_path / "report.html"
    r.to_html(out)
    page = check_page(out.read_text(), "loader alone", r.stall)
    assert "no-step" in page.by_id and "waits" not in page.by_id
    assert "throughput-1" not in page.by_id
    render(out, 1)


def test_doctor_html_shows_what_it_printed(stoker, toy, tmp_path):
    out = tmp_path / "doctor.html"
    res = stoker.ok("doctor", toy, "--batch", "32", "--step-ms", "1", "--max-batches", "80",
                    "--html", out)
    verdict = re.search(r"^verdict: (\S+) ", res.stdout, re.M).group(1)
    stall = re.search(r"^consumer stall: ([\d.]+)%", res.stdout, re.M).group(1)
    assert f"report: {out}" in res.stdout
    text = out.read_text()
    page = Page(text)
    check_page(text, verdict, float(page.by_id["stall"]["data-value"]))
    assert page.text_of["stall"] == stall + "%"
    assert "waits" in page.by_id and str(toy) in text
    render(out, 1)


def test_the_page_cannot_be_written_says_where(toy, tmp_path):
    with stoker.Loader(toy, batch_size=32) as ld:
        r = stoker.profile(ld, batches=5)
    bad = tmp_path / "no such folder" / "report.html"
    with pytest.raises(stoker.StokerError, match="no such folder/report.html"):
        r.to_html(bad)


def test_the_series_is_bounded_and_loses_nothing(toy):
    """However many batches, the series keeps at most max_points points,
    counted from its start, so its last point holds every batch."""
    with stoker.Loader(toy, batch_size=16) as ld:
        ld._c.series_start(1, 8)
        got = 0
        for batch in ld:
            got += 1
        pts = ld._c.series()
    assert got == 250
    assert 2 <= len(pts) <= 8
    assert pts[-1][1] == got and pts[-1][2] == 4000 and pts[-1][3] == 4000 * (64 * 4 + 8)
    for a, b in zip(pts, pts[1:]):
        assert all(y >= x for x, y in zip(a, b)) and b[0] > a[0]


def test_profile_leaves_the_loader_untimed(toy):
    """The series stoker.profile starts is ended with it: the loader does not
    go on timing batches (nor holding the points) for the rest of its life."""
    with stoker.Loader(toy, batch_size=16) as ld:
        r = stoker.profile(ld, step=lambda b: None, batches=5)
        assert r.series["alone"] and r.series["with_step"]
        for _ in zip(range(3), ld):
            pass
        assert ld._c.series() == []
