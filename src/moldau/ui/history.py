"""Bounded history of the numbers the console charts, kept in the server so a page
opened later still shows the last minutes; and rates from cumulative counters."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

#: Samples kept a series: 10 minutes at one sample every 2 s.
DEFAULT_POINTS = 300
#: Series kept at most (a group's lag is one a group): the oldest go first.
MAX_SERIES = 1000


class History:
    def __init__(self, points: int = DEFAULT_POINTS, max_series: int = MAX_SERIES) -> None:
        self.points = points
        self.max_series = max_series
        self._series: dict[str, deque[tuple[int, float]]] = {}

    def add(self, name: str, t_ms: int, value: float) -> None:
        """Append a point; when a new series needs room, the one updated least
        lately goes (a series still sampled outlives one that stopped)."""
        ring = self._series.pop(name, None)
        if ring is None:
            while len(self._series) >= self.max_series:
                del self._series[next(iter(self._series))]
            ring = deque(maxlen=self.points)
        self._series[name] = ring
        ring.append((t_ms, value))

    def has(self, name: str) -> bool:
        return name in self._series

    def drop(self, *names: str) -> None:
        for name in names:
            self._series.pop(name, None)

    def points_of(self, name: str) -> list[list[float]]:
        return [[t, v] for t, v in self._series.get(name, ())]

    def series(self, *names: str) -> list[dict[str, object]]:
        """The charts' form: [{"name": ..., "points": [[t_ms, value], ...]}, ...]."""
        return [{"name": n, "points": self.points_of(n)} for n in names]


class Rate:
    """Per-second rate of a cumulative counter between two samples. A counter that
    went down (a broker restarted, retention deleted a segment) starts afresh
    rather than giving a negative rate."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None

    def update(self, t_s: float, total: float) -> float | None:
        last, self._last = self._last, (t_s, total)
        if last is None or t_s <= last[0] or total < last[1]:
            return None
        return (total - last[1]) / (t_s - last[0])


def growth_rates(
    before: Mapping[K, float], after: Mapping[K, float], seconds: float
) -> dict[K, float]:
    """Per-second growth of each counter in both samples. One that went down (a
    broker restarted, retention deleted a segment) or is missing from either (a
    leader moving, an endpoint not answering) is left out, so that it shows
    neither as a negative rate nor, when it comes back, as a spike."""
    if seconds <= 0:
        return {}
    return {
        k: (v - before[k]) / seconds for k, v in after.items() if k in before and v >= before[k]
    }
