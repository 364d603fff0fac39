"""Offsets on the driver: resolving where a read starts and ends, splitting the
work into input partitions, limiting a micro-batch (in records and in bytes), and
the JSON Spark keeps in its checkpoint. Pure functions; the client calls live in `metadata`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from moldau.spark.options import (
    EARLIEST,
    LATEST,
    InvalidOptionError,
    OffsetSpec,
    TopicPartitionKey,
)

PartitionOffsets = dict[TopicPartitionKey, int]


log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (retention, a deleted topic, a truncated log)
    and `failOnDataLoss` is true."""


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    """As Spark's reportDataLoss: an error, or with failOnDataLoss false a warning."""
    if fail_on_data_loss:
        raise DataLossError(
            f"{message}. Some data may have been lost because they are not available in "
            "Kafka any more; either the data was aged out by Kafka or the topic may have "
            "been deleted before all the data in the topic was processed. If you don't want "
            'your streaming query to fail on such cases, set the source option "failOnDataLoss" '
            'to "false".'
        )
    log.warning(
        "%s. Some data may have been lost; the query goes on because failOnDataLoss is false.",
        message,
    )


def report_out_of_range(
    topic: str, partition: int, position: int, end: int, low: int, high: int, fail: bool
) -> int:
    """Offset `position` of a range ending at `end` is outside the log's [low, high):
    report the data lost; the offset to go on from (`end`: nothing left to read)."""
    if position < low:
        lost, resume = f"offsets {position} to {min(low, end) - 1} are gone", low
    else:
        lost, resume = f"the log ends at {high}, before {end}", end
    held = f"offsets {low} to {high - 1}" if high > low else f"no records (next: {high})"
    report_data_loss(
        f"Cannot fetch offset {position} of {topic}-{partition}: the log now holds {held}; {lost}",
        fail,
    )
    return resume


def report_checkpoint_of_other_topics(
    topics: list[str], subscription: str, fail_on_data_loss: bool
) -> None:
    """A stream's checkpoint holds offsets of topics it does not read: it was
    written by a query of other topics. An error (a DataLossError, as Spark's
    connector reports it), or with failOnDataLoss false a warning, and those
    offsets are dropped."""
    message = (
        f"the checkpoint holds offsets of {', '.join(topics)}, which this query does not "
        f"read ({subscription}): it was written by a query of other topics. A checkpoint "
        "belongs to the query that wrote it; give a query of other topics a new "
        "checkpointLocation"
    )
    if fail_on_data_loss:
        raise DataLossError(message)
    log.warning("%s; going on without them because failOnDataLoss is false.", message)


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records [start, end) of one topic partition: the work of one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset JSON, `{"topic": {"0": 23}}`, keys sorted as
    `json.dumps(sort_keys=True)` sorts them, so equal offsets serialise equally."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets, key=lambda tp: (tp[0], str(tp[1]))):
        out.setdefault(topic, {})[str(partition)] = offsets[(topic, partition)]
    return out


def from_json(offsets: Mapping[str, Mapping[str, int]] | str) -> PartitionOffsets:
    parsed = json.loads(offsets) if isinstance(offsets, str) else offsets
    return {(t, int(p)): int(o) for t, ps in parsed.items() for p, o in ps.items()}


def resolve(
    spec: OffsetSpec,
    partitions: Iterable[TopicPartitionKey],
    earliest: Mapping[TopicPartitionKey, int],
    latest: Mapping[TopicPartitionKey, int],
    by_timestamp: Callable[[Mapping[TopicPartitionKey, int]], Mapping[TopicPartitionKey, int]],
    *,
    timestamp_missing: str = "error",
) -> PartitionOffsets:
    """Concrete offsets for `partitions` from a starting or ending spec.

    `by_timestamp` maps {tp: timestamp} to {tp: first offset at or after it, or -1
    when there is none}. Where no offset has such a timestamp, an ending bound and
    the "latest" strategy take the latest offset; otherwise it is an error, as in
    Spark."""
    tps = sorted(partitions)
    if spec.kind == "earliest":
        return {tp: earliest[tp] for tp in tps}
    if spec.kind == "latest":
        return {tp: latest[tp] for tp in tps}
    if spec.kind in ("offsets", "timestamps") and set(spec.offsets) != set(tps):
        # Spark's connector asserts the same: a partition left out has no bound.
        raise InvalidOptionError(
            f"Specific {'offsets' if spec.kind == 'offsets' else 'timestamps'} must name every "
            "topic partition read (use -2 for earliest, -1 for latest); named "
            f"{_names(spec.offsets)}, reading {_names(tps)}"
        )
    if spec.kind == "offsets":
        return {
            tp: earliest[tp]
            if spec.offsets[tp] == EARLIEST
            else latest[tp]
            if spec.offsets[tp] == LATEST
            else spec.offsets[tp]
            for tp in tps
        }
    wanted = (
        {tp: spec.timestamp for tp in tps if spec.timestamp is not None}
        if spec.kind == "timestamp"
        else {tp: spec.offsets[tp] for tp in tps}
    )
    found = by_timestamp(wanted) if wanted else {}
    out = {}
    for tp in tps:
        if tp not in wanted:
            out[tp] = latest[tp]
            continue
        offset = found.get(tp, -1)
        if offset < 0:
            if timestamp_missing != "latest":
                raise ValueError(
                    f"No offset of {tp[0]}-{tp[1]} has a timestamp at or after {wanted[tp]}; "
                    "set 'startingOffsetsByTimestampStrategy' to latest to start there instead"
                )
            offset = latest[tp]
        out[tp] = offset
    return out


def _names(tps: Iterable[TopicPartitionKey]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps)) or "none"


def offset_ranges(
    start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int]
) -> list[OffsetRange]:
    """One range per partition in `end` that has records past its start."""
    return [
        OffsetRange(t, p, start[(t, p)], end[(t, p)])
        for (t, p) in sorted(end)
        if (t, p) in start and end[(t, p)] > start[(t, p)]
    ]


def split_ranges(
    ranges: list[OffsetRange],
    min_partitions: int | None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """The ranges as Spark's tasks, as Spark's KafkaOffsetRangeCalculator splits
    them: first every range into parts of at most `max_records_per_partition`
    records (as even as integer division makes them); then, while there are
    fewer parts than `min_partitions`, the large ones into more, each in
    proportion to its share of the records, at least one. A range small enough
    to be one part stays whole, and its records and its part are left out of
    the others' shares (so the other ranges make up the number)."""
    parts = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        parts = [
            piece
            for r in parts
            for piece in _divide(r, math.ceil(r.size / max_records_per_partition))
        ]
    if min_partitions is None or len(parts) >= min_partitions:
        return parts
    total = sum(r.size for r in parts)
    whole = [r for r in parts if _part_count(r.size, total, min_partitions) == 1]
    # As Spark, by topic partition: every piece of a partition one piece of which
    # stays whole stays whole too.
    whole_tps = {(r.topic, r.partition) for r in whole}
    rest_total = total - sum(r.size for r in whole)
    rest_parts = max(min_partitions - len(whole), 1)
    return [
        piece
        for r in parts
        for piece in _divide(
            r,
            1
            if (r.topic, r.partition) in whole_tps
            else _part_count(r.size, rest_total, rest_parts),
        )
    ]


def _part_count(size: int, total: int, parts: int) -> int:
    """A range's share of `parts`, rounded half up (Java's Math.round), at least one."""
    return max(math.floor(size / total * parts + 0.5), 1)


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """`r` in `parts` consecutive pieces whose sizes differ by at most one, the
    larger ones last; no empty piece."""
    out = []
    start, remaining = r.start, r.size
    for i in range(parts):
        size = remaining // (parts - i)
        remaining -= size
        if size > 0:
            out.append(OffsetRange(r.topic, r.partition, start, start + size))
        start += size
    return out


def rate_limit(
    start: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int], limit: int
) -> PartitionOffsets:
    """The end of a micro-batch of at most about `limit` records, shared among the
    partitions in proportion to what each has waiting, as Spark's rateLimit:
    a partition's share rounds down, except that a share under one rounds up so
    that small partitions are not starved."""
    sizes = {tp: latest[tp] - start.get(tp, latest[tp]) for tp in latest}
    total = sum(s for s in sizes.values() if s > 0)
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        size = end - begin
        if size <= 0:
            out[tp] = end
            continue
        share = limit * (size / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + step)
    return out


@dataclass(frozen=True)
class LogExtent:
    """What a partition's log holds on its leader: `size` bytes (its segments,
    as DescribeLogDirs tells them) for the offsets [start, end)."""

    size: int
    start: int
    end: int


def bytes_per_offset(
    extents: Mapping[TopicPartitionKey, LogExtent],
) -> dict[TopicPartitionKey, float]:
    """Each partition's bytes per offset as its log stores them: its size over
    the offsets it holds. None for a log that holds no offset or no byte."""
    return {
        tp: e.size / (e.end - e.start)
        for tp, e in extents.items()
        if e.end > e.start and e.size > 0
    }


def byte_limit(
    start: Mapping[TopicPartitionKey, int],
    latest: Mapping[TopicPartitionKey, int],
    per_offset: Mapping[TopicPartitionKey, float],
    limit: int,
) -> PartitionOffsets:
    """The end of a micro-batch of about `limit` bytes at most, as the log stores
    them, estimated from each partition's bytes per offset. Shared as rate_limit
    shares records, in proportion to what each partition has waiting (here in
    bytes: each reads the same fraction of its backlog), a share rounding down;
    but a partition with records waiting reads at least one, so that a record
    larger than its share cannot stall the stream. A partition with no estimate
    is not bounded."""
    waiting = {
        tp: (end - start.get(tp, end)) * per_offset[tp]
        for tp, end in latest.items()
        if tp in per_offset and end > start.get(tp, end)
    }
    total = sum(waiting.values())
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        if tp not in waiting:
            out[tp] = end
            continue
        # Its share of the bytes over its bytes per offset.
        records = math.floor(limit * (end - begin) / total)
        out[tp] = min(end, begin + max(1, records))
    return out


def tighter(
    a: Mapping[TopicPartitionKey, int], b: Mapping[TopicPartitionKey, int]
) -> PartitionOffsets:
    """Per partition, the end of the smaller of two bounds on the same batch."""
    return {tp: min(a[tp], b.get(tp, a[tp])) for tp in a}
