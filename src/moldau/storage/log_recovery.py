"""Rebuilding a log's producer state from its batches (Kafka's LogLoader
rebuildProducerState and LogSegment.recover's producer part).

Batch headers are read, and the one record of each transaction marker. A marker
that ends an aborted transaction in a segment being recovered is written to that
segment's transaction index again (recovery emptied it).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from moldau.protocol.errors import KafkaError
from moldau.protocol.records import BatchHeader, ControlRecordType, read_end_txn_marker
from moldau.protocol.wire import DecodeError
from moldau.storage.producer_state import ProducerStateManager
from moldau.storage.segment import LogSegment
from moldau.storage.txn_index import AbortedTxn

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
