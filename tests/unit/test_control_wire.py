"""The controller's requests on the wire: every field survives a round trip, and
any bytes a peer sends decode or fail with DecodeError, never anything else."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moldau.protocol.control import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    LiveLeader,
    PartitionError,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from moldau.protocol.control_wire import (
    CONTROL_VERSIONS,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from moldau.protocol.wire import DecodeError, Reader

TOPIC_ID = uuid.uuid4()

LEADER_AND_ISR = LeaderAndIsrRequest(
    controller_id=2,
    controller_epoch=7,
    broker_epoch=4242,
    partition_states=(
        LeaderAndIsrPartitionState("orders", 0, 7, 2, 3, (2, 1), 5, (2, 1, 3), (3,), (), True),
        LeaderAndIsrPartitionState("orders", 1, 7, 1, 0, (1,), 0, (1, 2)),
        LeaderAndIsrPartitionState("ünïcode", 0, 6, -1, 9, (), 2, (3,)),
    ),
    topic_ids={"orders": TOPIC_ID},
    live_leaders=(LiveLeader(1, "b1.example", 9092), LiveLeader(2, "b2", 9093)),
)

STOP_REPLICA = StopReplicaRequest(
    controller_id=1,
    controller_epoch=3,
    broker_epoch=99,
    partition_states=(
        StopReplicaPartitionState("a", 0, 4, True),
        StopReplicaPartitionState("a", 2, -2, False),
        StopReplicaPartitionState("b", 1, 0, True),
    ),
)

UPDATE_METADATA = UpdateMetadataRequest(
    controller_id=3,
    controller_epoch=11,
    broker_epoch=-1,
    partition_states=(
        UpdateMetadataPartitionState("orders", 0, 11, 3, 2, (3, 1), 8, (3, 1, 2), (2,)),
        UpdateMetadataPartitionState("logs", 4, 10, 1, 0, (1,), 0, (1,)),
    ),
    live_brokers=(
        UpdateMetadataBroker(1, (UpdateMetadataEndpoint(9092, "h1", "PLAINTEXT"),), "rack-a"),
        UpdateMetadataBroker(
            3,
            (
                UpdateMetadataEndpoint(9092, "h3", "PLAINTEXT"),
                UpdateMetadataEndpoint(9094, "h3-int", "INTERNAL", 0),
            ),
        ),
    ),
    topic_ids={"orders": TOPIC_ID, "logs": uuid.uuid4()},
)


@pytest.mark.parametrize("request_", [LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA])
def test_requests_survive_a_round_trip(request_: object) -> None:
    key, version, body = encode_request(request_)  # type: ignore[arg-type]
    assert CONTROL_VERSIONS[key] == version
    r = Reader(memoryview(body))
    assert decode_request(key, version, r) == request_
    assert r.remaining() == 0


@pytest.mark.parametrize(
    ("key", "response", "topic_ids"),
    [
        (4, LeaderAndIsrResponse(0, (PartitionError("orders", 0, 0),
                                     PartitionError("orders", 1, 6))), {"orders": TOPIC_ID}),
        (5, StopReplicaResponse(0, (PartitionError("a", 0, 0), PartitionError("b", 1, 3))), {}),
        (6, UpdateMetadataResponse(11), {}),
    ],
)  # fmt: skip
def test_responses_survive_a_round_trip(key: int, response: object, topic_ids: dict) -> None:  # type: ignore[type-arg]
    body = encode_response(response, topic_ids)  # type: ignore[arg-type]
    r = Reader(memoryview(body))
    assert decode_response(key, CONTROL_VERSIONS[key], r, topic_ids) == response
    assert r.remaining() == 0


def test_a_version_moldau_does_not_speak_is_refused() -> None:
    _, _, body = encode_request(STOP_REPLICA)
    with pytest.raises(DecodeError, match="not a control version"):
        decode_request(5, 1, Reader(memoryview(body)))


def test_a_huge_claimed_array_is_refused_before_allocating() -> None:
    # controller id, epoch, broker epoch, type, then TopicStates claiming 2^31 entries.
    body = bytes(4 + 4 + 8 + 1) + b"\xff\xff\xff\xff\x07"
    with pytest.raises(DecodeError, match="array of"):
        decode_request(4, 5, Reader(memoryview(body)))


ENCODED = [encode_request(r) for r in (LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA)]


@given(which=st.integers(0, 2), cut=st.integers(0, 10_000), flips=st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=8))  # fmt: skip
def test_mutated_and_truncated_requests_decode_or_fail_cleanly(
    which: int, cut: int, flips: list[tuple[int, int]]
) -> None:
    key, version, body = ENCODED[which]
    data = bytearray(body[: cut % (len(body) + 1)])
    for pos, value in flips:
        if data:
            data[pos % len(data)] = value
    with contextlib.suppress(DecodeError):
        decode_request(key, version, Reader(memoryview(bytes(data))))


@given(st.binary(max_size=300), st.sampled_from([4, 5, 6]))
def test_random_bytes_decode_or_fail_cleanly(data: bytes, key: int) -> None:
    with contextlib.suppress(DecodeError):
        decode_request(key, CONTROL_VERSIONS[key], Reader(memoryview(data)))
