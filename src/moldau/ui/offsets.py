"""Partitions' offsets (ListOffsets through the AdminClient) and sizes on their
leaders (DescribeLogDirs to each broker), as the console's pages need them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from moldau.cli.log_dirs import DESCRIBE_LOG_DIRS_VERSION
from moldau.protocol.apis import ApiKey

if TYPE_CHECKING:
    from moldau.ui.cluster import ClusterClient

Partition = tuple[str, int]

EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]


def at_time(timestamp_ms: int) -> OffsetSpec:
    spec: OffsetSpec = OffsetSpec.for_timestamp(timestamp_ms)
    return spec


async def list_offsets(
    cluster: ClusterClient,
    partitions: Iterable[Partition],
    spec: OffsetSpec,
    committed: bool = False,
) -> dict[Partition, int]:
    """Each partition's offset for `spec` (the high watermark for LATEST, or the
    last stable offset with `committed`); a partition that failed is left out."""
    wanted = {TopicPartition(t, p): spec for t, p in partitions}
    if not wanted:
        return {}
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = cluster.admin.list_offsets(wanted, isolation_level=level, request_timeout=5)
    out: dict[Partition, int] = {}

    async def one(tp: Any, future: Any) -> None:
        with contextlib.suppress(Exception):
            out[(tp.topic, tp.partition)] = int((await cluster.wait(future)).offset)

    await asyncio.gather(*(one(tp, f) for tp, f in futures.items()))
    return out


async def leader_sizes(
    cluster: ClusterClient,
    brokers: Mapping[int, tuple[str, int]],
    leaders: Mapping[Partition, int],
    topics: Iterable[str] | None = None,
) -> dict[Partition, int]:
    """The bytes each partition holds on its leader (in every log dir there):
    DescribeLogDirs to each of `brokers` (id -> address), of `topics` or all."""
    fields: dict[str, Any] = {
        "topics": None
        if topics is None
        else [
            {"topic": t, "partitions": sorted(p for (tt, p) in leaders if tt == t)} for t in topics
        ]
    }
    ids = sorted(brokers)
    answers = await asyncio.gather(
        *(
            cluster.call(brokers[i], ApiKey.DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, fields)
            for i in ids
        ),
        return_exceptions=True,
    )
    sizes: dict[Partition, int] = {}
    for broker_id, answer in zip(ids, answers, strict=True):
        if isinstance(answer, BaseException):
            continue
        for result in answer.results:
            for t in result.topics:
                for p in t.partitions:
                    key = (str(t.name), int(p.partition_index))
                    if leaders.get(key) == broker_id and not p.is_future_key:
                        sizes[key] = sizes.get(key, 0) + int(p.partition_size)
    return sizes
