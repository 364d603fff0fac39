"""How many bytes each partition's log holds on its leader, and for which
offsets, for the driver's byte bound on a micro-batch (`maxBytesPerTrigger`):
DescribeLogDirs, Kafka's API for what a broker's log directories hold
(kafka-log-dirs.sh asks it), and ListOffsets, both sent to each leader for the
partitions it leads, so that size and offsets are one broker's view of one
moment. confluent-kafka's AdminClient does not offer DescribeLogDirs, so this
speaks both over moldau.spark.fetch_client's blocking connection: PLAINTEXT only,
as that client.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode
from moldau.spark.fetch_client import (
    Address,
    BrokerError,
    Connection,
    UnsupportedBroker,
    open_connection,
)
from moldau.spark.offsets import LogExtent
from moldau.spark.options import TopicPartitionKey

#: DescribeLogDirs v1 is the lowest Kafka 4 serves; v4 the highest known here.
_VERSIONS = {
    ApiKey.METADATA: (1, 12),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.LIST_OFFSETS: (1, 7),
}
_EARLIEST, _LATEST = -2, -1


class LogSizesUnavailable(Exception):
    """No broker told the sizes: unreachable, refusing, or not speaking DescribeLogDirs."""


def _connect(address: Address, client_id: str, timeout_s: float) -> Connection:
    return open_connection(address, client_id, timeout_s, _VERSIONS)


def _leaders(
    bootstrap: Sequence[Address], topics: list[str], client_id: str, timeout_s: float
) -> dict[TopicPartitionKey, Address]:
    errors = []
    for address in bootstrap:
        try:
            conn = _connect(address, client_id, timeout_s)
        except (BrokerError, UnsupportedBroker) as e:
            errors.append(str(e))
            continue
        try:
            answer = conn.call(
                ApiKey.METADATA,
                conn.versions[ApiKey.METADATA],
                {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False},
            )
        except BrokerError as e:
            errors.append(str(e))
            continue
        finally:
            conn.close()
        brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        return {
            (t.name, p.partition_index): brokers[p.leader_id]
            for t in answer.topics
            if t.error_code == 0
            for p in t.partitions
            if p.leader_id in brokers
        }
    raise LogSizesUnavailable("no bootstrap server answered Metadata: " + "; ".join(errors))


def _sizes(conn: Connection, partitions: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    answer: Any = conn.call(
        ApiKey.DESCRIBE_LOG_DIRS,
        conn.versions[ApiKey.DESCRIBE_LOG_DIRS],
        {"topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]},
    )
    error = int(getattr(answer, "error_code", 0))  # v3+; an authorizer's refusal
    if error != 0:
        raise LogSizesUnavailable(
            f"{conn.address[0]}:{conn.address[1]} answered DescribeLogDirs with "
            f"{ErrorCode(error).name}"
        )
    wanted = set(partitions)
    out: dict[TopicPartitionKey, int] = {}
    for d in answer.results:
        if d.error_code != 0:
            continue  # an offline directory: its partitions are led elsewhere by now
        for t in d.topics:
            for p in t.partitions:
                tp = (t.name, int(p.partition_index))
                # A future replica is a copy being moved between directories.
                if tp in wanted and not p.is_future_key:
                    out[tp] = int(p.partition_size)
    return out


def _offsets(
    conn: Connection, partitions: list[TopicPartitionKey], timestamp: int
) -> dict[TopicPartitionKey, int]:
    """The broker's earliest or latest offsets of the partitions it leads (no
    leader epoch: whichever epoch it is at)."""
    topics: dict[str, list[dict[str, int]]] = {}
    for t, p in partitions:
        entry = {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
        topics.setdefault(t, []).append(entry)
    answer: Any = conn.call(
        ApiKey.LIST_OFFSETS,
        conn.versions[ApiKey.LIST_OFFSETS],
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        },
    )
    return {
        (t.name, int(p.partition_index)): int(p.offset)
        for t in answer.topics
        for p in t.partitions
        if p.error_code == 0
    }


def _extents_on(
    address: Address, partitions: list[TopicPartitionKey], client_id: str, timeout_s: float
) -> dict[TopicPartitionKey, LogExtent]:
    conn = _connect(address, client_id, timeout_s)
    try:
        sizes = _sizes(conn, partitions)
        start = _offsets(conn, partitions, _EARLIEST)
        end = _offsets(conn, partitions, _LATEST)
    finally:
        conn.close()
    return {
        tp: LogExtent(size, start[tp], end[tp])
        for tp, size in sizes.items()
        if tp in start and tp in end
    }


def log_extents(
    bootstrap: Sequence[Address],
    partitions: Iterable[TopicPartitionKey],
    *,
    client_id: str = "moldau-spark",
    timeout_s: float = 30.0,
) -> dict[TopicPartitionKey, LogExtent]:
    """Each partition's size in bytes and offsets on its leader; a partition with
    no leader just now, or that its leader does not report, is left out.
    LogSizesUnavailable when the brokers cannot tell."""
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    leaders = _leaders(bootstrap, sorted({t for t, _ in wanted}), client_id, timeout_s)
    by_leader: dict[Address, list[TopicPartitionKey]] = {}
    for tp in wanted:
        if tp in leaders:
            by_leader.setdefault(leaders[tp], []).append(tp)
    extents: dict[TopicPartitionKey, LogExtent] = {}
    for address, tps in sorted(by_leader.items()):
        try:
            extents.update(_extents_on(address, tps, client_id, timeout_s))
        except (BrokerError, UnsupportedBroker) as e:
            raise LogSizesUnavailable(str(e)) from e
    return extents
