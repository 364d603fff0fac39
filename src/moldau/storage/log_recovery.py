"""What opening a log recovers: segment swaps a crash interrupted, and the producer
state rebuilt from the batches (Kafka's LogLoader rebuildProducerState and
LogSegment.recover's producer part).

Batch headers are read, and the one record of each transaction marker. A marker
that ends an aborted transaction in a segment being recovered is written to that
segment's transaction index again (recovery emptied it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Sequence
from pathlib import Path

from moldau.protocol.errors import KafkaError
from moldau.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    ControlRecordType,
    read_end_txn_marker,
)
from moldau.protocol.wire import DecodeError
from moldau.storage.producer_state import ProducerStateManager
from moldau.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from moldau.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

log = logging.getLogger(__name__)


def marker_of(header: BatchHeader, batch: bytes) -> tuple[ControlRecordType, int] | None:
    """(type, coordinator epoch) of a producer's control batch; None for any other
    batch, or a marker that cannot be read (what was written is replayed as far as
    it can be: one unreadable marker must not keep the log from opening)."""
    if not header.is_control or header.producer_id < 0:
        return None
    try:
        return read_end_txn_marker(batch)
    except (KafkaError, DecodeError) as e:
        log.warning("unreadable transaction marker at offset %d: %s", header.base_offset, e)
        return None


def replay_producer_state(
    state: ProducerStateManager,
    segments: Sequence[LogSegment],
    start_offset: int,
    reindex: Collection[int] = (),
) -> None:
    """Replay into `state` the batches from `start_offset` on; `segments`: the log's
    from the one holding `start_offset`. `reindex`: base offsets of the segments
    whose transaction index is rewritten from the markers met."""
    for segment in segments:
        _, position = segment.offset_index.lookup(start_offset)
        indexing = segment.base_offset in reindex
        for pos, header in segment.positioned_headers_from(position):
            if header.last_offset < state.map_end_offset:
                continue
            marker = None
            if header.is_control and header.producer_id >= 0:
                marker = marker_of(header, segment.read_bytes(pos, header.size))
            completed = state.replay(header, marker)
            if completed is None:
                continue
            if completed.is_aborted and indexing:
                segment.update_txn_index(
                    AbortedTxn(
                        completed.producer_id,
                        completed.first_offset,
                        completed.last_offset,
                        state.last_stable_offset(completed),
                    )
                )
            state.complete_txn(completed)


def complete_swaps(directory: Path, names: list[str]) -> set[int]:
    """Finish segment swaps a crash interrupted: a `.log.swap` is a complete cleaned
    segment that replaces the segments within its offset range (Kafka's LogLoader):
    those not yet renamed .deleted are removed, the swap takes its final name.
    Returns their base offsets (their indexes are rebuilt; the removed segments'
    index files, left without a log, are removed by the caller)."""
    done = set()
    for name in names:
        if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        path = directory / name
        base = int(name.split(".")[0])
        end = next_offset_of(path)
        for other in names:
            if other.endswith(LOG_SUFFIX) and base < int(other[: -len(LOG_SUFFIX)]) < end:
                os.unlink(directory / other)
        target = directory / f"{base:020d}{LOG_SUFFIX}"
        os.replace(path, target)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            (directory / f"{base:020d}{suffix}").unlink(missing_ok=True)
        done.add(base)
    return done


def next_offset_of(path: Path) -> int:
    """The offset after the last batch of a (complete, flushed) segment file, from
    the batch headers alone; its base offset if it has none."""
    end = int(path.name.split(".")[0])
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            header = BatchHeader.parse(os.pread(fd, HEADER_SIZE, position))
            end = header.last_offset + 1
            position += header.size
    finally:
        os.close(fd)
    return end
