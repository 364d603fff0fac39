"""The transaction APIs (KIP-98, KIP-447, KIP-664): InitProducerId (22),
AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27,
broker to broker), TxnOffsetCommit (28), DescribeProducers (61),
DescribeTransactions (65), ListTransactions (66).

The transaction coordinator (coordinator/transaction/) decides; these handlers
translate the wire. Clients older than KIP-588 do not know PRODUCER_FENCED: they are
told INVALID_PRODUCER_EPOCH instead, as Kafka tells them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from moldau.coordinator.group_coordinator import OffsetCommitEntry
from moldau.coordinator.transaction.marker_channel import TxnMarkerEntry
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ClusterAuthorizationFailedError, ErrorCode
from moldau.security.acl import AclOperation as Op
from moldau.security.acl import ResourceType as RT
from moldau.server import authorization as auth
from moldau.server.handlers.offsets import commit_results
from moldau.server.request import RequestContext, Response
from moldau.server.txn_markers import write_txn_markers
from moldau.storage.partition_name import TopicPartition

if TYPE_CHECKING:
    from moldau.server.broker import Broker

# The first version of each API whose clients know PRODUCER_FENCED (KIP-588).
_FENCED_SINCE = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
}


def _for_client(api: ApiKey, version: int, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.producer_fenced and version < _FENCED_SINCE[api]:
        return ErrorCode.invalid_producer_epoch
    return error


async def handle_init_producer_id(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    version = ctx.version
    timeout_ms = int(req.transaction_timeout.total_seconds() * 1000)
    authorizer = broker.authorizer
    if req.transactional_id:
        auth.require_transactional_id(authorizer, ctx, Op.WRITE, req.transactional_id)
    elif not auth.may_write_idempotently(authorizer, ctx):
        raise ClusterAuthorizationFailedError("an idempotent producer needs IDEMPOTENT_WRITE")
    result = await broker.txn_coordinator.handle_init_producer_id(
        req.transactional_id or None,
        timeout_ms,
        getattr(req, "producer_id", -1),  # v3+ (KIP-360)
        getattr(req, "producer_epoch", -1),
    )
    error = _for_client(ApiKey.INIT_PRODUCER_ID, version, result.error)
    ok = error == ErrorCode.none
    return build_response(
        ApiKey.INIT_PRODUCER_ID,
        version,
        {
            "throttle_time": 0,
            "error_code": error,
            "producer_id": result.producer_id if ok else -1,
            "producer_epoch": result.producer_epoch if ok else -1,
        },
    )


def _by_topic(results: dict[TopicPartition, ErrorCode], error_key: str) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, code in results.items():
        topics.setdefault(tp.topic, []).append({"partition_index": tp.partition, error_key: code})
    return [{"name": name, "results_by_partition": parts} for name, parts in topics.items()]


async def _add_partitions(
    broker: Broker,
    ctx: RequestContext,
    version: int,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Iterable[Any],
    verify_only: bool = False,
) -> dict[TopicPartition, ErrorCode]:
    partitions = [TopicPartition(t.name, p) for t in topics for p in t.partitions]
    authorizer = broker.authorizer
    if authorizer is not None and version < 4:
        # Kafka's per-partition answers: the transactional id refused fails them all;
        # a topic refused fails its partitions, the others are not attempted.
        if not auth.allows(authorizer, ctx, Op.WRITE, RT.TRANSACTIONAL_ID, transactional_id):
            return dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
        writable = auth.filter_authorized(
            authorizer, ctx, Op.WRITE, RT.TOPIC, (tp.topic for tp in partitions)
        )
        if any(tp.topic not in writable for tp in partitions):
            return {
                tp: ErrorCode.operation_not_attempted
                if tp.topic in writable
                else ErrorCode.topic_authorization_failed
                for tp in partitions
            }
    # Partitions of unknown topics fail the request; the others are not attempted (Kafka).
    unknown = [tp for tp in partitions if broker.metadata_cache.partition_state(tp) is None]
    if unknown:
        return {
            tp: ErrorCode.unknown_topic_or_partition
            if tp in unknown
            else ErrorCode.operation_not_attempted
            for tp in partitions
        }
    results = await broker.txn_coordinator.handle_add_partitions(
        transactional_id, producer_id, producer_epoch, partitions, verify_only
    )
    return {
        tp: _for_client(ApiKey.ADD_PARTITIONS_TO_TXN, version, code) for tp, code in results.items()
    }


async def handle_add_partitions_to_txn(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    version = ctx.version
    if version < 4:
        results = await _add_partitions(
            broker,
            ctx,
            version,
            req.v3_and_below_transactional_id,
            req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch,
            req.v3_and_below_topics,
        )
        return build_response(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            version,
            {
                "throttle_time": 0,
                "results_by_topic_v3_and_below": _by_topic(results, "partition_error_code"),
            },
        )
    # v4+: a batch of transactions, as partition leaders send it to verify (KIP-890).
    auth.require_cluster(broker.authorizer, ctx, Op.CLUSTER_ACTION)
    answers = []
    for txn in req.transactions:
        results = await _add_partitions(
            broker,
            ctx,
            version,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            txn.verify_only,
        )
        answers.append(
            {
                "transactional_id": txn.transactional_id,
                "topic_results": _by_topic(results, "partition_error_code"),
            }
        )
    return build_response(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        version,
        {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": answers},
    )


async def handle_add_offsets_to_txn(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    auth.require_transactional_id(broker.authorizer, ctx, Op.WRITE, req.transactional_id)
    auth.require_group(broker.authorizer, ctx, Op.READ, req.group_id)
    error = await broker.txn_coordinator.handle_add_offsets(
        req.transactional_id, req.producer_id, req.producer_epoch, req.group_id
    )
    return build_response(
        ApiKey.ADD_OFFSETS_TO_TXN,
        ctx.version,
        {
            "throttle_time": 0,
            "error_code": _for_client(ApiKey.ADD_OFFSETS_TO_TXN, ctx.version, error),
        },
    )


async def handle_end_txn(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    auth.require_transactional_id(broker.authorizer, ctx, Op.WRITE, req.transactional_id)
    error = await broker.txn_coordinator.handle_end_txn(
        req.transactional_id, req.producer_id, req.producer_epoch, req.committed
    )
    return build_response(
        ApiKey.END_TXN,
        ctx.version,
        {"throttle_time": 0, "error_code": _for_client(ApiKey.END_TXN, ctx.version, error)},
    )


async def handle_txn_offset_commit(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    authorizer = broker.authorizer
    refused_all: ErrorCode | None = None
    if not auth.allows(authorizer, ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id):
        refused_all = ErrorCode.transactional_id_authorization_failed
    elif not auth.allows(authorizer, ctx, Op.READ, RT.GROUP, req.group_id):
        refused_all = ErrorCode.group_authorization_failed
    readable = auth.filter_authorized(
        authorizer, ctx, Op.READ, RT.TOPIC, (t.name for t in req.topics)
    )
    offsets: dict[TopicPartition, OffsetCommitEntry] = {}
    results: dict[TopicPartition, ErrorCode] = {}
    for t in req.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if refused_all is not None:
                results[tp] = refused_all
                continue
            if t.name not in readable:
                results[tp] = ErrorCode.topic_authorization_failed
                continue
            if not broker.metadata_cache.contains_topic(t.name):
                results[tp] = ErrorCode.unknown_topic_or_partition
                continue
            offsets[tp] = OffsetCommitEntry(
                p.committed_offset,
                getattr(p, "committed_leader_epoch", -1),  # v2+
                p.committed_metadata,
            )
    if offsets:
        results.update(
            await broker.group_coordinator.commit_transactional_offsets(
                req.group_id,
                req.producer_id,
                req.producer_epoch,
                offsets,
                getattr(req, "generation_id", -1),  # v3+ (KIP-447)
                getattr(req, "member_id", ""),
                getattr(req, "group_instance_id", None),
            )
        )
    return build_response(
        ApiKey.TXN_OFFSET_COMMIT,
        ctx.version,
        {"throttle_time": 0, "topics": commit_results(req.topics, results)},
    )


async def handle_write_txn_markers(broker: Broker, ctx: RequestContext) -> Response:
    """From a transaction coordinator: markers for the partitions this broker leads."""
    req = ctx.body()
    markers = [
        TxnMarkerEntry(
            m.producer_id,
            m.producer_epoch,
            m.coordinator_epoch,
            m.transaction_result,
            tuple(TopicPartition(t.name, p) for t in m.topics for p in t.partition_indexes),
        )
        for m in req.markers
    ]
    if auth.may_write_txn_markers(broker.authorizer, ctx):
        written = await write_txn_markers(broker, markers)
    else:
        # Only brokers write markers; refused per partition (no top-level error field).
        refused = ErrorCode.cluster_authorization_failed
        written = [dict.fromkeys(m.partitions, refused) for m in markers]
    answers = []
    for marker, results in zip(markers, written, strict=True):
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp in marker.partitions:
            topics.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "error_code": results[tp]}
            )
        answers.append(
            {
                "producer_id": marker.producer_id,
                "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
            }
        )
    return build_response(ApiKey.WRITE_TXN_MARKERS, ctx.version, {"markers": answers})


async def handle_describe_producers(broker: Broker, ctx: RequestContext) -> Response:
    """The producers a replica of a partition knows, leader or follower, as Kafka
    answers (kafka-transactions describe-producers --broker-id, find-hanging)."""
    req = ctx.body()
    readable = auth.filter_authorized(
        broker.authorizer, ctx, Op.READ, RT.TOPIC, (t.name for t in req.topics)
    )
    topics = []
    for t in req.topics:
        partitions = []
        for index in t.partition_indexes:
            tp = TopicPartition(t.name, index)
            entry: dict[str, Any] = {
                "partition_index": index,
                "error_code": ErrorCode.none,
                "error_message": None,
                "active_producers": [],
            }
            partition = broker.replica_manager.get_partition(tp)
            if t.name not in readable:
                entry["error_code"] = ErrorCode.topic_authorization_failed
            elif partition is None or partition.log is None:
                known = broker.metadata_cache.partition_state(tp) is not None
                entry["error_code"] = (
                    ErrorCode.not_leader_or_follower
                    if known
                    else ErrorCode.unknown_topic_or_partition
                )
            else:
                entry["active_producers"] = [
                    {
                        "producer_id": p.producer_id,
                        "producer_epoch": p.epoch,
                        "last_sequence": p.last_seq,
                        "last_timestamp": p.last_timestamp,
                        "coordinator_epoch": p.coordinator_epoch,
                        "current_txn_start_offset": p.current_txn_first_offset,
                    }
                    for p in partition.log.producer_state.producers.values()
                ]
            partitions.append(entry)
        topics.append({"name": t.name, "partitions": partitions})
    return build_response(
        ApiKey.DESCRIBE_PRODUCERS, ctx.version, {"throttle_time": 0, "topics": topics}
    )


async def handle_describe_transactions(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    states = []
    ids = list(req.transactional_ids)
    allowed = auth.filter_authorized(broker.authorizer, ctx, Op.DESCRIBE, RT.TRANSACTIONAL_ID, ids)
    for t in ids:
        if t not in allowed:
            states.append(
                {
                    "error_code": ErrorCode.transactional_id_authorization_failed,
                    "transactional_id": t,
                    "transaction_state": "",
                    "transaction_timeout": 0,
                    "transaction_start_time": -1,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": [],
                }
            )
    for d in broker.txn_coordinator.describe_transactions([t for t in ids if t in allowed]):
        states.append(
            {
                "error_code": d.error,
                "transactional_id": d.transactional_id,
                "transaction_state": d.state,
                "transaction_timeout": d.transaction_timeout_ms,
                "transaction_start_time": d.transaction_start_time_ms,
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                # Only the topics the principal may describe (Kafka's KafkaApis).
                "topics": [
                    {"topic": n, "partitions": ps}
                    for n, ps in d.topics.items()
                    if auth.allows(broker.authorizer, ctx, Op.DESCRIBE, RT.TOPIC, n)
                ],
            }
        )
    return build_response(
        ApiKey.DESCRIBE_TRANSACTIONS,
        ctx.version,
        {"throttle_time": 0, "transaction_states": states},
    )


async def handle_list_transactions(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    error, listed, unknown = broker.txn_coordinator.list_transactions(
        set(req.state_filters),
        set(req.producer_id_filters),
        getattr(req, "duration_filter", -1),  # v1+
    )
    allowed = auth.filter_authorized(
        broker.authorizer, ctx, Op.DESCRIBE, RT.TRANSACTIONAL_ID,
        (t.transactional_id for t in listed),
    )  # fmt: skip
    listed = [t for t in listed if t.transactional_id in allowed]
    return build_response(
        ApiKey.LIST_TRANSACTIONS,
        ctx.version,
        {
            "throttle_time": 0,
            "error_code": error,
            "unknown_state_filters": unknown,
            "transaction_states": [
                {
                    "transactional_id": t.transactional_id,
                    "producer_id": t.producer_id,
                    "transaction_state": t.state,
                }
                for t in listed
            ],
        },
    )
