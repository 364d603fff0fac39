"""The purgatory: requests that wait for a condition or a timeout (Kafka's
DelayedOperation and DelayedOperationPurgatory).

`try_complete_else_watch` tries, watches the keys, then tries once more, so a
completion that races the watch is never missed. `force_complete` runs
`on_complete` exactly once, whoever calls it first (a key check, or the timer,
which then also calls `on_expiration`). The timer is injected: tests use
`ManualTimer`.
"""

from __future__ import annotations

import abc
import asyncio
import heapq
import itertools
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, Protocol, TypeVar

from moldau.clock import Clock

K = TypeVar("K", bound=Hashable)

_PURGE_INTERVAL = 1000


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Timer(Protocol):
    def schedule(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle: ...


class AsyncioTimer:
    def schedule(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, callback)


class _ManualHandle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimer:
    """A timer driven by a FakeClock: `advance` fires what has come due."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._heap: list[tuple[int, int, _ManualHandle, Callable[[], None]]] = []
        self._seq = itertools.count()

    def schedule(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        handle = _ManualHandle()
        due = self.clock.monotonic_ms() + delay_ms
        heapq.heappush(self._heap, (due, next(self._seq), handle, callback))
        return handle

    def advance(self, ms: int) -> None:
        advance = getattr(self.clock, "advance", None)
        if advance is not None:
            advance(ms)
        now = self.clock.monotonic_ms()
        while self._heap and self._heap[0][0] <= now:
            _, _, handle, callback = heapq.heappop(self._heap)
            if not handle.cancelled:
                callback()

    @property
    def pending(self) -> int:
        return sum(1 for *_, h, _ in self._heap if not h.cancelled)


class DelayedOperation(abc.ABC):
    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self._completed = False
        self._timer: TimerHandle | None = None

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now if nobody has; True if this call completed it."""
        if self._completed:
            return False
        self._completed = True
        if self._timer is not None:
            self._timer.cancel()
        self.on_complete()
        return True

    def _expire(self) -> None:
        if self.force_complete():
            self.on_expiration()

    @abc.abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; if met, call force_complete and return its result."""

    @abc.abstractmethod
    def on_complete(self) -> None:
        """Runs exactly once, on completion or expiration."""

    def on_expiration(self) -> None:  # noqa: B027 (optional hook)
        """Runs after on_complete when the operation timed out."""


Op = TypeVar("Op", bound=DelayedOperation)


class DelayedOperationPurgatory(Generic[K, Op]):
    def __init__(self, name: str, timer: Timer) -> None:
        self.name = name
        self.timer = timer
        self._watchers: dict[K, list[Op]] = {}
        # Operations completed (or expired) since the last purge; some of them are
        # still listed under keys nobody has checked since.
        self._completed_since_purge = 0

    def try_complete_else_watch(self, op: Op, keys: Iterable[K]) -> bool:
        """True if `op` completed now; otherwise it is watched under `keys` and its
        expiration is scheduled."""
        if op.try_complete():
            return True
        for key in keys:
            if op.is_completed:
                return False
            self._watchers.setdefault(key, []).append(op)
        if op.try_complete():
            self._count_completed(1)
            return True
        if not op.is_completed:
            op._timer = self.timer.schedule(op.delay_ms, lambda: self._expire(op))
        return False

    def _expire(self, op: Op) -> None:
        op._expire()
        self._count_completed(1)

    def _count_completed(self, n: int) -> None:
        self._completed_since_purge += n
        if self._completed_since_purge >= _PURGE_INTERVAL:
            self._purge_completed()

    def check_and_complete(self, key: K) -> int:
        """Try to complete the operations watching `key`; returns how many did."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        remaining = []
        for op in ops:
            if op.is_completed:
                continue
            if op.try_complete():
                completed += 1
            else:
                remaining.append(op)
        if remaining:
            self._watchers[key] = remaining
        else:
            del self._watchers[key]
        if completed:
            self._count_completed(completed)
        return completed

    def _purge_completed(self) -> None:
        """Drop completed operations still listed under keys nobody checked (an op
        completed through one key stays listed under its others)."""
        self._completed_since_purge = 0
        for key in list(self._watchers):
            live = [op for op in self._watchers[key] if not op.is_completed]
            if live:
                self._watchers[key] = live
            else:
                del self._watchers[key]

    def watched(self) -> int:
        """Operations still watched (completed ones may linger until their key is checked)."""
        return sum(sum(1 for op in ops if not op.is_completed) for ops in self._watchers.values())

    def shutdown(self) -> None:
        for ops in self._watchers.values():
            for op in ops:
                if op._timer is not None:
                    op._timer.cancel()
        self._watchers.clear()
