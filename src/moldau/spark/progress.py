"""A streaming query's progress as a consumer group's committed offsets, so that
`moldau groups describe` (or kafka-consumer-groups) shows a pipeline's lag like
any consumer's. The group has no members: the offsets are committed as a
"simple" consumer commits them (generation -1), after Spark has committed the
micro-batch to its checkpoint, which stays the source of truth."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from moldau.spark.offsets import from_json


def commit_progress(
    client_config: Mapping[str, str], group_id: str, end: Mapping[str, Any]
) -> None:
    offsets = from_json(end)
    if not offsets:
        return
    consumer = Consumer({**client_config, "group.id": group_id, "enable.auto.commit": "false"})
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
            asynchronous=False,
        )
    finally:
        consumer.close()
