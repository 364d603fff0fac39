"""The topic-level settings the storage layer acts on (Kafka's LogConfig subset).

Built from topic configs by moldau.config.topic; defaults are Kafka's.
"""

from __future__ import annotations

from dataclasses import dataclass

from moldau.protocol.records import Compression, TimestampType


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: no limit
    retention_bytes: int = -1  # -1: no limit
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    message_timestamp_before_max_ms: int = 2**63 - 1
    message_timestamp_after_max_ms: int = 2**63 - 1
    flush_messages: int = 2**63 - 1
    flush_ms: int = 2**63 - 1
    file_delete_delay_ms: int = 60_000
    # None keeps each producer's codec (compression.type=producer).
    compression: Compression | None = None
    # compression.<codec>.level of that codec (None: the library's default).
    compression_level: int | None = None
    # compression.<codec>.level of every leveled codec (Kafka's defaults unless set):
    # the log cleaner rebuilds a batch in its own codec at that codec's level.
    codec_levels: tuple[tuple[Compression, int], ...] = (
        (Compression.GZIP, -1),
        (Compression.LZ4, 9),
        (Compression.ZSTD, 3),
    )
    compact: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    delete: bool = True  # cleanup.policy contains "delete"
    # Replication settings of the topic, carried here as Kafka's LogConfig does.
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    def level_of(self, codec: Compression) -> int | None:
        """compression.<codec>.level, None for a codec without levels."""
        return next((level for c, level in self.codec_levels if c == codec), None)
