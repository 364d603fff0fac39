"""A progress bar for the tools' long runs whose total is known (records to send,
bytes of a file to read): drawn on stderr, and only when stderr is a terminal, so
that piped or redirected output never holds one. Redrawn at most every
`interval_s` seconds (by the clock passed in) and erased when the run ends, so the
tool's own output starts on a clean line.

A tool whose stdout is that terminal too either prints its few lines through
`Progress.print` (the bar steps aside and comes back), or, when it prints many
(records, a dump), shows the bar only when its output goes elsewhere
(`enabled=output_redirected()`).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO

#: How often the bar is redrawn at most, in seconds: often enough to look alive,
#: rarely enough to cost nothing next to the work.
INTERVAL_S = 0.2
_MIN_BAR = 10


def render(done: int, total: int, width: int, label: str = "", unit: str = "") -> str:
    """One line of at most `width` characters: label, bar, percentage and counts."""
    total = max(total, 0)
    done = min(max(done, 0), total) if total else max(done, 0)
    fraction = done / total if total else 1.0
    # The count padded to the total's width, so the bar keeps its length.
    width_of_total = len(f"{total:,}")
    counts = f"{done:>{width_of_total},}/{total:,}{' ' + unit if unit else ''}"
    tail = f" {fraction * 100:5.1f}% {counts}"
    head = f"{label} " if label else ""
    room = width - len(head) - len(tail) - 2
    if room < _MIN_BAR:
        return (head + tail.strip())[:width]
    filled = int(room * fraction)
    return f"{head}[{'#' * filled}{'.' * (room - filled)}]{tail}"


class Progress:
    """`with Progress(total, label) as bar: ... bar.advance(n)`; a no-op unless
    `stream` is a terminal (and `enabled`)."""

    def __init__(
        self,
        total: int,
        label: str = "",
        unit: str = "",
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = INTERVAL_S,
        enabled: bool = True,
    ) -> None:
        self.total = total
        self.label = label
        self.unit = unit
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self._interval_s = interval_s
        self._drawn_at: float | None = None
        self.active = enabled and _is_terminal(self._stream)

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def update(self, done: int) -> None:
        self.done = done
        if not self.active:
            return
        now = self._clock()
        if self._drawn_at is not None and now - self._drawn_at < self._interval_s:
            return
        self._drawn_at = now
        self._draw()

    def _draw(self) -> None:
        width = shutil.get_terminal_size((80, 24)).columns - 1
        self._stream.write("\r" + render(self.done, self.total, width, self.label, self.unit))
        self._stream.flush()

    def print(self, line: str, stream: TextIO | None = None) -> None:
        """Print a line of the tool's output (stdout by default) without the bar
        in it: erased first, drawn again after."""
        drawn = self.active and self._drawn_at is not None
        if drawn:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
        out = stream if stream is not None else sys.stdout
        out.write(line + "\n")
        out.flush()
        if drawn:
            self._draw()

    def close(self) -> None:
        """Erase the bar (if one was drawn)."""
        if self.active and self._drawn_at is not None:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
        self.active = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def output_redirected() -> bool:
    """Whether stdout goes somewhere other than a terminal (a file, a pipe)."""
    return not _is_terminal(sys.stdout)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # a closed or fake stream
        return False
