"""The transaction coordinator's settings, under Kafka's broker keys."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    # transaction.state.log.num.partitions
    num_partitions: int = 50
    # transaction.max.timeout.ms: the longest transaction.timeout.ms a producer may ask for
    max_timeout_ms: int = 900_000
    # transactional.id.expiration.ms: an id idle (no transaction) this long is removed
    transactional_id_expiration_ms: int = 604_800_000
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # request.timeout.ms: how long a tombstone write waits for the ISR (a transition's
    # write waits up to the transaction's own timeout, as Kafka's)
    request_timeout_ms: int = 30_000
    # Not a Kafka key: how long to wait before resending a marker that failed
    # (Kafka's inter-broker client backs off retry.backoff.ms, 100 ms by default).
    marker_retry_backoff_ms: int = 100
    # Write TransactionLogValue v1 (Kafka's transaction.version >= 1); v0 otherwise, as
    # a Kafka 3.9 cluster without that feature finalized writes.
    flexible_records: bool = False
