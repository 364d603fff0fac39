"""Kafka's sampled statistics, as its quota sensors use them: a Rate (a total over
a window of samples, per second), an Avg, and the TokenBucket of the controller
mutation quota. Times are passed in (ms of a monotonic clock), so these are pure
arithmetic over what was recorded."""

from __future__ import annotations

from collections import deque


class SampledStat:
    """Values summed per sample of `window_ms`; `samples` of them are kept. A sample
    starts when a value arrives after the previous one ended (Kafka's SampledStat:
    time with no values makes no samples)."""

    __slots__ = ("_samples", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._samples: deque[list[float]] = deque(maxlen=samples)  # [start ms, sum, count]

    def record(self, value: float, now_ms: int) -> None:
        s = self._samples
        if not s or now_ms - s[-1][0] >= self.window_ms:
            s.append([now_ms, 0.0, 0])
        last = s[-1]
        last[1] += value
        last[2] += 1

    def _purge(self, now_ms: int) -> None:
        # A sample older than the whole window no longer counts.
        expire = self.samples * self.window_ms
        s = self._samples
        while s and now_ms - s[0][0] >= expire:
            s.popleft()

    def total(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(x[1] for x in self._samples)

    def count(self, now_ms: int) -> int:
        self._purge(now_ms)
        return int(sum(x[2] for x in self._samples))

    def window_size_ms(self, now_ms: int) -> int:
        """The time a rate is taken over (Kafka's Rate.windowSize): since the oldest
        sample kept, but never less than samples - 1 whole windows, so that a first
        burst is not measured over a few milliseconds and called enormous."""
        self._purge(now_ms)
        elapsed = int(now_ms - self._samples[0][0]) if self._samples else 0
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)


class Rate(SampledStat):
    """Per second, over the window."""

    __slots__ = ()

    def measure(self, now_ms: int) -> float:
        total = self.total(now_ms)
        return total * 1000.0 / self.window_size_ms(now_ms)


class Avg(SampledStat):
    """The mean of the values recorded in the window (0 when there are none; Kafka
    says NaN, which a Prometheus gauge shows badly)."""

    __slots__ = ()

    def measure(self, now_ms: int) -> float:
        n = self.count(now_ms)
        return self.total(now_ms) / n if n else 0.0


class TokenBucket:
    """Kafka's TokenBucket (KIP-599): tokens come at `rate` a second up to a burst
    of rate x samples x window; a mutation takes as many as it changes partitions
    and may take the bucket below zero, which then refuses (strict) or throttles."""

    __slots__ = ("_last_ms", "rate", "samples", "tokens", "window_ms")

    def __init__(self, rate: float, samples: int, window_ms: int, now_ms: int) -> None:
        self.rate = rate
        self.samples = samples
        self.window_ms = window_ms
        self.tokens = self.burst
        self._last_ms = now_ms

    @property
    def burst(self) -> float:
        return self.rate * self.samples * self.window_ms / 1000.0

    def _refill(self, now_ms: int) -> None:
        elapsed = max(now_ms - self._last_ms, 0)
        self.tokens = min(self.burst, self.tokens + self.rate * elapsed / 1000.0)
        self._last_ms = now_ms

    def measure(self, now_ms: int) -> float:
        self._refill(now_ms)
        return self.tokens

    def record(self, value: float, now_ms: int) -> None:
        self._refill(now_ms)
        self.tokens -= value


def throttle_time_ms(value: float, bound: float, window_ms: int) -> int:
    """How long a client over its quota waits (Kafka's QuotaUtils.throttleTime):
    the time for the measured rate, taken over the same window, to fall back to the
    bound if nothing more were recorded."""
    return round((value - bound) / bound * window_ms)


def token_throttle_time_ms(tokens: float, rate: float) -> int:
    """The time for an emptied token bucket to be back at zero."""
    return round(-tokens / rate * 1000)
