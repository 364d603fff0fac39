"""Replication throttles: which partitions a topic's throttled-replicas value names
on a broker, and the byte rate measured against the bound."""

from __future__ import annotations

from moldau.clock import FakeClock
from moldau.replication.quota import ReplicationQuota, throttled_partitions


def test_throttled_replicas_name_partitions_on_this_broker() -> None:
    assert throttled_partitions(["0:1", "1:2", " 2:1 "], 1) == frozenset({0, 2})
    assert throttled_partitions(["0:1", "1:2"], 3) == frozenset()
    assert throttled_partitions(["*"], 3) is None
    assert throttled_partitions(["junk", "x:1", "0:11"], 1) == frozenset()


def test_the_rate_is_bytes_over_the_window_and_the_bound_is_checked() -> None:
    clock = FakeClock()
    quota = ReplicationQuota(clock, samples=11, sample_ms=1000)
    assert not quota.is_quota_exceeded()  # no bound
    quota.update_bound(1000)
    # A first burst counts over the whole window (10 s), as Kafka's Rate does.
    quota.record(5000)
    assert quota.rate() == 500
    assert not quota.is_quota_exceeded()
    quota.record(6000)
    assert quota.is_quota_exceeded()
    # Old samples leave the window: the rate falls back under the bound.
    clock.advance(11_000)
    quota.record(100)
    assert quota.rate() == 10
    assert not quota.is_quota_exceeded()


def test_a_topic_is_throttled_on_its_named_partitions_or_all() -> None:
    quota = ReplicationQuota(FakeClock())
    quota.mark_throttled("t", frozenset({1}))
    quota.mark_throttled("u", None)
    assert quota.is_throttled("t", 1) and not quota.is_throttled("t", 0)
    assert quota.is_throttled("u", 7)
    quota.mark_throttled("t", frozenset())
    assert not quota.is_throttled("t", 1)
