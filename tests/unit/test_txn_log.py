"""__transaction_state records as Kafka writes them."""

from __future__ import annotations

import struct

import pytest

from moldau.coordinator.transaction.log import (
    TxnLogFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from moldau.coordinator.transaction.state import TransactionState, TxnTransitMetadata
from moldau.storage.partition_name import TopicPartition

S = TransactionState


def transit(state: TransactionState, partitions: frozenset[TopicPartition]) -> TxnTransitMetadata:
    return TxnTransitMetadata(
        producer_id=4000, last_producer_id=-1, producer_epoch=2, last_producer_epoch=-1,
        txn_timeout_ms=60000, state=state, partitions=partitions,
        txn_start_timestamp=1_700_000_000_000, txn_last_update_timestamp=1_700_000_000_500,
    )  # fmt: skip


def test_key_bytes() -> None:
    # TransactionLogKey v0: int16 version 0, string (int16 length) "tx".
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert decode_key(b"\x00\x00\x00\x02tx") == "tx"
    assert decode_key(b"\x00\x05\x00\x02tx") is None  # an unknown version is skipped


def test_value_v0_bytes_by_hand_from_kafkas_schema() -> None:
    t = transit(S.ONGOING, frozenset({TopicPartition("b", 1), TopicPartition("a", 0)}))
    expected = (
        struct.pack(">h", 0)  # version
        + struct.pack(">q", 4000)  # ProducerId
        + struct.pack(">h", 2)  # ProducerEpoch
        + struct.pack(">i", 60000)  # TransactionTimeoutMs
        + struct.pack(">b", 1)  # TransactionStatus: Ongoing
        + struct.pack(">i", 2)  # TransactionPartitions: 2 topics
        + struct.pack(">h", 1) + b"a" + struct.pack(">ii", 1, 0)
        + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 1)
        + struct.pack(">q", 1_700_000_000_500)  # TransactionLastUpdateTimestampMs
        + struct.pack(">q", 1_700_000_000_000)  # TransactionStartTimestampMs
    )  # fmt: skip
    assert encode_value(t) == expected


def test_empty_has_a_null_partition_list() -> None:
    data = encode_value(transit(S.EMPTY, frozenset()))
    assert data[17:21] == struct.pack(">i", -1)
    with pytest.raises(ValueError):
        encode_value(transit(S.EMPTY, frozenset({TopicPartition("a", 0)})))


def test_value_v1_bytes_by_hand() -> None:
    t = transit(S.PREPARE_COMMIT, frozenset({TopicPartition("a", 0), TopicPartition("a", 3)}))
    expected = (
        struct.pack(">h", 1) + struct.pack(">qhib", 4000, 2, 60000, 2)
        + b"\x02"  # compact array: 1 topic
        + b"\x02a"  # compact string
        + b"\x03" + struct.pack(">ii", 0, 3)  # compact int32 array of 2
        + b"\x00"  # topic's tagged fields
        + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000)
        + b"\x00"  # tagged fields
    )  # fmt: skip
    assert encode_value(t, flexible=True) == expected


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("state", list(S))
def test_round_trip(state: TransactionState, flexible: bool) -> None:
    parts = (
        frozenset()
        if state == S.EMPTY
        else frozenset({TopicPartition("orders", 0), TopicPartition("orders", 7),
                        TopicPartition("__consumer_offsets", 12)})
    )  # fmt: skip
    t = transit(state, parts)
    m = decode_value("tx", encode_value(t, flexible))
    assert m is not None
    assert (m.transactional_id, m.producer_id, m.producer_epoch, m.txn_timeout_ms, m.state) == (
        "tx", 4000, 2, 60000, state,
    )  # fmt: skip
    assert m.partitions == set(parts)
    assert (m.txn_start_timestamp, m.txn_last_update_timestamp) == (
        1_700_000_000_000, 1_700_000_000_500,
    )  # fmt: skip
    # Not stored in the record: Kafka loads them as -1.
    assert (m.last_producer_id, m.last_producer_epoch) == (-1, -1)


def test_tombstone_and_bad_values() -> None:
    assert decode_value("tx", None) is None
    with pytest.raises(TxnLogFormatError):
        decode_value("tx", b"\x00\x09" + b"\x00" * 40)
    with pytest.raises(TxnLogFormatError):
        decode_value("tx", encode_value(transit(S.ONGOING, frozenset()))[:20])


def test_a_v1_value_with_tagged_fields_kafka_may_write_is_read() -> None:
    data = encode_value(transit(S.COMPLETE_ABORT, frozenset()), flexible=True)
    # PreviousProducerId (tag 0) and ClientTransactionVersion (tag 2) set.
    tagged = b"\x02" + b"\x00\x08" + struct.pack(">q", 3999) + b"\x02\x02" + struct.pack(">h", 2)
    m = decode_value("tx", data[:-1] + tagged)
    assert m is not None and m.state == S.COMPLETE_ABORT


def test_partition_is_javas_hash() -> None:
    # "a".hashCode() == 97; a longer id whose hashCode is negative is taken abs.
    assert partition_for("a", 50) == 97 % 50
    h = 0
    for ch in "my-transactional-id-123":
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    assert partition_for("my-transactional-id-123", 50) == abs(h) % 50
