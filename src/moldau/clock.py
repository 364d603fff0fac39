"""Clocks. Every component that waits or measures age takes one; tests use FakeClock."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int:
        """Wall-clock time in ms since the epoch (record timestamps, file ages)."""
        ...

    def monotonic_ms(self) -> int:
        """Monotonic time in ms (timeouts, lag, expiry)."""
        ...

    def monotonic_ns(self) -> int:
        """Monotonic time in ns (request times)."""
        ...


class SystemClock:
    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._wall = now_ms
        self._mono = 0

    def milliseconds(self) -> int:
        return self._wall

    def monotonic_ms(self) -> int:
        return self._mono

    def monotonic_ns(self) -> int:
        return self._mono * 1_000_000

    def advance(self, ms: int) -> None:
        self._wall += ms
        self._mono += ms


SYSTEM_CLOCK = SystemClock()
