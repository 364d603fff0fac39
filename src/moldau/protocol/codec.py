"""Request header parsing and kio-based message codecs.

kio decodes natively and fast, but raises KeyError on a tagged field it does not
know, where Kafka skips it, and preallocates an array by the length a request
claims. Flexible versions are therefore decoded by `_safe_reader`, which walks the
same kio schema in Python, checks every length against the bytes left and skips
unknown tags; older versions use kio's reader.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import typing
from collections.abc import Callable, Hashable, Mapping
from dataclasses import MISSING, fields
from functools import cache
from typing import Any, NamedTuple, cast

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_implicit_default, get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial._parse import get_field_reader, get_reader
from kio.serial.errors import SerialError
from kio.serial.readers import read_compact_array_length, read_legacy_array_length
from kio.static.protocol import Entity, RequestPayload, ResponsePayload

from moldau.protocol import legacy_schemas
from moldau.protocol.apis import ApiKey
from moldau.protocol.control_wire import CONTROL_VERSIONS
from moldau.protocol.legacy_schemas import ALIASES
from moldau.protocol.wire import DecodeError, Reader, pack_i32

_Read = Callable[[memoryview, int], tuple[Any, int]]


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # Whether request and response bodies use the flexible (compact + tagged) encoding.
    flexible: bool


# api key -> the versions kio has schemas for. Lookups of other (key, version)
# pairs, which any peer can send, never reach the loader or a cache.
_KNOWN_VERSIONS: dict[int, frozenset[int]] = {
    key: frozenset(schema_name_map[name]) for key, name in api_key_map.items()
}


def _known(api_key: int, api_version: int) -> bool:
    return api_version in _KNOWN_VERSIONS.get(api_key, ()) or (
        (api_key, api_version) in ALIASES
        or (api_key, api_version) in legacy_schemas.REQUESTS
        or (api_key, api_version) in legacy_schemas.RESPONSES
    )


def request_class(api_key: int, api_version: int) -> type[RequestPayload] | None:
    return _request_class(api_key, api_version) if _known(api_key, api_version) else None


def response_class(api_key: int, api_version: int) -> type[ResponsePayload] | None:
    return _response_class(api_key, api_version) if _known(api_key, api_version) else None


@cache
def _request_class(api_key: int, api_version: int) -> type[RequestPayload] | None:
    legacy = legacy_schemas.REQUESTS.get((api_key, api_version))
    if legacy is not None:
        return cast(type[RequestPayload], legacy)
    api_version = ALIASES.get((api_key, api_version), api_version)
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@cache
def _response_class(api_key: int, api_version: int) -> type[ResponsePayload] | None:
    legacy = legacy_schemas.RESPONSES.get((api_key, api_version))
    if legacy is not None:
        return cast(type[ResponsePayload], legacy)
    api_version = ALIASES.get((api_key, api_version), api_version)
    try:
        return load_response_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


def is_flexible(api_key: int, api_version: int) -> bool:
    if api_key in CONTROL_VERSIONS or api_key == ApiKey.CONTROLLED_SHUTDOWN:
        return True  # kio has no schemas for these; the versions we speak are flexible
    versions = _KNOWN_VERSIONS.get(api_key)
    if not versions:
        return False
    # A version newer than kio knows is flexible if the newest known one is.
    cls = request_class(api_key, min(api_version, max(versions)))
    return bool(cls.__flexible__) if cls is not None else False


def parse_request_header(frame: memoryview) -> tuple[RequestHeader, int]:
    """Parse the request header (v1, or v2 for flexible versions); return it and where
    the body starts. client_id is always a legacy nullable string, even in v2."""
    r = Reader(frame)
    api_key = r.int16()
    api_version = r.int16()
    correlation_id = r.int32()
    client_id = r.nullable_string(flexible=False)
    flexible = is_flexible(api_key, api_version)
    if flexible:
        r.skip_tagged_fields()
    return RequestHeader(api_key, api_version, correlation_id, client_id, flexible), r.pos


def decode_request(header: RequestHeader, frame: memoryview, offset: int) -> RequestPayload:
    """Decode a request body. Raises DecodeError for malformed bytes.

    Flexible versions are decoded by `_safe_reader`, a Python walk of kio's schema:
    kio's native reader sizes a compact array by its claimed length before reading it
    (a claim of 2^32 items aborts the process), and it refuses unknown tagged fields,
    which Kafka skips. Older versions use kio's native reader, which is safe there."""
    cls = request_class(header.api_key, header.api_version)
    if cls is None:
        raise DecodeError(f"no schema for api {header.api_key} v{header.api_version}")
    buf = frame.toreadonly()
    reader = _safe_reader(cls) if cls.__flexible__ else entity_reader(cls)
    try:
        value, _ = reader(buf, offset)
    except (SerialError, ValueError, UnicodeDecodeError, OverflowError, KeyError, IndexError) as e:
        raise DecodeError(str(e) or type(e).__name__) from e
    return value


def decode_response(api_key: int, api_version: int, body: memoryview) -> ResponsePayload:
    """Decode a response body (for the requests a broker sends itself), with the
    same bounds-checked reader as requests. Raises DecodeError for malformed bytes."""
    cls = response_class(api_key, api_version)
    if cls is None:
        raise DecodeError(f"no schema for api {api_key} v{api_version} responses")
    reader = _safe_reader(cls) if cls.__flexible__ else entity_reader(cls)
    try:
        value, _ = reader(body.toreadonly(), 0)
    except (SerialError, ValueError, UnicodeDecodeError, OverflowError, KeyError, IndexError) as e:
        raise DecodeError(str(e) or type(e).__name__) from e
    return value


def response_header_bytes(header: RequestHeader) -> bytes:
    """Response header: correlation id, plus empty tagged fields (v1) for flexible
    responses, except ApiVersions whose response header is always v0."""
    if header.flexible and header.api_key != ApiKey.API_VERSIONS:
        return pack_i32(header.correlation_id) + b"\x00"
    return pack_i32(header.correlation_id)


def encode_body(response: Entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(response))(buf, response)
    return buf.getvalue()


def encode_response(header: RequestHeader, response: Entity) -> bytes:
    """A whole response frame: size, header, body."""
    head = response_header_bytes(header)
    body = encode_body(response)
    return pack_i32(len(head) + len(body)) + head + body


# -- the safe reader ---------------------------------------------------------------


@cache
def _safe_reader(cls: type[Entity]) -> _Read:
    flexible = bool(cls.__flexible__)
    regular: list[tuple[str, _Read]] = []
    tagged: dict[int, tuple[str, _Read]] = {}
    for f in fields(cls):
        tag = get_field_tag(f)
        reader = _field_reader(cls, f, tag is not None)
        if tag is None:
            regular.append((f.name, reader))
        else:
            tagged[tag] = (f.name, reader)

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        start = pos
        values: dict[str, Any] = {}
        for name, reader in regular:
            values[name], n = reader(buf, pos)
            pos += n
        if flexible:
            r = Reader(buf, pos)
            for _ in range(r.uvarint()):
                tag = r.uvarint()
                size = r.uvarint()
                known = tagged.get(tag)
                if known is not None:
                    values[known[0]], _ = known[1](buf, r.pos)
                r.skip(size)
            pos = r.pos
        return cls(**values), pos - start

    return read


def _field_reader(
    cls: type[Entity],
    f: dataclasses.Field[Any],
    is_tag: bool,
) -> _Read:
    kind = classify_field(f)
    flexible = bool(cls.__flexible__)
    if isinstance(kind, PrimitiveTupleField):
        return _array_reader(get_reader(get_schema_field_type(f), flexible, False), flexible)
    if isinstance(kind, EntityTupleField):
        return _array_reader(_safe_reader(kind.type_), flexible)
    if isinstance(kind, EntityField):
        inner = _safe_reader(kind.type_)
        if is_optional(f) and not is_tag:

            def read_nullable(buf: memoryview, pos: int) -> tuple[Any, int]:
                if buf[pos] == 0xFF:  # int8 -1: null (KIP-893)
                    return None, 1
                v, k = inner(buf, pos + 1)
                return v, k + 1

            return read_nullable
        return inner
    if f.metadata.get("kafka_type") == "datetime_i64" and not is_optional(f):
        return _read_timestamp
    return get_field_reader(cls, f, cls.__name__ == "RequestHeader", is_tag)


def _read_timestamp(buf: memoryview, pos: int) -> tuple[Any, int]:
    """A timestamp whose -1 means none (DescribeTransactions' start time of a
    transaction not running): None, where kio's reader refuses a negative time."""
    ms = Reader(buf, pos).int64()
    return (None if ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)), 8


def _array_reader(item: _Read, flexible: bool) -> _Read:
    """An array of `item`s whose claimed length is checked against the bytes left
    before anything is allocated."""
    read_len = read_compact_array_length if flexible else read_legacy_array_length

    def read_array(buf: memoryview, pos: int) -> tuple[Any, int]:
        n, size = read_len(buf, pos)
        if n is None or n < 0:
            return None, size
        if n > len(buf) - pos:
            raise DecodeError(f"array of {n} items in {len(buf) - pos} bytes")
        items = []
        total = size
        for _ in range(n):
            v, k = item(buf, pos + total)
            items.append(v)
            total += k
        return tuple(items), total

    return read_array


# -- error responses for any API --------------------------------------------------------


def error_response(api_key: int, api_version: int, code: ErrorCode) -> ResponsePayload | None:
    """A response of the given API and version that carries `code` in its top-level
    error_code, with every other field at its default; None if the schema has no
    top-level error_code."""
    cls = response_class(api_key, api_version)
    if cls is None or "error_code" not in {f.name for f in fields(cls)}:
        return None
    return cast(ResponsePayload, default_entity(cls, error_code=code))


def default_entity(cls: type[Any], **overrides: Any) -> Any:
    """An instance of a kio entity with every required field at its zero value."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in overrides:
            values[f.name] = overrides[f.name]
        elif f.default is not MISSING:
            continue
        elif get_field_tag(f) is not None:
            values[f.name] = get_tagged_field_default(f)
        else:
            values[f.name] = _zero(f)
    return cls(**values)


def _zero(f: dataclasses.Field[Any]) -> Any:
    kind = classify_field(f)
    if kind.is_array:
        return ()
    if is_optional(f):
        return None
    if isinstance(kind, EntityField):
        return default_entity(kind.type_)
    kafka_type = f.metadata.get("kafka_type")
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type == "bool":
        return False
    return get_implicit_default(kind.type_)


# -- building responses of any version from plain data ----------------------------------


def build_response(api_key: int, api_version: int, data: Mapping[str, Any]) -> ResponsePayload:
    """The kio response of this API version, built from plain data: nested dicts and
    lists become nested entities, ints become ErrorCode or timedelta where the schema
    says so, and keys the version lacks are dropped. Handlers describe a response once
    for every version."""
    cls = response_class(api_key, api_version)
    if cls is None:
        raise ValueError(f"no response schema for api {api_key} v{api_version}")
    return cast(ResponsePayload, build_entity(cls, data))


def build_entity(cls: type[Any], data: Mapping[str, Any]) -> Any:
    hints = _hints(cast(Hashable, cls))
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in data:
            values[f.name] = _convert(f, hints[f.name], data[f.name])
        elif f.default is MISSING:
            if get_field_tag(f) is not None:
                values[f.name] = get_tagged_field_default(f)
            else:
                values[f.name] = _zero(f)
    return cls(**values)


@cache
def _hints(cls: Hashable) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(f: dataclasses.Field[Any], hint: Any, value: Any) -> Any:
    if value is None:
        return None
    kind = classify_field(f)
    if isinstance(kind, EntityTupleField):
        return tuple(
            v if dataclasses.is_dataclass(v) else build_entity(kind.type_, v) for v in value
        )
    if isinstance(kind, EntityField):
        return value if dataclasses.is_dataclass(value) else build_entity(kind.type_, value)
    kafka_type = f.metadata.get("kafka_type")
    if kind.is_array:
        return tuple(value)
    if kafka_type == "error_code":
        return ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        if value < 0 and is_optional(f):
            return None  # written as -1
        # A -1 ("none") where the field is not nullable: the instant before the epoch,
        # which kio writes as -1.
        return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
    return value
