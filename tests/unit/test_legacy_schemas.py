"""Request versions Kafka 4.0 dropped (issue 11), written for kio's readers and
writers: each encodes to bytes that kio 0.5.0 (generated from Kafka 3.x's schemas,
installed apart by scripts/test.sh, and run in its own interpreter since it shares
kio's name) reads and writes back byte for byte, and decodes to what was encoded."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
from collections.abc import Iterator
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

from moldau.protocol import legacy_schemas
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_entity, build_response, request_class, response_class
from moldau.protocol.legacy_schemas import (
    OffsetCommitRequestPartitionV0,
    OffsetCommitRequestPartitionV1,
    OffsetCommitRequestTopicV0,
    OffsetCommitRequestTopicV1,
    OffsetCommitRequestV0,
    OffsetCommitRequestV1,
)
from tests.unit.kio_3x import decode, encode, fields_of, through_kio_3x

V0 = OffsetCommitRequestV0(
    group_id="g",
    topics=(
        OffsetCommitRequestTopicV0(
            name="t",
            partitions=(
                OffsetCommitRequestPartitionV0(
                    partition_index=0, committed_offset=42, committed_metadata="m"
                ),
                OffsetCommitRequestPartitionV0(
                    partition_index=3, committed_offset=7, committed_metadata=None
                ),
            ),
        ),
    ),
)
V1 = OffsetCommitRequestV1(
    group_id="g",
    generation_id_or_member_epoch=5,
    member_id="member-1",
    topics=(
        OffsetCommitRequestTopicV1(
            name="t",
            partitions=(
                OffsetCommitRequestPartitionV1(
                    partition_index=1,
                    committed_offset=42,
                    commit_timestamp=1_700_000_000_000,
                    committed_metadata="",
                ),
            ),
        ),
    ),
)


def test_offset_commit_v0_and_v1_requests_are_kafka_3x_bytes() -> None:
    ours = {"v0": encode(V0), "v1": encode(V1)}
    entities = {"v0": V0, "v1": V1}
    theirs = through_kio_3x(
        {
            "v0": ("kio.schema.offset_commit.v0.request", "OffsetCommitRequest", ours["v0"]),
            "v1": ("kio.schema.offset_commit.v1.request", "OffsetCommitRequest", ours["v1"]),
        }
    )
    assert theirs == {k: (b, fields_of(entities[k])) for k, b in ours.items()}
    for version, entity in ((0, V0), (1, V1)):
        cls = request_class(ApiKey.OFFSET_COMMIT, version)
        assert cls is type(entity)
        assert decode(cls, ours[f"v{version}"]) == entity


def test_versions_served_as_a_later_one_have_its_bytes() -> None:
    """OffsetCommit v0-v1 responses are v2's; OffsetFetch v0 is v1 both ways."""
    commit = build_response(
        ApiKey.OFFSET_COMMIT, 0,
        {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 25}]}]},
    )  # fmt: skip
    fetch_request_class = request_class(ApiKey.OFFSET_FETCH, 0)
    assert fetch_request_class is not None
    fetch_request = build_entity(
        fetch_request_class,
        {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 2]}]},
    )
    fetch = build_response(
        ApiKey.OFFSET_FETCH, 0,
        {"topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 42, "metadata": "m", "error_code": 0},
            {"partition_index": 2, "committed_offset": -1, "metadata": None, "error_code": 0},
        ]}]},
    )  # fmt: skip
    entities = {
        "commit v0": commit,
        "commit v1": commit,
        "fetch request v0": fetch_request,
        "fetch v0": fetch,
    }
    ours = {k: encode(e) for k, e in entities.items()}
    theirs = through_kio_3x(
        {
            "commit v0": ("kio.schema.offset_commit.v0.response", "OffsetCommitResponse",
                          ours["commit v0"]),
            "commit v1": ("kio.schema.offset_commit.v1.response", "OffsetCommitResponse",
                          ours["commit v1"]),
            "fetch request v0": ("kio.schema.offset_fetch.v0.request", "OffsetFetchRequest",
                                 ours["fetch request v0"]),
            "fetch v0": ("kio.schema.offset_fetch.v0.response", "OffsetFetchResponse",
                         ours["fetch v0"]),
        }
    )  # fmt: skip
    assert {k: b for k, (b, _) in theirs.items()} == ours


def sample(cls: type, counter: Iterator[int]) -> Any:
    """An entity of `cls` with every field set to a distinct value (two items per
    array, null for every other nullable field), to show each field on the wire."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        n = next(counter)
        kind = classify_field(f)
        if is_optional(f) and n % 2:
            values[f.name] = None
        elif isinstance(kind, EntityTupleField):
            values[f.name] = (sample(kind.type_, counter), sample(kind.type_, counter))
        elif isinstance(kind, EntityField):
            values[f.name] = sample(kind.type_, counter)
        elif kind.is_array:
            values[f.name] = (primitive(f, n), primitive(f, n + 1))
        else:
            values[f.name] = primitive(f, n)
    return cls(**values)


def primitive(f: dataclasses.Field[Any], n: int) -> Any:
    kafka_type = f.metadata["kafka_type"]
    if kafka_type == "string":
        return f"s{n}"
    if kafka_type == "bool":
        return n % 2 == 0
    if kafka_type == "error_code":
        return ErrorCode(n % 40)
    if kafka_type == "timedelta_i32":
        return datetime.timedelta(milliseconds=n)
    assert kafka_type in ("int8", "int16", "int32", "int64"), kafka_type
    return n % 128


ADDED = sorted(
    {(key, version, "request") for key, version in legacy_schemas.REQUESTS}
    | {(key, version, "response") for key, version in legacy_schemas.RESPONSES}
    | {(key, version, kind) for key, version in legacy_schemas.ALIASES
       for kind in ("request", "response")}
)  # fmt: skip


def test_every_added_version_is_kafka_3x_bytes() -> None:
    """Each version served from legacy_schemas (or as a later version kio has) writes
    what kio 0.5.0's schema of that very version reads, field for field, and writes
    back the same bytes."""
    counter = itertools.count(1)
    ours: dict[str, tuple[type, Any, bytes]] = {}
    for key, version, kind in ADDED:
        cls = (request_class if kind == "request" else response_class)(key, version)
        assert cls is not None, (key, version, kind)
        entity = sample(cls, counter)
        ours[f"{ApiKey(key).name} v{version} {kind}"] = (cls, entity, encode(entity))
    theirs = through_kio_3x(
        {
            name: ([int(key), version, kind], "", data)
            for (key, version, kind), (name, (_, _, data)) in zip(ADDED, ours.items(), strict=True)
        }
    )
    assert theirs == {name: (data, fields_of(e)) for name, (_, e, data) in ours.items()}
    for _, (cls, entity, data) in ours.items():
        assert decode(cls, data) == entity
