"""AlterPartitionReassignments (45, v0-v1) and ListPartitionReassignments (46, v0):
KIP-455's reassignment APIs, answered by the active controller (any other broker
answers NOT_CONTROLLER and the client asks the controller)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.controller.controller import NotControllerError
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ErrorCode
from moldau.server.request import RequestContext
from moldau.storage.partition_name import TopicPartition

if TYPE_CHECKING:
    from moldau.server.broker import Broker

Outcome = tuple[ErrorCode, str | None]


def _alter_response(
    req: Any, version: int, error: ErrorCode, results: dict[TopicPartition, Outcome]
) -> Any:
    responses = [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": results[TopicPartition(t.name, p.partition_index)][0],
                    "error_message": results[TopicPartition(t.name, p.partition_index)][1],
                }
                for p in t.partitions
            ],
        }
        for t in req.topics
    ]
    return build_response(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        version,
        {
            "throttle_time": 0,
            "allow_replication_factor_change": getattr(
                req, "allow_replication_factor_change", True
            ),
            "error_code": error,
            "error_message": None,
            "responses": responses,
        },
    )


async def handle_alter_partition_reassignments(broker: Broker, ctx: RequestContext) -> Any:
    req = ctx.body()
    targets: dict[TopicPartition, tuple[int, ...] | None] = {}
    results: dict[TopicPartition, Outcome] = {}
    allow_rf_change = bool(getattr(req, "allow_replication_factor_change", True))
    for t in req.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if tp in targets or tp in results:
                results[tp] = (ErrorCode.invalid_request, "Duplicate partition in the request.")
                targets.pop(tp, None)
                continue
            targets[tp] = None if p.replicas is None else tuple(int(r) for r in p.replicas)
    try:
        if targets:
            results.update(
                await broker.controller.alter_partition_reassignments(targets, allow_rf_change)
            )
    except NotControllerError:
        not_controller: Outcome = (ErrorCode.not_controller, None)
        all_results = {tp: not_controller for tp in [*targets, *results]}
        return _alter_response(req, ctx.version, ErrorCode.not_controller, all_results)
    return _alter_response(req, ctx.version, ErrorCode.none, results)


async def handle_list_partition_reassignments(broker: Broker, ctx: RequestContext) -> Any:
    req = ctx.body()
    wanted = (
        None
        if req.topics is None
        else [TopicPartition(t.name, int(p)) for t in req.topics for p in t.partition_indexes]
    )
    try:
        ongoing = broker.controller.list_partition_reassignments(wanted)
        error = ErrorCode.none
    except NotControllerError:
        ongoing, error = {}, ErrorCode.not_controller
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, a in ongoing.items():
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "replicas": a.replicas,
                "adding_replicas": a.adding,
                "removing_replicas": a.removing,
            }
        )
    return build_response(
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        ctx.version,
        {
            "throttle_time": 0,
            "error_code": error,
            "error_message": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        },
    )
