"""Reading a window of a topic for the message browser: where each partition's
read starts (from an offset, a timestamp, the beginning or the end), and the read
itself with a Consumer that joins no group, bounded in records, bytes and time."""

from __future__ import annotations

import base64
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from moldau.ui.json import UiError
from moldau.ui.offsets import Partition

#: Records a browse returns at most, and records it reads at most looking for a
#: filter's matches: the browser's memory and the answer's size stay bounded.
MAX_RECORDS = 500
MAX_SCANNED = 20_000
#: A key, value or header value longer than this is cut (and said to be).
MAX_FIELD_BYTES = 64 * 1024
BROWSE_TIMEOUT_S = 5.0
MODES = ("end", "beginning", "offset", "timestamp")
#: What was read of a partition with nothing to read: no first or last offset.
NOTHING: tuple[int | None, int | None, int] = (None, None, 0)
READ_FIELDS = ("partition", "from", "to", "read")


@dataclass
class Window:
    """Where to read each partition: from `starts` up to (not including) `ends`."""

    starts: dict[Partition, int]
    ends: dict[Partition, int]


def window(
    mode: str,
    limit: int,
    log_start: Mapping[Partition, int],
    high: Mapping[Partition, int],
    offset: int | None = None,
    by_time: Mapping[Partition, int] | None = None,
    span: int | None = None,
) -> Window:
    """The partitions' read window for a browse `mode`. "end": each partition's
    last `span` records (default `limit`: a filter looks further back). `offset`:
    for "offset", a single partition's offset out of its range is refused; with
    all partitions each is clamped into its range. `by_time`: for "timestamp",
    each partition's first offset at or after the time (-1: none)."""
    if mode not in MODES:
        raise UiError(400, f"from must be one of {', '.join(MODES)}, got {mode!r}")
    starts: dict[Partition, int] = {}
    for key, end in high.items():
        first = log_start.get(key, 0)
        if mode == "end":
            starts[key] = max(first, end - (span or limit))
        elif mode == "beginning":
            starts[key] = first
        elif mode == "offset":
            assert offset is not None
            if len(high) == 1 and not first <= offset <= end:
                raise UiError(
                    400,
                    f"OFFSET_OUT_OF_RANGE: offset {offset} is not in partition {key[1]}'s "
                    f"range {first}..{end}",
                )
            starts[key] = min(max(offset, first), end)
        else:
            at = (by_time or {}).get(key, -1)
            starts[key] = end if at < 0 else max(at, first)
    return Window(starts, dict(high))


def _field(data: bytes | None) -> tuple[str | None, bool]:
    if data is None:
        return None, False
    cut = len(data) > MAX_FIELD_BYTES
    return base64.b64encode(data[:MAX_FIELD_BYTES]).decode(), cut


def record_json(message: Any) -> dict[str, Any]:
    """A consumed message for the page: key, value and header values in base64
    (the page shows them as text, JSON or hex)."""
    key, key_cut = _field(message.key())
    value, value_cut = _field(message.value())
    headers = []
    for name, raw in message.headers() or []:
        encoded, _ = _field(raw if raw is None or isinstance(raw, bytes) else str(raw).encode())
        headers.append([name, encoded])
    kind, ts = message.timestamp()
    return {
        "partition": message.partition(),
        "offset": message.offset(),
        "timestamp": ts if kind else None,
        "timestampType": ["none", "CreateTime", "LogAppendTime"][kind],
        "key": key,
        "value": value,
        "headers": headers,
        "truncated": key_cut or value_cut,
    }


def matches(message: Any, text: str) -> bool:
    """Whether the filter text occurs in the key, the value or a header (as UTF-8)."""
    needle = text.encode()
    fields = [message.key(), message.value()]
    for name, raw in message.headers() or []:
        fields += [name.encode(), raw]
    return any(f is not None and needle in f for f in fields)


def end_span(limit: int, partitions: int, text: str) -> int:
    """How far back "from the end" reads each partition: the last `limit`
    records, or with a filter as far as the scan budget allows."""
    return limit if not text else max(limit, MAX_SCANNED // max(1, partitions))


def read(
    conf: dict[str, Any], topic: str, w: Window, limit: int, text: str, newest: bool
) -> dict[str, Any]:
    """Read the window (blocking: on the client's threads). `newest`: the last
    `limit` matches by (timestamp, partition, offset), newest first, as
    kafka-ui's newest-first mode; else the first `limit`, oldest first. Each
    partition keeps at most `limit` records (its newest, or its first), already
    cut to MAX_FIELD_BYTES a field, so memory stays bounded whatever the topic
    holds. `partitions`: what was read of each partition, for the page to say."""
    from confluent_kafka import Consumer, TopicPartition

    todo = {p: start for p, start in w.starts.items() if start < w.ends[p]}
    kept: dict[Partition, deque[dict[str, Any]]] = {p: deque(maxlen=limit) for p in todo}
    # Each partition's first and last offset read, and how many records.
    read_of: dict[Partition, tuple[int | None, int | None, int]] = {}
    found = 0
    scanned = 0
    if todo:
        consumer = Consumer(
            {
                **conf,
                "group.id": "moldau-ui-browser",
                "enable.auto.commit": False,
                # librdkafka's prefetch queue, bounded too (its default is 64 MiB).
                "queued.max.messages.kbytes": 8192,
            }
        )
        try:
            consumer.assign([TopicPartition(t, p, off) for (t, p), off in todo.items()])
            deadline = time.monotonic() + BROWSE_TIMEOUT_S
            while todo and scanned < MAX_SCANNED and time.monotonic() < deadline:
                if not newest and found >= limit:
                    break
                for m in consumer.consume(500, timeout=0.2):
                    key = (m.topic(), m.partition())
                    if m.error() is not None or key not in todo:
                        continue
                    offset = m.offset() or 0
                    if offset + 1 >= w.ends[key]:
                        del todo[key]
                    scanned += 1
                    first, _, count = read_of.get(key, (offset, offset, 0))
                    read_of[key] = (first, offset, count + 1)
                    if (not text or matches(m, text)) and (newest or found < limit):
                        kept[key].append(record_json(m))
                        found += 1
        finally:
            consumer.close()
    records = sorted(
        (r for ring in kept.values() for r in ring),
        key=lambda r: (r["timestamp"] or 0, r["partition"], r["offset"]),
    )
    return {
        "records": records[-limit:][::-1] if newest else records[:limit],
        "order": "newest first" if newest else "oldest first",
        "scanned": scanned,
        "complete": not todo,
        "partitions": [
            dict(zip(READ_FIELDS, (p, *read_of.get((t, p), NOTHING)), strict=True))
            for t, p in sorted(w.starts)
        ],
    }
