"""Partition reassignments for the console: those in progress
(ListPartitionReassignments, through `moldau reassign-partitions`' Cluster), how far
each adding replica has caught up, and cancelling one.

Progress is measured in offsets, over ListOffsets: the leader's log start and high
watermark (a consumer's request), and each adding replica's own offset, asked of
the replica's broker as Kafka's debugging replica (replica id -2), which a follower
answers. A replica that has no log yet counts as nothing copied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moldau.cli.admin_call import CallError
from moldau.cli.common import BrokerWatch
from moldau.cli.get_offsets import LIST_OFFSETS_VERSION, list_offsets_answers, list_offsets_fields
from moldau.cli.leader_requests import Answer, Partition
from moldau.cli.reassign_partitions import Cluster
from moldau.protocol.apis import ApiKey

if TYPE_CHECKING:
    from moldau.ui.cluster import ClusterClient

EARLIEST, LATEST = -2, -1
DEBUGGING_REPLICA = -2


def catch_up_fraction(log_start: int, leader_end: int, replica_end: int | None) -> float:
    """How much of the leader's log an adding replica holds: the share of the
    offsets from the leader's log start to its high watermark that the replica has
    (0 while it has no log; 1 when the leader's log is empty, as nothing is left to
    copy)."""
    if leader_end <= log_start:
        return 1.0
    if replica_end is None:
        return 0.0
    return min(1.0, max(0.0, (replica_end - log_start) / (leader_end - log_start)))


@dataclass(frozen=True)
class Offsets:
    """What ListOffsets said: per (broker, partition), the offset asked for."""

    starts: Mapping[Partition, int]  # the leader's log start
    ends: Mapping[Partition, int]  # the leader's high watermark
    replicas: Mapping[tuple[int, Partition], int]  # an adding replica's own offset


def progress_rows(
    ongoing: Mapping[Partition, Any], leaders: Mapping[Partition, int], offsets: Offsets
) -> list[dict[str, Any]]:
    """A row per reassignment: its replicas, those being added and removed, the
    leader, and each adding replica's catch-up fraction; `fraction` is the least of
    them (the reassignment completes when the last one has caught up)."""
    rows = []
    for key in sorted(ongoing):
        r = ongoing[key]
        start, end = offsets.starts.get(key), offsets.ends.get(key)
        adding = []
        for broker in r.adding_replicas:
            offset = offsets.replicas.get((broker, key))
            fraction = (
                catch_up_fraction(start, end, offset)
                if start is not None and end is not None
                else 0.0
            )
            adding.append({"broker": broker, "offset": offset, "fraction": fraction})
        rows.append(
            {
                "topic": key[0],
                "partition": key[1],
                "replicas": list(r.replicas),
                "adding": list(r.adding_replicas),
                "removing": list(r.removing_replicas),
                "leader": leaders.get(key, -1),
                "logStartOffset": start,
                "highWatermark": end,
                "progress": adding,
                "fraction": min((a["fraction"] for a in adding), default=1.0),
            }
        )
    return rows


def reassign_cluster(cluster: ClusterClient) -> Cluster:
    """`moldau reassign-partitions`' view of the console's cluster (a ClusterClient)."""
    return Cluster(cluster.admin, BrokerWatch(cluster.bootstrap), cluster.config)


async def reassignments(cluster: ClusterClient) -> list[dict[str, Any]]:
    """The reassignments in progress, each with its progress."""
    found = await cluster.run(reassign_cluster(cluster).ongoing)
    ongoing: dict[Partition, Any] = {(tp.topic, tp.partition): r for tp, r in found.items()}
    if not ongoing:
        return []
    md = await cluster.metadata()
    addresses = {int(b.id): (str(b.host), int(b.port)) for b in md.brokers.values()}
    leaders: dict[Partition, int] = {}
    for t, p in ongoing:
        topic = md.topics.get(t)
        partition = topic.partitions.get(p) if topic is not None else None
        leaders[(t, p)] = int(partition.leader) if partition else -1
    by_leader: dict[int, list[Partition]] = {}
    for key, leader in leaders.items():
        by_leader.setdefault(leader, []).append(key)
    by_replica: dict[int, list[Partition]] = {}
    for key, r in ongoing.items():
        for broker in r.adding_replicas:
            by_replica.setdefault(broker, []).append(key)

    async def ask(broker: int, timestamp: int, parts: Sequence[Partition], replica: int) -> Any:
        address = addresses.get(broker)
        if address is None:
            return {}
        fields = list_offsets_fields(timestamp, parts, replica)
        try:
            response = await cluster.call(
                address, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, fields
            )
        except CallError:  # a broker down is a replica not caught up, not a failed page
            return {}
        return list_offsets_answers(response)

    starts: dict[Partition, int] = {}
    ends: dict[Partition, int] = {}
    for leader, parts in by_leader.items():
        starts.update(_offsets(await ask(leader, EARLIEST, parts, -1)))
        ends.update(_offsets(await ask(leader, LATEST, parts, -1)))
    replicas: dict[tuple[int, Partition], int] = {}
    for broker, parts in by_replica.items():
        held = _offsets(await ask(broker, LATEST, parts, DEBUGGING_REPLICA))
        replicas.update({(broker, key): offset for key, offset in held.items()})
    return progress_rows(ongoing, leaders, Offsets(starts, ends, replicas))


async def cancel(cluster: ClusterClient, partitions: Iterable[Partition]) -> dict[str, str]:
    """Cancel the reassignments of `partitions` (AlterPartitionReassignments with no
    replicas); the error of each one that could not be cancelled."""
    errors = await cluster.run(reassign_cluster(cluster).cancel, list(partitions))
    return {str(tp): message for tp, message in errors.items()}


def _offsets(answers: Mapping[Partition, Answer]) -> dict[Partition, int]:
    return {key: a.value for key, a in answers.items() if a.error is None and a.value >= 0}
