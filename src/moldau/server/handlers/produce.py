"""Produce (0): the hot path. The request is decoded by hand (records stay
memoryviews into the request), each partition's single batch is validated from its
header and appended, and the response is encoded by hand. The message sets of
Produce v0-v2 (magic 0-1) are first converted to one v2 batch, as Kafka 3.x did."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from moldau.controller.admin import INTERNAL_TOPICS
from moldau.protocol.errors import ErrorCode, KafkaError
from moldau.protocol.legacy_records import up_convert
from moldau.protocol.produce import (
    ProducePartitionResponse,
    decode_produce_request,
    encode_produce_response,
)
from moldau.protocol.records import (
    ATTR_COMPRESSION_MASK,
    LOG_OVERHEAD,
    MAGIC_V2,
    OFFSET_ATTRIBUTES,
    OFFSET_MAGIC,
    Compression,
    offset_and_length,
)
from moldau.protocol.wire import DecodeError
from moldau.security.acl import AclOperation as Op
from moldau.security.acl import ResourceType as RT
from moldau.server import authorization as auth
from moldau.server.network import CloseConnection
from moldau.server.request import Deferred, RawBody, RequestContext, Response
from moldau.storage.partition_name import TopicPartition
from moldau.storage.producer_state import VerificationGuard

if TYPE_CHECKING:
    from moldau.server.broker import Broker


def _single_batch_error(records: memoryview) -> tuple[ErrorCode, str] | None:
    """Produce v3+ must carry exactly one v2 batch per partition (Kafka's
    ProduceRequest.validateRecords)."""
    if len(records) < LOG_OVERHEAD + 5:
        return ErrorCode.corrupt_message, "record batch is truncated"
    _, length = offset_and_length(records, 0)
    if LOG_OVERHEAD + length != len(records):
        if LOG_OVERHEAD + length > len(records) or length < 0:
            return ErrorCode.corrupt_message, "record batch is truncated"
        return ErrorCode.invalid_record, "produce requests must contain exactly one record batch"
    if records[OFFSET_MAGIC] != MAGIC_V2:
        return ErrorCode.invalid_record, "only record batches of magic v2 are accepted"
    return None


def _codec(batch: memoryview) -> int:
    attributes = OFFSET_ATTRIBUTES + 1  # the low byte of the int16
    return batch[attributes] & ATTR_COMPRESSION_MASK if len(batch) > attributes else 0


def _batch_error(records: memoryview, version: int) -> tuple[ErrorCode, str] | None:
    """Why the partition's records cannot be appended, if they cannot."""
    failure = _single_batch_error(records)
    if failure is None and version < 7 and _codec(records) == Compression.ZSTD:
        return ErrorCode.unsupported_compression_type, "zstd needs Produce v7 or later (Kafka 2.1)"
    return failure


def _is_message_set(records: memoryview, version: int) -> bool:
    """Records of Produce v0-v2 in magic 0 or 1 (Kafka takes a v2 batch there too)."""
    return version < 3 and len(records) > OFFSET_MAGIC and records[OFFSET_MAGIC] < MAGIC_V2


async def _up_converted(records: memoryview) -> memoryview | tuple[ErrorCode, str]:
    """A message set as one v2 batch, converted on a worker thread (a few µs a
    record) so that the event loop goes on serving others meanwhile."""
    try:
        return memoryview(await asyncio.to_thread(up_convert, records))
    except KafkaError as e:
        return e.code, e.message


async def handle_produce(broker: Broker, ctx: RequestContext) -> Response:
    version = ctx.version
    try:
        req = decode_produce_request(ctx.frame, ctx.body_offset, version)
    except DecodeError as e:
        raise CloseConnection(f"malformed Produce request: {e}") from e
    entries: dict[TopicPartition, memoryview | None] = {}
    errors: dict[TopicPartition, ProducePartitionResponse] = {}
    order: list[tuple[str, list[TopicPartition]]] = []
    bad_acks = req.acks not in (-1, 0, 1)
    authorizer = broker.authorizer
    refused: set[str] = set()
    txn_refused = False  # every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if authorizer is not None:
        txn_refused = req.transactional_id is not None and not auth.allows(
            authorizer, ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id
        )
        names = [t.name for t in req.topics]
        refused = set(names) - auth.filter_authorized(authorizer, ctx, Op.WRITE, RT.TOPIC, names)
    for topic in req.topics:
        tps = []
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.index)
            tps.append(tp)
            failure: tuple[ErrorCode, str] | None = None
            if bad_acks:
                failure = (ErrorCode.invalid_required_acks, f"acks={req.acks} is not -1, 0 or 1")
            elif txn_refused:
                failure = (ErrorCode.transactional_id_authorization_failed, "")
            elif topic.name in refused:
                failure = (ErrorCode.topic_authorization_failed, "")
            elif topic.name in INTERNAL_TOPICS:
                failure = (
                    ErrorCode.invalid_topic_exception,
                    f"cannot append to internal topic {topic.name}",
                )
            elif p.records is None:
                failure = (ErrorCode.corrupt_message, "no records")
            else:
                batch = p.records
                if _is_message_set(batch, version):
                    converted = await _up_converted(batch)
                    if isinstance(converted, tuple):
                        failure = converted
                    else:
                        batch = converted
                if failure is None:
                    failure = _batch_error(batch, version)
            if failure is not None:
                errors[tp] = ProducePartitionResponse(p.index, failure[0], error_message=failure[1])
            else:
                entries[tp] = batch
        order.append((topic.name, tps))

    loop = asyncio.get_running_loop()
    future: asyncio.Future[dict[TopicPartition, ProducePartitionResponse]] = loop.create_future()

    def respond(results: dict[TopicPartition, ProducePartitionResponse]) -> None:
        if not future.done():
            future.set_result(results)

    def build(results: dict[TopicPartition, ProducePartitionResponse]) -> RawBody:
        results.update(errors)
        body = encode_produce_response(
            version,
            [(name, [results[tp] for tp in tps]) for name, tps in order],
            ctx.throttle_ms,
        )
        return RawBody([body])

    guards: dict[TopicPartition, VerificationGuard] | None = None  # None: not verified
    verifier = broker.txn_verifier
    if verifier is not None:
        guards = {}
        if req.transactional_id is not None and entries:
            failed, guards = await verifier.verify(req.transactional_id, entries, version)
            for tp, (code, message) in failed.items():
                entries.pop(tp, None)
                errors[tp] = ProducePartitionResponse(tp.partition, code, error_message=message)

    if not entries:
        future.set_result({})
    else:
        broker.replica_manager.append_records(
            req.acks, req.timeout_ms, entries, respond, verification_guards=guards
        )
    quotas = broker.quotas
    if quotas.produce.enabled or quotas.request.enabled:
        quotas.on_produce(ctx, len(ctx.frame), req.acks)  # sets ctx.throttle_ms
    if req.acks == 0:
        # No response; on an error Kafka closes the connection so the producer notices
        # (once the answers owed before it are sent: Connection._close_when_answered).
        results = future.result()
        if any(r.error_code for r in [*results.values(), *errors.values()]):
            raise CloseConnection("acks=0 produce failed")
        return None
    if not future.done():
        # The records are appended; only the ISR is awaited (acks=all).
        return Deferred(future, build)
    return build(future.result())
