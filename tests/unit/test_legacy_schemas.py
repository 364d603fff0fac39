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
from moldau.protocol.codec import request_class, response_class
from tests.unit.kio_3x import decode, encode, fields_of, through_kio_3x


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
