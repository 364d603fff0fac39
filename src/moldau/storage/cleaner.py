"""Log compaction (Kafka's LogCleaner) for topics with cleanup.policy=compact.

One pass over a log: map each key to its latest offset in the dirty section (from
the cleaner checkpoint to the first uncleanable offset), then rewrite the segments
below that offset keeping, per batch, only the records that are the latest for their
key; tombstones (null values) also go once they are older than delete.retention.ms.
Adjacent segments are cleaned together into one while their sizes add up to at most
segment.bytes (Kafka's groupSegmentsBySize): compaction shrinks segments, and without
merging them a compacted topic would keep every segment it ever rolled, each with
its open files. Each cleaned segment replaces its group with a crash-safe swap; a
group of one segment from which nothing was removed is left as it is.

The last batch of the pass stays, as its header alone if every record in it is
superseded, so the cleaned part of the log still ends where it did (Kafka's
upperBoundOffsetOfCleaningRound).

A producer's last batch is never dropped: when every record in it is superseded, its
header stays with no records (Kafka's RETAIN_EMPTY), so that a replica that rebuilds
producer state from the log (a reassignment target, a follower that starts again
below the log start) knows the producer's last sequence as the leader does, and
accepts its next batch when it becomes leader.

Nothing at or above the last stable offset is cleaned, nor read into the key map:
records there are not committed yet (a leader may be cut back to below them), and a
committed value must not give way to a value that may never be. Nor is the active
segment, nor any segment younger than min.compaction.lag.ms (Kafka's
LogCleanerManager.cleanableOffsets). The bound is a segment's base offset, so every
segment the cleaner rewrites lies wholly below it.

Transactions (Kafka's CleanedTransactionMetadata): records of aborted transactions
are removed and never count as a key's latest value (the transaction indexes from
the first segment cleaned on say which were aborted). Control batches (markers) are
kept whole, for now: Kafka removes a marker once its transaction's data is gone and
delete.retention.ms has passed. The cleaned segment's transaction index holds the
entries of the segments it replaces (their markers all stay).

The pass is a generator: it yields between batches so the broker can run other work
(produce, fetch) while a large log is compacted; storage code stays free of asyncio.
"""

from __future__ import annotations

import bisect
from collections.abc import Generator
from dataclasses import dataclass

from moldau.protocol.records import BatchHeader, empty_batch, iter_records, rebuild_batch
from moldau.storage.log import Log
from moldau.storage.segment import LogSegment, SegmentClosedError
from moldau.storage.txn_index import AbortedTxn

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
# Batches processed between two yields.
_STEP = 200
_MAX_RELATIVE_OFFSET = 2**31 - 1


@dataclass(frozen=True, slots=True)
class CleanResult:
    first_dirty_offset: int  # where the next pass starts
    segments: int  # cleaned segments swapped in
    bytes_before: int
    bytes_after: int
    records_removed: int


def first_uncleanable_offset(log: Log, last_stable_offset: int, now_ms: int) -> int:
    """Offsets below this may be compacted (a segment's base offset): not the segment
    holding `last_stable_offset` (at most the high watermark) nor any after it, not
    the active segment, not segments with records younger than min.compaction.lag.ms."""
    end = min(log.active_segment.base_offset, log.segment_base_for(last_stable_offset))
    lag = log.config.min_compaction_lag_ms
    if lag > 0:
        for seg in log.segments[:-1]:
            if now_ms - seg.largest_timestamp() < lag:
                return min(end, seg.base_offset)
    return end


def dirty_ratio(log: Log, first_dirty: int, last_stable_offset: int, now_ms: int) -> float:
    """Share of the cleanable bytes not yet compacted (what min.cleanable.dirty.ratio
    is compared with)."""
    end = first_uncleanable_offset(log, last_stable_offset, now_ms)
    total = dirty = 0
    for seg in log.segments:
        if seg.base_offset >= end:
            break
        total += seg.size
        if seg.base_offset >= first_dirty:
            dirty += seg.size
    return dirty / total if total else 0.0


def clean(
    log: Log, first_dirty: int, last_stable_offset: int, now_ms: int
) -> Generator[None, None, CleanResult | None]:
    """One compaction pass below `last_stable_offset`; returns None when there is
    nothing to clean, or when a segment it reads was deleted between its steps (by
    retention, a truncation or a topic deletion: the next pass sees the new log)."""
    try:
        return (yield from _clean(log, first_dirty, last_stable_offset, now_ms))
    except SegmentClosedError:
        return None


def _clean(
    log: Log, first_dirty: int, last_stable_offset: int, now_ms: int
) -> Generator[None, None, CleanResult | None]:
    end = first_uncleanable_offset(log, last_stable_offset, now_ms)
    first_dirty = max(first_dirty, log.log_start_offset)
    if first_dirty >= end:
        return None
    segments = [s for s in log.segments if s.base_offset < end]
    last_of_producer = log.producer_state.last_data_offsets()
    aborted = AbortedRanges(log.collect_aborted_transactions(segments[0].base_offset, end))
    # 1. The latest offset of every key in the dirty section.
    latest: dict[bytes, int] = {}
    count = 0
    for seg in segments:
        for batch in _batches(seg):
            header = BatchHeader.parse(batch)
            if header.last_offset < first_dirty or header.is_control or aborted.holds(header):
                continue
            for record in iter_records(batch):
                if record.key is not None and record.offset >= first_dirty:
                    latest[record.key] = record.offset
            count += 1
            if count % _STEP == 0:
                yield
    # 2. Tombstones older than this are removed (Kafka's delete horizon: the last
    #    already-clean segment's age minus delete.retention.ms).
    clean_part = [s for s in segments if s.base_offset < first_dirty]
    horizon = (
        clean_part[-1].last_modified_ms() if clean_part else 0
    ) - log.config.delete_retention_ms
    before = after = removed = 0
    done = 0
    max_index_bytes = log.config.segment_index_bytes
    for group in group_segments_by_size(segments, log.config.segment_bytes, max_index_bytes, end):
        cleaned = log.new_cleaned_segment(group[0].base_offset)
        changed = len(group) > 1
        try:
            for seg in group:
                drop_tombstones = seg.last_modified_ms() < horizon
                for txn in seg.txn_index.all_aborted_txns():
                    cleaned.update_txn_index(txn)
                for position in seg.batches_from(0):
                    batch = memoryview(seg.read_bytes(position.position, position.size))
                    header = BatchHeader.parse(batch)
                    records = list(iter_records(batch))
                    if header.is_control:
                        keep = records
                    elif aborted.holds(header):
                        keep = []
                    else:
                        keep = [
                            r
                            for r in records
                            if (r.key is None or latest.get(r.key, -1) <= r.offset)
                            and not (drop_tombstones and r.value is None)
                        ]
                    removed += len(records) - len(keep)
                    changed = changed or len(keep) < len(records)
                    data: bytes | None = None
                    if keep:
                        data = (
                            bytes(batch)
                            if len(keep) == len(records)
                            # In the batch's own codec, at the topic's level for it.
                            else rebuild_batch(batch, keep, log.config.level_of(header.compression))
                        )
                    elif header.last_offset + 1 == end or _is_last_of_producer(
                        header, last_of_producer
                    ):
                        data = empty_batch(header)
                    if data is not None:
                        cleaned.append(
                            header.last_offset, header.max_timestamp, header.last_offset,
                            [data], len(data),
                        )  # fmt: skip
                    count += 1
                    if count % _STEP == 0:
                        yield
        except SegmentClosedError:
            cleaned.delete_files()  # a segment of the group went: no swap
            raise
        before += sum(seg.size for seg in group)
        if not changed:
            cleaned.delete_files()  # the same bytes again: no swap, no files to retire
            after += group[0].size
            continue
        after += cleaned.size
        if log.replace_segments(group, cleaned):
            done += 1
        else:
            return None  # the log changed under us (retention, truncation): next time
        yield
    return CleanResult(end, done, before, after, removed)


def group_segments_by_size(
    segments: list[LogSegment], max_size: int, max_index_bytes: int, first_uncleanable: int
) -> list[list[LogSegment]]:
    """Adjacent segments in groups whose log files add up to at most `max_size` and
    whose indexes to at most `max_index_bytes` each, spanning no more offsets than a
    segment's index can hold (Kafka's groupSegmentsBySize). A segment's last offset
    is taken to be just below the next one's base, to spare a scan."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].offset_index.size_bytes
        time_index_size = segments[i].time_index.size_bytes
        i += 1
        while i < len(segments):
            seg = segments[i]
            following = segments[i + 1].base_offset if i + 1 < len(segments) else first_uncleanable
            last = following - 1
            if (
                log_size + seg.size > max_size
                or index_size + seg.offset_index.size_bytes > max_index_bytes
                or time_index_size + seg.time_index.size_bytes > max_index_bytes
                or (seg.size > 0 and last - group[0].base_offset > _MAX_RELATIVE_OFFSET)
            ):
                break
            group.append(seg)
            log_size += seg.size
            index_size += seg.offset_index.size_bytes
            time_index_size += seg.time_index.size_bytes
            i += 1
        groups.append(group)
    return groups


class AbortedRanges:
    """Which transactional batches belong to an aborted transaction: per producer,
    the offset ranges [first, marker] of its aborted transactions (disjoint)."""

    def __init__(self, txns: list[AbortedTxn]) -> None:
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for t in txns:
            self._by_producer.setdefault(t.producer_id, []).append((t.first_offset, t.last_offset))
        for ranges in self._by_producer.values():
            ranges.sort()

    def holds(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        ranges = self._by_producer.get(header.producer_id)
        if not ranges:
            return False
        i = bisect.bisect_right(ranges, (header.base_offset, 2**63 - 1)) - 1
        return i >= 0 and ranges[i][0] <= header.base_offset <= ranges[i][1]


def _is_last_of_producer(header: BatchHeader, last_of_producer: dict[int, int]) -> bool:
    pid = header.producer_id
    return pid >= 0 and last_of_producer.get(pid) == header.last_offset


def _batches(segment: LogSegment) -> Generator[memoryview, None, None]:
    for position in segment.batches_from(0):
        yield memoryview(segment.read_bytes(position.position, position.size))
