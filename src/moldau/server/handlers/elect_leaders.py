"""ElectLeaders (43): a preferred-replica or unclean leader election on demand, as
kafka-leader-election.sh asks for it. Answered by the active controller; any other
broker answers NOT_CONTROLLER and the client asks the controller."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.controller.controller import NotControllerError
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ErrorCode
from moldau.security.acl import AclOperation
from moldau.server import authorization as auth
from moldau.server.request import RequestContext
from moldau.storage.partition_name import TopicPartition

if TYPE_CHECKING:
    from moldau.server.broker import Broker

PREFERRED, UNCLEAN = 0, 1

_MESSAGES = {
    ErrorCode.election_not_needed: "Leader election not needed for topic partition.",
    ErrorCode.preferred_leader_not_available: (
        "Failed to elect leader for partition: the preferred replica is not live or not in the ISR."
    ),
    ErrorCode.eligible_leaders_not_available: (
        "Failed to elect leader for partition: no live replica to elect."
    ),
    ErrorCode.unknown_topic_or_partition: "The partition does not exist.",
}


def _response(version: int, error: ErrorCode, results: dict[TopicPartition, ErrorCode]) -> Any:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, code in sorted(results.items()):
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_id": tp.partition,
                "error_code": code,
                "error_message": None if code == ErrorCode.none else _MESSAGES.get(code),
            }
        )
    return build_response(
        ApiKey.ELECT_LEADERS,
        version,
        {
            "throttle_time": 0,
            "error_code": error,
            "replica_election_results": [
                {"topic": topic, "partition_result": parts} for topic, parts in by_topic.items()
            ],
        },
    )


async def handle_elect_leaders(broker: Broker, ctx: RequestContext) -> Any:
    req = ctx.body()
    election_type = int(getattr(req, "election_type", PREFERRED))  # v0 is preferred only
    partitions = (
        None
        if req.topic_partitions is None
        else tuple(
            TopicPartition(t.topic, int(p)) for t in req.topic_partitions for p in t.partitions
        )
    )
    if not auth.allows_cluster(broker.authorizer, ctx, AclOperation.ALTER):
        # Every partition refused (v0 has no top-level error field).
        refused = ErrorCode.cluster_authorization_failed
        return _response(ctx.version, refused, dict.fromkeys(partitions or (), refused))
    if election_type not in (PREFERRED, UNCLEAN):
        results = dict.fromkeys(partitions or (), ErrorCode.invalid_request)
        return _response(ctx.version, ErrorCode.invalid_request, results)
    try:
        results = await broker.controller.elect_leaders(election_type == UNCLEAN, partitions)
    except NotControllerError:
        return _response(
            ctx.version,
            ErrorCode.not_controller,
            dict.fromkeys(partitions or (), ErrorCode.not_controller),
        )
    if partitions is None:
        # An election of every partition names only those it elected or failed to
        # elect, as Kafka's: the rest lead as they should.
        results = {tp: e for tp, e in results.items() if e != ErrorCode.election_not_needed}
    return _response(ctx.version, ErrorCode.none, results)
