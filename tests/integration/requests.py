"""kio requests built with defaults, for raw-protocol tests."""

from __future__ import annotations

import datetime
from typing import Any

from moldau.protocol.codec import build_entity, request_class


def request(api_key: int, version: int, **fields: Any) -> Any:
    """A kio request of this API version; nested dicts/lists become entities, ints
    become timedeltas where the schema says so (as build_response does)."""
    cls = request_class(api_key, version)
    assert cls is not None, (api_key, version)
    for name, value in list(fields.items()):
        if name in ("timeout", "max_wait") and isinstance(value, int):
            fields[name] = datetime.timedelta(milliseconds=value)
    return build_entity(cls, fields)


def produce(topic: str, partition: int, records: bytes, acks: int = 1, version: int = 9) -> Any:
    return request(
        0,
        version,
        acks=acks,
        timeout=5000,
        topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    )


def fetch(topic: str, partition: int, offset: int, version: int = 12, max_wait: int = 0) -> Any:
    return request(
        1,
        version,
        replica_id=-1,
        max_wait=max_wait,
        min_bytes=1,
        max_bytes=1 << 20,
        session_epoch=-1,
        topics=[
            {
                "topic": topic,
                "partitions": [
                    {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                     "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}
                ],
            }
        ],
    )  # fmt: skip


def list_offsets(
    topic: str, partition: int, timestamp: int, version: int = 7, replica_id: int = -1
) -> Any:
    return request(
        2,
        version,
        replica_id=replica_id,
        topics=[
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "timestamp": timestamp,
                        "current_leader_epoch": -1,
                    }
                ],
            }
        ],
    )


def create_topics(*names: str, partitions: int = 1, version: int = 7, **configs: str) -> Any:
    return request(
        19,
        version,
        timeout=10_000,
        topics=[
            {
                "name": n,
                "num_partitions": partitions,
                "replication_factor": 1,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
            for n in names
        ],
    )


def metadata(*names: str, version: int = 12, auto_create: bool = True) -> Any:
    return request(
        3,
        version,
        topics=[{"name": n} for n in names],
        allow_auto_topic_creation=auto_create,
    )


def delete_records(
    offsets: dict[tuple[str, int], int], timeout: int = 5000, version: int = 2
) -> Any:
    topics: dict[str, list[dict[str, int]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "offset": offset})
    return request(
        21,
        version,
        timeout=timeout,
        topics=[{"name": t, "partitions": parts} for t, parts in topics.items()],
    )


def describe_log_dirs(topics: dict[str, list[int]] | None = None, version: int = 4) -> Any:
    wanted = None if topics is None else [{"topic": t, "partitions": p} for t, p in topics.items()]
    return request(35, version, topics=wanted)
