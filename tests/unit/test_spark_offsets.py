"""The Spark data source's pure parts: option parsing, offset resolution, range
splitting, rate limiting and the checkpoint's offset JSON (no Spark, no broker)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moldau.spark.offsets import (
    LogExtent,
    OffsetRange,
    byte_limit,
    bytes_per_offset,
    from_json,
    offset_ranges,
    rate_limit,
    resolve,
    split_ranges,
    tighter,
    to_json,
)
from moldau.spark.options import (
    InvalidOptionError,
    OffsetSpec,
    parse_read_options,
    parse_write_options,
)

B = {"kafka.bootstrap.servers": "h:1"}


def test_offsets_serialise_with_sorted_keys_and_round_trip() -> None:
    offsets = {("b", 10): 5, ("b", 2): 7, ("a", 0): 1}
    as_json = to_json(offsets)
    assert json.dumps(as_json) == json.dumps(as_json, sort_keys=True)
    assert json.dumps(as_json) == '{"a": {"0": 1}, "b": {"10": 5, "2": 7}}'
    assert from_json(json.dumps(as_json)) == offsets


def test_options_are_case_insensitive_and_kafka_options_go_to_the_client() -> None:
    o = parse_read_options(
        {**B, "SUBSCRIBE": "a, b", "StartingOffsets": "earliest", "kafka.client.id": "x"},
        streaming=True,
    )
    assert o.subscription.topics == ("a", "b")
    assert o.starting == OffsetSpec("earliest")
    assert o.client_config == {"log_level": "4", "bootstrap.servers": "h:1", "client.id": "x"}


def test_the_clients_log_warnings_not_info_unless_asked() -> None:
    """librdkafka's info lines on stderr read as trouble to a Spark user."""
    quiet = parse_read_options({**B, "subscribe": "a"}, streaming=False)
    assert quiet.client_config["log_level"] == "4"
    chatty = parse_read_options({**B, "subscribe": "a", "kafka.log_level": "7"}, streaming=False)
    assert chatty.client_config["log_level"] == "7"


def test_defaults_are_sparks() -> None:
    batch = parse_read_options({**B, "subscribe": "a"}, streaming=False)
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = parse_read_options({**B, "subscribe": "a"}, streaming=True)
    assert stream.starting.kind == "latest"
    # Moldau's own: tasks fetch record batches themselves unless told otherwise.
    assert batch.fetch_path == stream.fetch_path == "fetch"
    client = parse_read_options({**B, "subscribe": "a", "fetchPath": "Client"}, streaming=False)
    assert client.fetch_path == "client"
    assert stream.max_bytes_per_trigger is None and batch.max_records_per_partition is None
    bounded = parse_read_options(
        {**B, "subscribe": "a", "MAXBYTESPERTRIGGER": "1000", "maxRecordsPerPartition": "9"},
        streaming=True,
    )
    assert (bounded.max_bytes_per_trigger, bounded.max_records_per_partition) == (1000, 9)


@pytest.mark.parametrize(
    ("options", "streaming", "named"),
    [
        ({"subscribe": "a", "endingOffsets": "latest"}, True, "endingOffsets"),
        ({"subscribe": "a", "endingTimestamp": "5"}, True, "endingTimestamp"),
        ({"subscribe": "a", "commitToGroup": "g"}, False, "commitToGroup"),
        ({"assign": '{"a":[0]}', "startingOffsets": '{"a":{"1":0}}'}, True, "startingOffsets"),
        ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "x"}, True, "Strategy"),
        ({"subscribe": "a", "startingTimestamp": "soon"}, True, "startingTimestamp"),
        ({"subscribe": "a", "fetchOffset.numRetries": "-1"}, True, "fetchOffset.numRetries"),
        ({"subscribe": " , "}, True, "subscribe"),
        ({"subscribe": "a", "fetchPath": "consumer"}, False, "fetchPath"),
        ({"subscribe": "a", "maxRecordsPerPartition": "0"}, False, "maxRecordsPerPartition"),
        ({"subscribe": "a", "maxBytesPerTrigger": "1m"}, True, "maxBytesPerTrigger"),
        ({"subscribe": "a", "maxBytesPerTrigger": "1000"}, False, "maxBytesPerTrigger"),
    ],
)
def test_bad_read_options_name_the_option(
    options: dict[str, str], streaming: bool, named: str
) -> None:
    with pytest.raises(InvalidOptionError, match=named):
        parse_read_options({**B, **options}, streaming=streaming)


def test_write_options() -> None:
    assert parse_write_options({**B, "topic": "t"}, streaming=False).topic == "t"
    with pytest.raises(InvalidOptionError, match=r"kafka\.key\.serializer"):
        parse_write_options({**B, "kafka.key.serializer": "x"}, streaming=False)
    with pytest.raises(InvalidOptionError, match=r"kafka\.bootstrap\.servers"):
        parse_write_options({"topic": "t"}, streaming=False)
    assert parse_write_options({**B, "topic": "t", "exactlyOnce": "true"}, streaming=False)
    with pytest.raises(InvalidOptionError, match=r"kafka\.transactional\.id"):
        parse_write_options(
            {**B, "exactlyOnce": "true", "kafka.transactional.id": "x"}, streaming=True
        )
    assert parse_write_options({**B, "exactlyOnce": "true"}, streaming=True).exactly_once
    # Moldau's own: tasks build record batches themselves unless told otherwise.
    assert parse_write_options({**B, "topic": "t"}, streaming=False).write_path == "batch"
    client = parse_write_options({**B, "topic": "t", "writePath": "Client"}, streaming=True)
    assert client.write_path == "client"
    with pytest.raises(InvalidOptionError, match="writePath"):
        parse_write_options({**B, "topic": "t", "writePath": "producer"}, streaming=False)


def test_resolve_specific_offsets_and_timestamps() -> None:
    tps = [("a", 0), ("a", 1)]
    earliest, latest = {("a", 0): 3, ("a", 1): 0}, {("a", 0): 10, ("a", 1): 20}

    def no_times(_: object) -> dict[tuple[str, int], int]:
        raise AssertionError("not asked")

    spec = OffsetSpec("offsets", offsets={("a", 0): -2, ("a", 1): 7})
    assert resolve(spec, tps, earliest, latest, no_times) == {("a", 0): 3, ("a", 1): 7}
    with pytest.raises(InvalidOptionError, match="every topic partition"):
        resolve(OffsetSpec("offsets", offsets={("a", 0): 1}), tps, earliest, latest, no_times)

    def times(wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        return {tp: (5 if tp == ("a", 0) else -1) for tp in wanted}

    with pytest.raises(ValueError, match="a-1"):
        resolve(OffsetSpec("timestamp", timestamp=1), tps, earliest, latest, times)
    assert resolve(
        OffsetSpec("timestamp", timestamp=1),
        tps,
        earliest,
        latest,
        times,
        timestamp_missing="latest",
    ) == {("a", 0): 5, ("a", 1): 20}


def test_min_partitions_split_in_proportion_to_size() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 300), OffsetRange("t", 2, 5, 6)]
    split = split_ranges(ranges, 8)
    by_partition = {p: [r for r in split if r.partition == p] for p in range(3)}
    # As Spark: t-2's one record is a part of its own, and is left out of the
    # others' shares: 7 parts for 400 records, 1.75 and 5.25 rounded.
    assert [len(by_partition[p]) for p in range(3)] == [2, 5, 1]
    assert [r.size for r in by_partition[1]] == [60, 60, 60, 60, 60]
    for p, original in enumerate(ranges):
        parts = by_partition[p]
        assert parts[0].start == original.start and parts[-1].end == original.end
        assert all(a.end == b.start for a, b in itertools.pairwise(parts))
    assert split_ranges(ranges, 2) == ranges  # already enough


def test_max_records_per_partition_splits_every_range_evenly() -> None:
    ranges = [OffsetRange("t", 0, 10, 20), OffsetRange("t", 1, 0, 3), OffsetRange("t", 2, 7, 7)]
    # ceil(10 / 3) = 4 parts, the remainder in the last ones (integer division).
    assert split_ranges(ranges, None, 3) == [
        OffsetRange("t", 0, 10, 12),
        OffsetRange("t", 0, 12, 14),
        OffsetRange("t", 0, 14, 17),
        OffsetRange("t", 0, 17, 20),
        OffsetRange("t", 1, 0, 3),
    ]
    assert split_ranges(ranges, None, 1000) == ranges[:2]


def test_min_partitions_splits_what_max_records_per_partition_left() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10)]
    # maxRecordsPerPartition first: 50 + 50 and 10, three parts; six wanted. The
    # 10 records stay whole, and each 50 takes round(50 / 100 * 5) = 3 parts.
    split = split_ranges(ranges, 6, 50)
    assert [(r.partition, r.size) for r in split] == [
        (0, 16), (0, 17), (0, 17), (0, 16), (0, 17), (0, 17), (1, 10),
    ]  # fmt: skip
    # Enough parts already: minPartitions adds none.
    assert len(split_ranges(ranges, 3, 50)) == 3


@given(
    sizes=st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
    min_partitions=st.none() | st.integers(1, 64),
    max_records=st.none() | st.integers(1, 5_000),
)
def test_splitting_never_loses_or_repeats_an_offset(
    sizes: list[int], min_partitions: int | None, max_records: int | None
) -> None:
    ranges = [OffsetRange("t", p, 1000, 1000 + s) for p, s in enumerate(sizes) if s > 0]
    split = split_ranges(ranges, min_partitions, max_records)
    for r in ranges:
        covered = [o for s in split if s.partition == r.partition for o in range(s.start, s.end)]
        assert covered == list(range(r.start, r.end))
    assert all(s.size > 0 for s in split)
    if max_records is not None:
        assert all(s.size <= max_records for s in split)


def test_rate_limit_shares_in_proportion_and_never_starves() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 1000, ("t", 1): 3000, ("t", 2): 1}
    end = rate_limit(start, latest, 100)
    assert end == {("t", 0): 24, ("t", 1): 74, ("t", 2): 1}
    assert rate_limit(start, latest, 10_000) == latest


@given(
    waiting=st.lists(st.integers(0, 100_000), min_size=1, max_size=8),
    limit=st.integers(1, 50_000),
)
def test_rate_limit_stays_within_what_is_there(waiting: list[int], limit: int) -> None:
    start = {("t", p): 10 for p in range(len(waiting))}
    latest = {("t", p): 10 + w for p, w in enumerate(waiting)}
    end = rate_limit(start, latest, limit)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in latest)
    taken = sum(end[tp] - start[tp] for tp in latest)
    # At most the limit, give or take the one record a starved partition gets.
    assert taken <= limit + len(waiting)
    if sum(waiting) > 0:
        assert taken > 0
    assert offset_ranges(start, end) == [
        OffsetRange("t", p, start[("t", p)], end[("t", p)])
        for p in range(len(waiting))
        if end[("t", p)] > start[("t", p)]
    ]


def test_a_failed_demo_job_is_told_by_its_python_error() -> None:
    """What `moldau pipeline demo` says when its query fails: the error the data
    source raised, not Spark's page of Java and Python stacks around it."""
    from moldau.spark.pipeline import _last_error

    failure = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data "
        "source perform planPartitions: Traceback (most recent call last):\n"
        '  File "/x/source.py", line 243, in partitions\n'
        "    off.report_checkpoint_of_other_topics(\n"
        "moldau.spark.offsets.DataLossError: the checkpoint holds offsets of a, which this "
        "query does not read (subscribe=b)\n"
        " SQLSTATE: 38000 SQLSTATE: XXKST\n"
        "=== Streaming Query ===\n"
        "Identifier: [id = 1, runId = 2]\n"
    )
    assert _last_error(failure) == (
        "DataLossError: the checkpoint holds offsets of a, which this query does not read "
        "(subscribe=b)"
    )
    assert _last_error("[STREAM_FAILED] something else\nmore") == "[STREAM_FAILED] something else"


def test_bytes_per_offset_is_a_partitions_size_over_the_offsets_it_holds() -> None:
    extents = {
        ("t", 0): LogExtent(5000, 10, 20),
        ("t", 1): LogExtent(0, 0, 9),  # no byte (say, its segments just deleted)
        ("t", 2): LogExtent(800, 4, 4),  # no offset
    }
    assert bytes_per_offset(extents) == {("t", 0): 500.0}


def test_byte_limit_shares_the_bytes_in_proportion_and_never_starves() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0, ("t", 3): 0, ("t", 4): 7}
    latest = {("t", 0): 1000, ("t", 1): 3000, ("t", 2): 1, ("t", 3): 50, ("t", 4): 7}
    per_offset = {("t", 0): 100.0, ("t", 1): 10.0, ("t", 2): 5000.0, ("t", 4): 1.0}
    # 100,000 + 30,000 + 5,000 bytes waiting, a tenth of it allowed: each partition
    # reads a tenth of its records, t-2 its one record all the same; t-3 has no
    # estimate, so no byte bound; t-4 has nothing waiting.
    end = byte_limit(start, latest, per_offset, 13_500)
    assert end == {("t", 0): 100, ("t", 1): 300, ("t", 2): 1, ("t", 3): 50, ("t", 4): 7}
    assert byte_limit(start, latest, per_offset, 135_000) == latest


def test_with_both_bounds_the_smaller_wins_partition_by_partition() -> None:
    start = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 1000, ("t", 1): 1000}
    by_records = rate_limit(start, latest, 400)  # 200 each
    by_bytes = byte_limit(start, latest, {("t", 0): 1000.0, ("t", 1): 10.0}, 101_000)
    assert by_bytes == {("t", 0): 100, ("t", 1): 100}
    by_bytes = byte_limit(start, latest, {("t", 0): 1000.0, ("t", 1): 10.0}, 303_000)
    assert by_bytes == {("t", 0): 300, ("t", 1): 300}
    assert tighter(by_records, by_bytes) == {("t", 0): 200, ("t", 1): 200}
    assert tighter(by_records, {("t", 0): 50, ("t", 1): 900}) == {("t", 0): 50, ("t", 1): 200}


@given(
    waiting=st.lists(st.integers(0, 100_000), min_size=1, max_size=8),
    record_bytes=st.lists(st.integers(1, 100_000), min_size=8, max_size=8),
    limit=st.integers(1, 10**9),
)
def test_byte_limit_stays_under_the_cap_but_for_one_record_a_partition(
    waiting: list[int], record_bytes: list[int], limit: int
) -> None:
    start = {("t", p): 10 for p in range(len(waiting))}
    latest = {("t", p): 10 + w for p, w in enumerate(waiting)}
    per_offset = {("t", p): float(record_bytes[p]) for p in range(len(waiting))}
    end = byte_limit(start, latest, per_offset, limit)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in latest)
    read = {tp: end[tp] - start[tp] for tp in latest}
    # Every partition with records waiting reads one at least: a stream cannot stall.
    assert all(read[tp] >= 1 for tp in latest if latest[tp] > start[tp])
    estimated = sum(read[tp] * per_offset[tp] for tp in latest)
    assert estimated <= limit + sum(per_offset[tp] for tp in latest if read[tp] == 1) + 1e-6
