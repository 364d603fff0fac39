"""Each consumer group's lag over the last minutes, for the group page's chart:
a bounded ring of (time, lag) a group, filled by a sampler the UiServer runs, so
a page opened later still shows what came before."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping

from moldau.clock import Clock

log = logging.getLogger(__name__)

#: Points kept a group: ten minutes at one sample each 2 s.
RING_SIZE = 300
SAMPLE_EVERY_S = 2.0


class LagHistory:
    def __init__(self, clock: Clock, size: int = RING_SIZE) -> None:
        self._clock = clock
        self._size = size
        self._rings: dict[str, deque[tuple[int, int]]] = {}

    def record(self, lags: Mapping[str, int]) -> None:
        """One sample of every group's lag; a group no longer listed (deleted) is
        forgotten, so the rings stay as many as the groups."""
        now = self._clock.milliseconds()
        for group in set(self._rings) - set(lags):
            del self._rings[group]
        for group, lag in lags.items():
            ring = self._rings.setdefault(group, deque(maxlen=self._size))
            ring.append((now, lag))

    def series(self, group: str) -> list[list[int]]:
        """The group's samples, oldest first, as [t_ms, lag] pairs (chart.js' points)."""
        return [list(point) for point in self._rings.get(group, ())]


async def sample_forever(
    history: LagHistory,
    lags: Callable[[], Awaitable[Mapping[str, int]]],
    every_s: float = SAMPLE_EVERY_S,
) -> None:
    """Record `lags()` into `history` every `every_s` until cancelled. A failed
    sample (the cluster unreachable for a moment) is a gap in the chart, not the
    end of the sampler."""
    while True:
        try:
            history.record(await lags())
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.debug("lag sample failed: %s", e)
        await asyncio.sleep(every_s)
