"""The records of __consumer_offsets and __transaction_state as the JSON that
kafka-dump-log prints with --offsets-decoder and --transaction-log-decoder: the key
as {"type": "<key version>", "data": {...}}, the value as {"version": "<v>", "data":
{...}} (a tombstone: <DELETE>), fields named and ordered as Kafka's message schemas
(OffsetCommitKey/Value, GroupMetadataKey/Value, TransactionLogKey/Value) and, in a
consumer group's metadata, each member's subscription and assignment decoded too.

A small table of each schema's fields drives one reader: a field present only in
some versions is read (and printed) only in those, a tagged field is printed only
when it differs from its default (as Kafka's generated JSON converters do), bytes
are base64, as Jackson prints them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from moldau.protocol.wire import DecodeError, Reader

_ANY = 32767


@dataclass(frozen=True)
class Field:
    """`kind`: int8/16/32/64, string, bytes, []int32, []string, or a struct's
    fields for an array of them. `tag`: the tag of a field tagged in flexible
    versions."""

    name: str
    kind: str | tuple[Field, ...]
    since: int = 0
    until: int = _ANY
    nullable: bool = False
    tag: int | None = None
    default: Any = None

    def present(self, version: int) -> bool:
        return self.since <= version <= self.until


@dataclass(frozen=True)
class Schema:
    fields: tuple[Field, ...]
    flexible_since: int = _ANY


_PARTITIONS = (Field("topic", "string"), Field("partitions", "[]int32"))

OFFSET_COMMIT_KEY = Schema(
    (Field("group", "string"), Field("topic", "string"), Field("partition", "int32"))
)
GROUP_METADATA_KEY = Schema((Field("group", "string"),))
OFFSET_COMMIT_VALUE = Schema(
    (
        Field("offset", "int64"),
        Field("leaderEpoch", "int32", since=3),
        Field("metadata", "string"),
        Field("commitTimestamp", "int64"),
        Field("expireTimestamp", "int64", since=1, until=1),
    ),
    flexible_since=4,
)
_MEMBER = (
    Field("memberId", "string"),
    Field("groupInstanceId", "string", since=3, nullable=True),
    Field("clientId", "string"),
    Field("clientHost", "string"),
    Field("rebalanceTimeout", "int32", since=1),
    Field("sessionTimeout", "int32"),
    Field("subscription", "bytes"),
    Field("assignment", "bytes"),
)
GROUP_METADATA_VALUE = Schema(
    (
        Field("protocolType", "string"),
        Field("generation", "int32"),
        Field("protocol", "string", nullable=True),
        Field("leader", "string", nullable=True),
        Field("currentStateTimestamp", "int64", since=2),
        Field("members", _MEMBER),
    ),
    flexible_since=4,
)
CONSUMER_SUBSCRIPTION = Schema(
    (
        Field("topics", "[]string"),
        Field("userData", "bytes", nullable=True),
        Field("ownedPartitions", _PARTITIONS, since=1),
        Field("generationId", "int32", since=2),
        Field("rackId", "string", since=3, nullable=True),
    )
)
CONSUMER_ASSIGNMENT = Schema(
    (Field("assignedPartitions", _PARTITIONS), Field("userData", "bytes", nullable=True))
)
TRANSACTION_LOG_KEY = Schema((Field("transactionalId", "string"),))
TRANSACTION_LOG_VALUE = Schema(
    (
        Field("producerId", "int64"),
        Field("previousProducerId", "int64", since=1, tag=0, default=-1),
        Field("nextProducerId", "int64", since=1, tag=1, default=-1),
        Field("producerEpoch", "int16"),
        Field("transactionTimeoutMs", "int32"),
        Field("transactionStatus", "int8"),
        Field(
            "transactionPartitions",
            (Field("topic", "string"), Field("partitionIds", "[]int32")),
            nullable=True,
        ),
        Field("transactionLastUpdateTimestampMs", "int64"),
        Field("transactionStartTimestampMs", "int64"),
        Field("clientTransactionVersion", "int16", since=1, tag=2, default=0),
    ),
    flexible_since=1,
)

_INTS: dict[str, Callable[[Reader], int]] = {
    "int8": Reader.int8,
    "int16": Reader.int16,
    "int32": Reader.int32,
    "int64": Reader.int64,
}


def read(schema: Schema, data: bytes | memoryview, version: int, pos: int = 2) -> dict[str, Any]:
    """The fields of `data` (past its version at `pos`) as Kafka's JSON shows them."""
    r = Reader(data, pos)
    return _struct(r, schema.fields, version, version >= schema.flexible_since)


def _struct(r: Reader, fields: Sequence[Field], version: int, flexible: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tagged: dict[int, Field] = {}
    for f in fields:
        if not f.present(version):
            continue
        if f.tag is not None:
            if flexible:
                tagged[f.tag] = f
            continue
        out[f.name] = _value(r, f, version, flexible)
    if flexible:
        found: dict[int, Any] = {}
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            f_or_none = tagged.get(tag)
            if f_or_none is None:
                r.skip(size)
            else:
                found[tag] = _value(Reader(r.raw(size)), f_or_none, version, flexible)
        # Printed in the schema's order, and only when not the default.
        for f in fields:
            if f.tag is not None and f.tag in found and found[f.tag] != f.default:
                out[f.name] = found[f.tag]
    return out


def _value(r: Reader, f: Field, version: int, flexible: bool) -> Any:
    kind = f.kind
    if isinstance(kind, tuple):
        n = r.array_length(flexible)
        if n < 0:
            return None
        return [_struct(r, kind, version, flexible) for _ in range(n)]
    if kind in _INTS:
        return _INTS[kind](r)
    if kind == "string":
        return r.nullable_string(flexible)
    if kind == "bytes":
        raw = r.nullable_bytes(flexible)
        return None if raw is None else base64.b64encode(bytes(raw)).decode()
    if kind in ("[]int32", "[]string"):
        n = r.array_length(flexible)
        if n < 0:
            return None
        item: Callable[[], Any] = r.int32 if kind == "[]int32" else lambda: r.string(flexible)
        return [item() for _ in range(n)]
    raise ValueError(f"unknown field kind {kind}")


def to_json(node: Any) -> str:
    """As Jackson writes it: no spaces, non-ASCII characters as they are."""
    return json.dumps(node, separators=(",", ":"), ensure_ascii=False)


def _version(data: bytes | memoryview) -> int:
    return Reader(data).int16()


class UnknownRecordTypeError(Exception):
    def __init__(self, record_type: int) -> None:
        super().__init__(f"unknown record type {record_type}")
        self.record_type = record_type


def offsets_key_and_value(key: bytes, value: bytes | None) -> tuple[str, str]:
    """A __consumer_offsets record as --offsets-decoder prints it."""
    record_type = _version(key)
    if record_type in (0, 1):
        key_json = read(OFFSET_COMMIT_KEY, key, record_type)
        value_schema = OFFSET_COMMIT_VALUE
    elif record_type == 2:
        key_json = read(GROUP_METADATA_KEY, key, record_type)
        value_schema = GROUP_METADATA_VALUE
    else:
        # The KIP-848 and share group records; Moldau writes none of them.
        raise UnknownRecordTypeError(record_type)
    key_text = to_json({"type": str(record_type), "data": key_json})
    if value is None:
        return key_text, "<DELETE>"
    version = _version(value)
    data = read(value_schema, value, version)
    if value_schema is GROUP_METADATA_VALUE and data.get("protocolType") == "consumer":
        for member in data.get("members") or []:
            _expand(member, "subscription", CONSUMER_SUBSCRIPTION)
            _expand(member, "assignment", CONSUMER_ASSIGNMENT)
    return key_text, to_json({"version": str(version), "data": data})


def _expand(member: dict[str, Any], name: str, schema: Schema) -> None:
    """Replace a member's embedded consumer-protocol bytes by their fields; keep the
    bytes if they do not decode, as Kafka does."""
    encoded = member.get(name)
    if encoded is None:
        return
    raw = base64.b64decode(encoded)
    try:
        version = _version(raw)
        # A newer version is read as the newest known: the protocol only adds fields.
        member[name] = read(schema, raw, min(version, 3))
    except (DecodeError, ValueError):
        pass


def transaction_key_and_value(key: bytes, value: bytes | None) -> tuple[str, str]:
    """A __transaction_state record as --transaction-log-decoder prints it."""
    key_version = _version(key)
    if key_version != 0:
        raise UnknownRecordTypeError(key_version)
    key_text = to_json({"type": "0", "data": read(TRANSACTION_LOG_KEY, key, 0)})
    if value is None:
        return key_text, "<DELETE>"
    version = _version(value)
    data = read(TRANSACTION_LOG_VALUE, value, version)
    return key_text, to_json({"version": str(version), "data": data})
