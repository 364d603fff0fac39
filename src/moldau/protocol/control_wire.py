"""Wire codecs of the controller-to-broker requests, written by hand because kio has
no schemas for them (Kafka 4.0 removed them). One version of each, the newest
of Kafka 3.x that carries what Moldau uses, all flexible:

- LeaderAndIsr v5 (topic ids, KIP-516); its response groups errors by topic id.
- StopReplica v3 (leader epoch per partition, KIP-570).
- UpdateMetadata v7 (topic ids).

Decoding refuses lengths the remaining bytes cannot hold (Reader.array_length),
so a hostile peer cannot make the broker allocate."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar
from uuid import UUID

from moldau.protocol.control import (
    ControlRequest,
    ControlResponse,
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
from moldau.protocol.wire import DecodeError, Reader, Writer

LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6

# api key -> the one version Moldau speaks.
CONTROL_VERSIONS = {LEADER_AND_ISR: 5, STOP_REPLICA: 3, UPDATE_METADATA: 7}

# LeaderAndIsr v5's Type: 0 = incremental, 1 = full (every partition of the broker).
_INCREMENTAL = 0
ZERO_UUID = UUID(int=0)

T = TypeVar("T")


# -- shared pieces --------------------------------------------------------------------


def _array(r: Reader, item: Callable[[Reader], T], min_size: int = 1) -> list[T]:
    n = r.array_length(True, min_size)
    if n < 0:
        raise DecodeError("unexpected null array")
    return [item(r) for _ in range(n)]


def _ints(r: Reader) -> tuple[int, ...]:
    return tuple(_array(r, Reader.int32, 4))


def _write_ints(w: Writer, values: Iterable[int]) -> None:
    values = tuple(values)
    w.array_length(len(values), True)
    for v in values:
        w.int32(v)


def _string(r: Reader) -> str:
    return r.string(True)


def _by_topic(items: Iterable[T], topic: Callable[[T], str]) -> dict[str, list[T]]:
    out: dict[str, list[T]] = defaultdict(list)
    for item in items:
        out[topic(item)].append(item)
    return out


def _write_topics(
    w: Writer,
    states: Iterable[T],
    topic_of: Callable[[T], str],
    topic_ids: Mapping[str, UUID] | None,
    write_partition: Callable[[Writer, T], None],
) -> None:
    """Partition states grouped by topic (v2+ layouts), with topic ids when given."""
    topics = _by_topic(states, topic_of)
    w.array_length(len(topics), True)
    for topic, items in topics.items():
        w.string(topic, True)
        if topic_ids is not None:
            w.uuid(topic_ids.get(topic, ZERO_UUID))
        w.array_length(len(items), True)
        for item in items:
            write_partition(w, item)
            w.empty_tagged_fields()
        w.empty_tagged_fields()


def _read_topics(
    r: Reader, with_ids: bool, read_partition: Callable[[Reader, str], T], min_size: int
) -> tuple[list[T], dict[str, UUID]]:
    states: list[T] = []
    topic_ids: dict[str, UUID] = {}

    def topic_state(r: Reader) -> None:
        topic = _string(r)
        if with_ids:
            topic_id = r.uuid()
            if topic_id != ZERO_UUID:
                topic_ids[topic] = topic_id

        def partition(r: Reader) -> None:
            states.append(read_partition(r, topic))
            r.skip_tagged_fields()

        _array(r, partition, min_size)
        r.skip_tagged_fields()

    _array(r, topic_state, 3)
    return states, topic_ids


def _check_api_version(api_key: int, version: int) -> None:
    if CONTROL_VERSIONS.get(api_key) != version:
        raise DecodeError(f"api {api_key} v{version} is not a control version Moldau speaks")


# -- requests -------------------------------------------------------------------------


def encode_request(request: ControlRequest) -> tuple[int, int, bytes]:
    """(api key, version, body) of a control request."""
    w = Writer()
    if isinstance(request, LeaderAndIsrRequest):
        _write_leader_and_isr(w, request)
        key = LEADER_AND_ISR
    elif isinstance(request, StopReplicaRequest):
        _write_stop_replica(w, request)
        key = STOP_REPLICA
    else:
        _write_update_metadata(w, request)
        key = UPDATE_METADATA
    return key, CONTROL_VERSIONS[key], bytes(w.buf)


def decode_request(api_key: int, version: int, r: Reader) -> ControlRequest:
    _check_api_version(api_key, version)
    if api_key == LEADER_AND_ISR:
        return _read_leader_and_isr(r)
    if api_key == STOP_REPLICA:
        return _read_stop_replica(r)
    return _read_update_metadata(r)


def _write_leader_and_isr(w: Writer, req: LeaderAndIsrRequest) -> None:
    w.int32(req.controller_id)
    w.int32(req.controller_epoch)
    w.int64(req.broker_epoch)
    w.int8(_INCREMENTAL)

    def partition(w: Writer, s: LeaderAndIsrPartitionState) -> None:
        w.int32(s.partition)
        w.int32(s.controller_epoch)
        w.int32(s.leader)
        w.int32(s.leader_epoch)
        _write_ints(w, s.isr)
        w.int32(s.partition_epoch)
        _write_ints(w, s.replicas)
        _write_ints(w, s.adding_replicas)
        _write_ints(w, s.removing_replicas)
        w.int8(1 if s.is_new else 0)

    _write_topics(w, req.partition_states, lambda s: s.topic, req.topic_ids, partition)
    w.array_length(len(req.live_leaders), True)
    for leader in req.live_leaders:
        w.int32(leader.broker_id)
        w.string(leader.host, True)
        w.int32(leader.port)
        w.empty_tagged_fields()
    w.empty_tagged_fields()


def _read_leader_and_isr(r: Reader) -> LeaderAndIsrRequest:
    controller_id = r.int32()
    controller_epoch = r.int32()
    broker_epoch = r.int64()
    r.int8()  # Type: Moldau's controller always sends incremental requests

    def partition(r: Reader, topic: str) -> LeaderAndIsrPartitionState:
        return LeaderAndIsrPartitionState(
            topic=topic,
            partition=r.int32(),
            controller_epoch=r.int32(),
            leader=r.int32(),
            leader_epoch=r.int32(),
            isr=_ints(r),
            partition_epoch=r.int32(),
            replicas=_ints(r),
            adding_replicas=_ints(r),
            removing_replicas=_ints(r),
            is_new=r.int8() != 0,
        )

    states, topic_ids = _read_topics(r, True, partition, 20)

    def live_leader(r: Reader) -> LiveLeader:
        leader = LiveLeader(r.int32(), _string(r), r.int32())
        r.skip_tagged_fields()
        return leader

    leaders = _array(r, live_leader, 9)
    r.skip_tagged_fields()
    return LeaderAndIsrRequest(
        controller_id, controller_epoch, broker_epoch, tuple(states), topic_ids, tuple(leaders)
    )


def _write_stop_replica(w: Writer, req: StopReplicaRequest) -> None:
    w.int32(req.controller_id)
    w.int32(req.controller_epoch)
    w.int64(req.broker_epoch)

    def partition(w: Writer, s: StopReplicaPartitionState) -> None:
        w.int32(s.partition)
        w.int32(s.leader_epoch)
        w.int8(1 if s.delete_partition else 0)

    _write_topics(w, req.partition_states, lambda s: s.topic, None, partition)
    w.empty_tagged_fields()


def _read_stop_replica(r: Reader) -> StopReplicaRequest:
    controller_id = r.int32()
    controller_epoch = r.int32()
    broker_epoch = r.int64()

    def partition(r: Reader, topic: str) -> StopReplicaPartitionState:
        return StopReplicaPartitionState(topic, r.int32(), r.int32(), r.int8() != 0)

    states, _ = _read_topics(r, False, partition, 10)
    r.skip_tagged_fields()
    return StopReplicaRequest(controller_id, controller_epoch, broker_epoch, tuple(states))


def _write_update_metadata(w: Writer, req: UpdateMetadataRequest) -> None:
    w.int32(req.controller_id)
    w.int32(req.controller_epoch)
    w.int64(req.broker_epoch)

    def partition(w: Writer, s: UpdateMetadataPartitionState) -> None:
        w.int32(s.partition)
        w.int32(s.controller_epoch)
        w.int32(s.leader)
        w.int32(s.leader_epoch)
        _write_ints(w, s.isr)
        w.int32(s.zk_version)
        _write_ints(w, s.replicas)
        _write_ints(w, s.offline_replicas)

    _write_topics(w, req.partition_states, lambda s: s.topic, req.topic_ids, partition)
    w.array_length(len(req.live_brokers), True)
    for b in req.live_brokers:
        w.int32(b.id)
        w.array_length(len(b.endpoints), True)
        for ep in b.endpoints:
            w.int32(ep.port)
            w.string(ep.host, True)
            w.string(ep.listener, True)
            w.int16(ep.security_protocol)
            w.empty_tagged_fields()
        w.nullable_string(b.rack, True)
        w.empty_tagged_fields()
    w.empty_tagged_fields()


def _read_update_metadata(r: Reader) -> UpdateMetadataRequest:
    controller_id = r.int32()
    controller_epoch = r.int32()
    broker_epoch = r.int64()

    def partition(r: Reader, topic: str) -> UpdateMetadataPartitionState:
        return UpdateMetadataPartitionState(
            topic=topic,
            partition=r.int32(),
            controller_epoch=r.int32(),
            leader=r.int32(),
            leader_epoch=r.int32(),
            isr=_ints(r),
            zk_version=r.int32(),
            replicas=_ints(r),
            offline_replicas=_ints(r),
        )

    states, topic_ids = _read_topics(r, True, partition, 20)

    def endpoint(r: Reader) -> UpdateMetadataEndpoint:
        port = r.int32()
        host = _string(r)
        listener = _string(r)
        ep = UpdateMetadataEndpoint(port, host, listener, r.int16())
        r.skip_tagged_fields()
        return ep

    def broker(r: Reader) -> UpdateMetadataBroker:
        broker_id = r.int32()
        endpoints = _array(r, endpoint, 9)
        b = UpdateMetadataBroker(broker_id, tuple(endpoints), r.nullable_string(True))
        r.skip_tagged_fields()
        return b

    brokers = _array(r, broker, 7)
    r.skip_tagged_fields()
    return UpdateMetadataRequest(
        controller_id, controller_epoch, broker_epoch, tuple(states), tuple(brokers), topic_ids
    )


def request_topic_ids(request: ControlRequest) -> Mapping[str, UUID]:
    """The topic ids a request carries: its response names topics by them."""
    if isinstance(request, LeaderAndIsrRequest | UpdateMetadataRequest):
        return request.topic_ids
    return {}


# -- responses ------------------------------------------------------------------------


def encode_response(response: ControlResponse, topic_ids: Mapping[str, UUID]) -> bytes:
    """The body of a control response. LeaderAndIsr v5 names topics by id:
    `topic_ids` are the request's."""
    w = Writer()
    w.int16(response.error_code)
    if isinstance(response, LeaderAndIsrResponse):
        topics = _by_topic(response.partition_errors, lambda e: e.topic)
        w.array_length(len(topics), True)
        for topic, errors in topics.items():
            w.uuid(topic_ids.get(topic, ZERO_UUID))
            w.array_length(len(errors), True)
            for e in errors:
                w.int32(e.partition)
                w.int16(e.error_code)
                w.empty_tagged_fields()
            w.empty_tagged_fields()
    elif isinstance(response, StopReplicaResponse):
        w.array_length(len(response.partition_errors), True)
        for e in response.partition_errors:
            w.string(e.topic, True)
            w.int32(e.partition)
            w.int16(e.error_code)
            w.empty_tagged_fields()
    w.empty_tagged_fields()
    return bytes(w.buf)


def decode_response(
    api_key: int, version: int, r: Reader, topic_ids: Mapping[str, UUID]
) -> ControlResponse:
    _check_api_version(api_key, version)
    error_code = r.int16()
    if api_key == LEADER_AND_ISR:
        names = {v: k for k, v in topic_ids.items()}
        errors: list[PartitionError] = []

        def topic(r: Reader) -> None:
            topic_id = r.uuid()
            name = names.get(topic_id, str(topic_id))

            def partition(r: Reader) -> None:
                errors.append(PartitionError(name, r.int32(), r.int16()))
                r.skip_tagged_fields()

            _array(r, partition, 7)
            r.skip_tagged_fields()

        _array(r, topic, 18)
        r.skip_tagged_fields()
        return LeaderAndIsrResponse(error_code, tuple(errors))
    if api_key == STOP_REPLICA:

        def stop_error(r: Reader) -> PartitionError:
            e = PartitionError(_string(r), r.int32(), r.int16())
            r.skip_tagged_fields()
            return e

        stop_errors = _array(r, stop_error, 8)
        r.skip_tagged_fields()
        return StopReplicaResponse(error_code, tuple(stop_errors))
    r.skip_tagged_fields()
    return UpdateMetadataResponse(error_code)
