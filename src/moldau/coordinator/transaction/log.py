"""__transaction_state records, byte for byte as Kafka writes them
(TransactionLogKey v0 and TransactionLogValue v0/v1), so Kafka's tools
(kafka-dump-log --transaction-log-decoder) read Moldau's log and Moldau reads Kafka's."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from itertools import groupby

from moldau.coordinator.group_metadata_manager import partition_for_group
from moldau.coordinator.transaction.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from moldau.storage.partition_name import TopicPartition

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
# Kafka 3.9 writes v0 until the transaction.version feature is 1 or more; a broker
# without finalized features (ZooKeeper mode) stays at 0.
VALUE_VERSION = 0
FLEXIBLE_VALUE_VERSION = 1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# producer id, producer epoch, txn timeout, status
_VALUE_HEAD = struct.Struct(">qhib")
# last update timestamp, start timestamp
_VALUE_TAIL = struct.Struct(">qq")


class TxnLogFormatError(ValueError):
    """A __transaction_state record this broker cannot read."""


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's abs(hashCode) % partitions, the same as for group ids."""
    return partition_for_group(transactional_id, num_partitions)


def topic_configs(min_isr: int = 2, segment_bytes: int = 104_857_600) -> dict[str, str]:
    """The configs __transaction_state is created with (Kafka's transactionTopicConfigs:
    transaction.state.log.min.isr and .segment.bytes). Compacted, since only each id's
    last record counts; uncompressed and never unclean, as Kafka enforces."""
    return {
        "unclean.leader.election.enable": "false",
        "compression.type": "uncompressed",
        "cleanup.policy": "compact",
        "min.insync.replicas": str(min_isr),
        "segment.bytes": str(segment_bytes),
    }


def _string(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(data: bytes | memoryview) -> str | None:
    """The transactional id, or None for a key version this broker does not know
    (Kafka's UnknownKey: skipped on load)."""
    buf = memoryview(data)
    (version,) = _I16.unpack_from(buf, 0)
    if version != KEY_VERSION:
        return None
    (n,) = _I16.unpack_from(buf, 2)
    if n < 0 or 4 + n > len(buf):
        raise TxnLogFormatError("truncated transactional id")
    return bytes(buf[4 : 4 + n]).decode()


def _by_topic(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    ordered = sorted(partitions)
    by_topic = groupby(ordered, key=lambda tp: tp.topic)
    return [(t, [tp.partition for tp in tps]) for t, tps in by_topic]


def encode_value(t: TxnTransitMetadata, flexible: bool = False) -> bytes:
    """TransactionLogValue of a transition: v0, or v1 (flexible) where the cluster's
    transaction.version is 1 or more. Empty has no partition list (null)."""
    if t.state == TransactionState.EMPTY and t.partitions:
        raise ValueError(f"an Empty transaction has no partitions: {t}")
    topics = None if t.state == TransactionState.EMPTY else _by_topic(t.partitions)
    out = bytearray(_I16.pack(FLEXIBLE_VALUE_VERSION if flexible else VALUE_VERSION))
    out += _VALUE_HEAD.pack(t.producer_id, t.producer_epoch, t.txn_timeout_ms, int(t.state))
    if flexible:
        if topics is None:
            out += _uvarint(0)
        else:
            out += _uvarint(len(topics) + 1)
            for topic, ids in topics:
                tb = topic.encode()
                out += _uvarint(len(tb) + 1) + tb
                out += _uvarint(len(ids) + 1)
                out += b"".join(_I32.pack(i) for i in ids)
                out += _uvarint(0)  # no tagged fields
    elif topics is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(topics))
        for topic, ids in topics:
            out += _string(topic) + _I32.pack(len(ids))
            out += b"".join(_I32.pack(i) for i in ids)
    out += _VALUE_TAIL.pack(t.txn_last_update_timestamp, t.txn_start_timestamp)
    if flexible:
        # Kafka 3.9 leaves PreviousProducerId, NextProducerId and
        # ClientTransactionVersion at their defaults, so none is written.
        out += _uvarint(0)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.buf = memoryview(data)
        self.pos = 0

    def unpack(self, s: struct.Struct) -> tuple[int, ...]:
        if self.pos + s.size > len(self.buf):
            raise TxnLogFormatError("truncated transaction log value")
        out = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return out

    def uvarint(self) -> int:
        n = shift = 0
        while True:
            if self.pos >= len(self.buf):
                raise TxnLogFormatError("truncated varint")
            b = self.buf[self.pos]
            self.pos += 1
            n |= (b & 0x7F) << shift
            if b < 0x80:
                return n
            shift += 7

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise TxnLogFormatError("truncated transaction log value")
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def skip_tagged_fields(self) -> dict[int, bytes]:
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.raw(self.uvarint())
        return fields


def decode_value(
    transactional_id: str, data: bytes | memoryview | None
) -> TransactionMetadata | None:
    """The metadata a record holds; None for a tombstone. As Kafka's loader, the last
    producer id and epoch are not in the record and come back as -1."""
    if data is None:
        return None
    r = _Reader(data)
    (version,) = r.unpack(_I16)
    if version not in (VALUE_VERSION, FLEXIBLE_VALUE_VERSION):
        raise TxnLogFormatError(f"unknown transaction log value version {version}")
    flexible = version == FLEXIBLE_VALUE_VERSION
    producer_id, epoch, timeout, status = r.unpack(_VALUE_HEAD)
    try:
        state = TransactionState(status)
    except ValueError:
        raise TxnLogFormatError(f"unknown transaction state id {status}") from None
    partitions: set[TopicPartition] = set()
    count = r.uvarint() - 1 if flexible else r.unpack(_I32)[0]
    for _ in range(max(count, 0)):
        if flexible:
            topic = r.raw(r.uvarint() - 1).decode()
            n = r.uvarint() - 1
        else:
            topic = r.raw(r.unpack(_I16)[0]).decode()
            (n,) = r.unpack(_I32)
        for _ in range(max(n, 0)):
            partitions.add(TopicPartition(topic, r.unpack(_I32)[0]))
        if flexible:
            r.skip_tagged_fields()
    last_update, start = r.unpack(_VALUE_TAIL)
    if flexible:
        r.skip_tagged_fields()
    return TransactionMetadata(
        transactional_id, producer_id, NO_PRODUCER_ID, epoch, NO_PRODUCER_EPOCH, timeout, state,
        set() if state == TransactionState.EMPTY else partitions, start, last_update,
    )  # fmt: skip
