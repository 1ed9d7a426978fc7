"""Progress of the Python API's long calls (stoker.write, stoker.index, the
engine writers, Loader.fetch_epoch), shown as the command line shows its
own: tqdm's bar where tqdm is installed (its notebook bar in Jupyter, by
tqdm.auto), else one line on stderr redrawn in place; nothing where stderr
is not a terminal, unless asked for.

Every such call takes ``progress``: None (the default) shows it on a
terminal or in a notebook, True always, False never.  The bar is looked up
on sys.stderr when the call starts, so a redirected stderr is honoured.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Optional

# Redraws at most this often (seconds): drawing costs more than counting.
_EVERY = 0.1


def human_bytes(b: float) -> str:
    """Bytes as the command line writes them (1.23 MiB)."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    i = 0
    while b >= 1024 and i < len(units) - 1:
        b /= 1024
        i += 1
    return f"{b:.2f} {units[i]}" if i else f"{b:.0f} B"


def _duration(s: float) -> str:
    s = int(s + 0.5)
    if s >= 3600:
        return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _in_notebook(stream: Any) -> bool:
    """stderr is a Jupyter kernel's output stream (never a terminal, but
    shown to the user)."""
    return (type(stream).__module__ or "").split(".")[0] == "ipykernel"


def _tqdm() -> Optional[Callable[..., Any]]:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


class _Off:
    """What a call draws with when progress is off: nothing, at the cost of
    a method call."""

    done = 0
    nbytes = 0

    def update(self, n: int = 1, nbytes: int = 0) -> None:
        pass

    def set(self, done: int, nbytes: int = 0, note: str = "") -> None:
        pass

    def close(self) -> None:
        pass

    def __bool__(self) -> bool:
        return False

    def __enter__(self) -> "_Off":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Line(_Off):
    """One line on a stream, redrawn in place with a carriage return, like
    the command line's; close() leaves it showing the totals."""

    def __init__(self, what: str, total: Optional[int], unit: str, stream: Any):
        self.what, self.total, self.unit, self.stream = what, total, unit, stream
        self.done = self.nbytes = 0
        self.note = ""
        self.start = self.last = time.monotonic()
        self.width = 0
        self.closed = False

    def __bool__(self) -> bool:
        return True

    def update(self, n: int = 1, nbytes: int = 0) -> None:
        self.set(self.done + n, self.nbytes + nbytes)

    def set(self, done: int, nbytes: int = 0, note: str = "") -> None:
        self.done, self.nbytes, self.note = done, nbytes, note
        now = time.monotonic()
        if now - self.last >= _EVERY:
            self.last = now
            self._draw(self._text(now))

    def _amount(self, n: float) -> str:
        return human_bytes(n) if self.unit == "bytes" else f"{n:,.0f} {self.unit}"

    def _rate(self, n: float) -> str:
        """A rate: a tenth shown where it is below 10 (0.3 parts/s)."""
        if self.unit == "bytes" or n >= 10:
            return f"{self._amount(n)}/s"
        return f"{n:.1f} {self.unit}/s"

    def _text(self, now: float) -> str:
        el = max(now - self.start, 1e-9)
        rate = self.done / el
        parts = []
        if self.total:
            frac = min(self.done / self.total, 1.0)
            fill = int(frac * 30)
            total = human_bytes(self.total) if self.unit == "bytes" else f"{self.total:,}"
            done = human_bytes(self.done) if self.unit == "bytes" else f"{self.done:,}"
            parts.append(f"[{'#' * fill}{'.' * (30 - fill)}] {frac * 100:5.1f}% {done}/{total}"
                         + ("" if self.unit == "bytes" else f" {self.unit}"))
        else:
            parts.append(self._amount(self.done))
        if self.note:
            parts.append(self.note)
        if self.nbytes and self.unit != "bytes":
            parts.append(human_bytes(self.nbytes))
        parts.append(self._rate(rate))
        if self.nbytes and self.unit != "bytes":
            parts.append(f"{human_bytes(self.nbytes / el)}/s")
        if self.total and rate > 0 and self.done < self.total:
            parts.append(f"ETA {_duration((self.total - self.done) / rate)}")
        return f"{self.what} " + ", ".join(parts)

    def _draw(self, text: str, end: str = "") -> None:
        # Padded over what the last line left; cut to the terminal's width
        # so that it never wraps (a wrapped line cannot be redrawn).
        cols = 0
        try:
            import os
            cols = os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            pass
        if cols > 1 and not end:
            text = text[:cols - 1]
        pad = max(self.width - len(text), 0)
        self.width = len(text)
        try:
            self.stream.write("\r" + text + " " * pad + end)
            self.stream.flush()
        except (ValueError, OSError):
            pass  # a stream closed under us: the work itself goes on

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        el = time.monotonic() - self.start
        line = f"{self.what} {self._amount(self.done)}"
        if self.note:
            line += f", {self.note}"
        if self.nbytes and self.unit != "bytes":
            line += f", {human_bytes(self.nbytes)}"
        line += f" in {el:.1f} s"
        if el > 0:
            line += f" ({self._rate(self.done / el)}"
            if self.nbytes and self.unit != "bytes":
                line += f", {human_bytes(self.nbytes / el)}/s"
            line += ")"
        self._draw(line, "\n")


class _Tqdm(_Off):
    """tqdm's bar (tqdm.auto: the notebook's in Jupyter); the bytes beside
    the count."""

    def __init__(self, tqdm: Callable[..., Any], what: str, total: Optional[int], unit: str,
                 stream: Any):
        self.unit = unit
        self.done = self.nbytes = 0
        self.note = ""
        self.last = 0.0
        if unit == "bytes":
            self.bar = tqdm(total=total, desc=what, unit="B", unit_scale=True,
                            unit_divisor=1024, file=stream, leave=True, mininterval=_EVERY)
        else:
            # Counts as k/M only where they are large (a small one would
            # read 50.0/50.0).
            self.bar = tqdm(total=total, desc=what, unit=f" {unit}",
                            unit_scale=total is None or total >= 10000, file=stream,
                            leave=True, mininterval=_EVERY)

    def __bool__(self) -> bool:
        return True

    def update(self, n: int = 1, nbytes: int = 0) -> None:
        self.set(self.done + n, self.nbytes + nbytes)

    def _postfix(self) -> str:
        return ", ".join(x for x in (self.note, human_bytes(self.nbytes)
                                     if self.nbytes and self.unit != "bytes" else "") if x)

    def set(self, done: int, nbytes: int = 0, note: str = "") -> None:
        if (nbytes, note) != (self.nbytes, self.note):
            self.nbytes, self.note = nbytes, note
            now = time.monotonic()
            if now - self.last >= _EVERY:
                self.last = now
                self.bar.set_postfix_str(self._postfix(), refresh=False)
        if done != self.done:
            self.bar.update(done - self.done)
            self.done = done

    def close(self) -> None:
        if self._postfix():
            self.bar.set_postfix_str(self._postfix(), refresh=False)
        if self.bar.total is None:
            self.bar.total = self.done  # the count reached is the total
        self.bar.close()


def _check(progress: Optional[bool]) -> None:
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be True, False or None, not {progress!r}")


def wanted(progress: Optional[bool]) -> bool:
    """Whether a call with this ``progress`` shows any (to skip the work
    of finding a total when none would be shown)."""
    _check(progress)
    if progress is None:
        return _isatty(sys.stderr) or _in_notebook(sys.stderr)
    return progress


def bar(what: str, total: Optional[int] = None, unit: str = "records",
        progress: Optional[bool] = None) -> Any:
    """A progress display for `what` on stderr, counting `unit` (records,
    rows, files, or "bytes") towards `total` (None: unknown, no ETA).  Its
    update(n, nbytes) adds, set(done, nbytes) sets, close() shows the
    totals; it is false when progress is off (its methods do nothing)."""
    if not wanted(progress):
        return _Off()
    stream = sys.stderr
    tqdm = _tqdm()
    if tqdm is not None:
        return _Tqdm(tqdm, what, total, unit, stream)
    return _Line(what, total, unit, stream)


class Poll:
    """Polls `read` (returning (done, nbytes)) from a thread while work in
    C runs with the GIL released, and shows it on `display`; stops when the
    with-block ends (the display is then closed, with a last poll)."""

    def __init__(self, display: Any, read: Callable[[], Any]):
        self.display, self.read = display, read
        self.stop = threading.Event()
        self.thread: Optional[threading.Thread] = None

    def _poll(self) -> None:
        try:
            self.display.set(*self.read())
        except Exception:  # noqa: BLE001  (progress never fails the work)
            pass

    def _run(self) -> None:
        while not self.stop.wait(_EVERY):
            self._poll()

    def __enter__(self) -> "Poll":
        if self.display:
            self.thread = threading.Thread(target=self._run, name="stoker-progress",
                                           daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.thread is not None:
            self.stop.set()
            self.thread.join()
            self._poll()
        self.display.close()
