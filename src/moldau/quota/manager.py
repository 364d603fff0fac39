"""Kafka's ClientQuotaManager, one per quota type (Produce, Fetch, Request,
ControllerMutation): the quotas set (`overrides`), a sensor per set of metric
tags that clients share, and the throttle time of a client over its bound.

Nothing is measured while no quota of the type is set (`enabled`), so the request
path of a broker without quotas pays one attribute test."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from moldau.clock import Clock
from moldau.quota.entities import QuotaEntity, Tags, metric_tags, quota_limit
from moldau.quota.rate import Avg, Rate, TokenBucket, throttle_time_ms, token_throttle_time_ms

# Kafka drops a client's sensors after an hour without use.
INACTIVE_SENSOR_EXPIRY_MS = 3600 * 1000


class QuotaType(enum.Enum):
    """Kafka's QuotaType: the metric group and the config key of each."""

    PRODUCE = ("Produce", "producer_byte_rate")
    FETCH = ("Fetch", "consumer_byte_rate")
    REQUEST = ("Request", "request_percentage")
    CONTROLLER_MUTATION = ("ControllerMutation", "controller_mutation_rate")

    @property
    def group(self) -> str:
        return self.value[0]

    @property
    def config_key(self) -> str:
        return self.value[1]


@dataclass(slots=True)
class ClientSensor:
    """What clients with the same metric tags share: their rate, its bound, and the
    throttle times they were given."""

    tags: Tags
    bound: float | None
    rate: Rate
    throttle_time: Avg
    last_used_ms: int
    tokens: TokenBucket | None = field(default=None)


class ClientQuotaManager:
    def __init__(self, quota_type: QuotaType, clock: Clock, samples: int, window_ms: int) -> None:
        self.quota_type = quota_type
        self.clock = clock
        self.samples = samples
        self.window_ms = window_ms
        self.overrides: dict[QuotaEntity, float] = {}
        self.sensors: dict[Tags, ClientSensor] = {}
        self.enabled = False
        # A bound of a request quota's throttle: one window (Kafka's
        # ClientRequestQuotaManager.maxThrottleTimeMs).
        self.max_throttle_ms: int | None = None

    def update_quota(self, entity: QuotaEntity, value: float | None) -> None:
        if value is None:
            self.overrides.pop(entity, None)
        else:
            self.overrides[entity] = value
        self.enabled = bool(self.overrides)
        # Which sensor a client counts in may change with the quotas set: sensors
        # are found anew from now on, and the bounds of those kept are updated.
        for tags, sensor in self.sensors.items():
            sensor.bound = quota_limit(self.overrides, tags)
            if sensor.tokens is not None and sensor.bound is not None:
                sensor.tokens.rate = sensor.bound

    def sensor(self, user: str, client_id: str) -> ClientSensor:
        tags = metric_tags(self.overrides, user, client_id)
        now = self.clock.monotonic_ms()
        sensor = self.sensors.get(tags)
        if sensor is None:
            self._expire(now)
            bound = quota_limit(self.overrides, tags)
            sensor = ClientSensor(
                tags,
                bound,
                Rate(self.samples, self.window_ms),
                Avg(self.samples, self.window_ms),
                now,
            )
            self.sensors[tags] = sensor
        sensor.last_used_ms = now
        return sensor

    def _expire(self, now: int) -> None:
        cutoff = now - INACTIVE_SENSOR_EXPIRY_MS
        idle = [t for t, s in self.sensors.items() if s.last_used_ms < cutoff]
        for tags in idle:
            del self.sensors[tags]

    def record(self, user: str, client_id: str, value: float) -> int:
        """Count `value` for the client; the throttle time (ms) if that takes it
        over its bound, else 0 (Kafka's maybeRecordAndGetThrottleTimeMs)."""
        if not self.enabled:
            return 0
        sensor = self.sensor(user, client_id)
        now = self.clock.monotonic_ms()
        sensor.rate.record(value, now)
        bound = sensor.bound
        if bound is None:
            return 0
        measured = sensor.rate.measure(now)
        if measured <= bound:
            return 0
        ms = throttle_time_ms(measured, bound, sensor.rate.window_size_ms(now))
        if self.max_throttle_ms is not None:
            ms = min(ms, self.max_throttle_ms)
        return ms

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back what a throttled fetch recorded: it answers without records."""
        if self.enabled:
            self.sensor(user, client_id).rate.record(-value, self.clock.monotonic_ms())

    def max_value_in_window(self, user: str, client_id: str) -> float:
        """The most one request can carry without being throttled for certain
        (Kafka's getMaxValueInQuotaWindow: a fetch asks for no more)."""
        if not self.enabled:
            return math.inf
        bound = self.sensor(user, client_id).bound
        if bound is None:
            return math.inf
        return bound * (self.samples - 1) * self.window_ms / 1000

    def throttled(self, user: str, client_id: str, ms: int) -> None:
        """The client was throttled for `ms` (the throttle-time metric)."""
        if ms > 0:
            self.sensor(user, client_id).throttle_time.record(ms, self.clock.monotonic_ms())

    def metrics(self) -> Iterator[tuple[Tags, float, float]]:
        """(tags, rate, mean throttle time in ms) of every sensor."""
        now = self.clock.monotonic_ms()
        for tags, s in self.sensors.items():
            yield tags, s.rate.measure(now), s.throttle_time.measure(now)


class ControllerMutationQuotaManager(ClientQuotaManager):
    """Partitions created or deleted per second, from a token bucket (KIP-599)."""

    def sensor(self, user: str, client_id: str) -> ClientSensor:
        sensor = super().sensor(user, client_id)
        if sensor.tokens is None and sensor.bound is not None:
            sensor.tokens = TokenBucket(
                sensor.bound, self.samples, self.window_ms, self.clock.monotonic_ms()
            )
        return sensor

    def record_mutation(self, user: str, client_id: str, permits: float, strict: bool) -> int:
        """Take `permits` (partitions) for a topic's mutation. Strict (the versions
        that can answer THROTTLING_QUOTA_EXCEEDED): while the bucket is below zero
        nothing is taken, and the throttle time (> 0) says the mutation is refused.
        Permissive: always taken; the throttle time only delays the answer."""
        if not self.enabled:
            return 0
        sensor = self.sensor(user, client_id)
        tokens = sensor.tokens
        now = self.clock.monotonic_ms()
        if tokens is None:
            sensor.rate.record(permits, now)
            return 0
        if strict:
            left = tokens.measure(now)
            if left < 0:
                return token_throttle_time_ms(left, tokens.rate)
            tokens.record(permits, now)
            sensor.rate.record(permits, now)
            return 0
        tokens.record(permits, now)
        sensor.rate.record(permits, now)
        left = tokens.measure(now)
        return token_throttle_time_ms(left, tokens.rate) if left < 0 else 0
