"""The Spark source's bulk decoding of Fetch answers into Arrow
(moldau.spark.arrow_records): random logs of v2 batches, read with the compiled
helper and with the Python one, must give the rows a per-record decoder gives
under Kafka's consumer rules (no Spark, no broker)."""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moldau.protocol.errors import CorruptMessageError
from moldau.protocol.records import (
    OFFSET_MAGIC,
    Compression,
    build_batch,
    build_end_txn_marker,
    iter_records,
    rebuild_batch,
)
from moldau.spark import record_walk
from moldau.spark.arrow_records import UnsupportedRecords, decode
from moldau.spark.fetch_reader import client_path_reason

WALKS = [False, pytest.param(True, id="compiled")]
if not record_walk.COMPILED:
    WALKS[1] = pytest.param(
        True, id="compiled", marks=pytest.mark.skip("moldau.spark._record_walk is not built")
    )

UTC = datetime.UTC


@dataclass
class Log:
    data: bytes = b""
    next_offset: int = 0
    #: The rows a consumer sees: (offset, key, value, timestamp ms, type, headers).
    uncommitted: list[tuple[Any, ...]] = field(default_factory=list)
    committed: list[tuple[Any, ...]] = field(default_factory=list)
    aborted: list[tuple[int, int]] = field(default_factory=list)


def _rows(batch: bytes, log_append: bool, max_ts: int) -> list[tuple[Any, ...]]:
    return [
        (
            r.offset,
            r.key,
            r.value,
            max_ts if log_append else r.timestamp,
            1 if log_append else 0,
            [{"key": k, "value": v} for k, v in r.headers] or None,
        )
        for r in iter_records(batch)
    ]


header = st.tuples(st.sampled_from(["a", "b", "é"]), st.none() | st.binary(max_size=5))
record = st.tuples(
    st.none() | st.binary(max_size=12),
    st.none() | st.binary(max_size=40),
    st.lists(header, max_size=3),
)
data_batch = st.fixed_dictionaries(
    {
        "records": st.lists(record, min_size=1, max_size=8),
        "codec": st.sampled_from(list(Compression)),
        "log_append": st.booleans(),
        # None: not transactional; else (producer id, committed)
        "txn": st.none() | st.tuples(st.integers(1, 3), st.booleans()),
        "compact": st.booleans(),
    }
)


def build_log(specs: list[dict[str, Any]]) -> Log:
    log = Log()
    open_txns: dict[int, tuple[bool, list[tuple[Any, ...]]]] = {}
    for spec in specs:
        recs = spec["records"]
        txn = spec["txn"]
        stamps = [1_700_000_000_000 + 7 * i - 3 * (i % 2) for i in range(len(recs))]
        batch = build_batch(
            recs,
            base_offset=log.next_offset,
            timestamps=stamps,
            compression=spec["codec"],
            log_append_time=spec["log_append"],
            producer_id=txn[0] if txn else -1,
            producer_epoch=0 if txn else -1,
            base_sequence=0 if txn else -1,
            transactional=txn is not None,
        )
        if spec["compact"] and len(recs) > 1:
            kept = [r for i, r in enumerate(iter_records(batch)) if i % 2 == 0]
            batch = rebuild_batch(batch, kept)
        max_ts = max(stamps) + 5  # LogAppendTime: the broker's clock, not the records'
        if spec["log_append"]:
            batch = batch[:35] + struct.pack(">q", max_ts) + batch[43:]
        rows = _rows(batch, spec["log_append"], max_ts)
        log.data += batch
        log.next_offset += len(recs)
        log.uncommitted += rows
        if txn is None:
            log.committed += rows
            continue
        pid, commit = txn
        if pid not in open_txns:
            open_txns[pid] = (commit, [])
            if not commit:
                log.aborted.append((pid, rows[0][0]))
        open_txns[pid][1].extend(rows)
        if len(open_txns[pid][1]) > 6:  # end it: a marker batch
            commit, held = open_txns.pop(pid)
            _end(log, pid, commit, held)
    # Transactions still open would end the answer at the last stable offset: end them.
    for pid, (commit, held) in sorted(open_txns.items()):
        _end(log, pid, commit, held)
    return log


def _end(log: Log, pid: int, commit: bool, held: list[tuple[Any, ...]]) -> None:
    log.data += _marker(pid, commit, log.next_offset)
    log.next_offset += 1
    if commit:
        log.committed += held


def _marker(pid: int, commit: bool, offset: int) -> bytes:
    marker = bytearray(build_end_txn_marker(pid, 0, 0, commit, 1, 0))
    struct.pack_into(">q", marker, 0, offset)
    return bytes(marker)


def columns(rows: list[tuple[Any, ...]], headers: bool) -> list[dict[str, Any]]:
    out = []
    for offset, key, value, ts, ts_type, hs in rows:
        row = {
            "key": key,
            "value": value,
            "topic": "t",
            "partition": 3,
            "offset": offset,
            "timestamp": datetime.datetime.fromtimestamp(ts / 1000, UTC),
            "timestampType": ts_type,
        }
        if headers:
            row["headers"] = hs
        out.append(row)
    return out


def as_rows(decoded: Any) -> list[dict[str, Any]]:
    if decoded.batch is None:
        return []
    rows: list[dict[str, Any]] = decoded.batch.to_pylist()
    for row in rows:
        row["timestamp"] = row["timestamp"].astimezone(UTC)
    return rows


@pytest.mark.parametrize("compiled", WALKS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(data_batch, min_size=1, max_size=8),
    cut=st.integers(0, 30),
    window=st.tuples(st.integers(0, 70), st.integers(0, 70)),
    headers=st.booleans(),
)
def test_rows_as_a_consumer_sees_them(
    compiled: bool,
    specs: list[dict[str, Any]],
    cut: int,
    window: tuple[int, int],
    headers: bool,
) -> None:
    log = build_log(specs)
    start, end = min(window), max(window)
    # The last stable offset: a transaction still open ends what read_committed sees.
    for committed, rows, aborted in (
        (False, log.uncommitted, None),
        (True, log.committed, log.aborted),
    ):
        data = log.data
        if cut:
            data = data[: max(len(data) - cut, 0)]  # a batch cut short by the byte limit
        whole = _whole_batches_end(data)
        # A transaction's records count once its marker is written: order them by offset.
        expected = sorted(
            (r for r in rows if start <= r[0] < end and r[0] < whole), key=lambda r: r[0]
        )
        got = decode(
            data, "t", 3, start, end, include_headers=headers, aborted=aborted, compiled=compiled
        )
        assert as_rows(got) == columns(expected, headers), f"read_committed={committed}"
        assert got.next_offset == max(start, whole)


def _whole_batches_end(data: bytes) -> int:
    """The offset after the last whole batch of `data`."""
    pos, end = 0, 0
    while len(data) - pos >= 61:
        base, length = struct.unpack_from(">qi", data, pos)
        if pos + 12 + length > len(data):
            break
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        end = base + delta + 1
        pos += 12 + length
    return end


@pytest.mark.parametrize("compiled", WALKS)
def test_a_batch_larger_than_the_answer_stalls(compiled: bool) -> None:
    batch = build_batch([(b"k", b"v" * 100)], base_offset=5)
    got = decode(batch[:80], "t", 0, 5, 10, include_headers=False, compiled=compiled)
    assert (got.batch, got.next_offset, got.stalled) == (None, 5, True)


@pytest.mark.parametrize("compiled", WALKS)
def test_records_before_the_fetch_offset_are_left_out(compiled: bool) -> None:
    # The broker answers from the start of the batch holding the fetch offset.
    batch = build_batch([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], base_offset=10)
    got = decode(batch, "t", 0, 11, 12, include_headers=False, compiled=compiled)
    assert [r["value"] for r in as_rows(got)] == [b"2"]
    assert got.next_offset == 13


@pytest.mark.parametrize("compiled", WALKS)
def test_a_corrupt_record_is_an_error(compiled: bool) -> None:
    batch = bytearray(build_batch([(b"key", b"value")]))
    batch[61] = 0x7E  # the record's length: past the batch's end
    with pytest.raises(CorruptMessageError):
        decode(bytes(batch), "t", 0, 0, 1, include_headers=False, compiled=compiled)


def test_old_message_formats_are_left_to_the_client_path() -> None:
    batch = bytearray(build_batch([(b"k", b"v")]))
    batch[OFFSET_MAGIC] = 1
    with pytest.raises(UnsupportedRecords):
        decode(bytes(batch), "t", 0, 0, 1, include_headers=False)


@pytest.mark.parametrize("compiled", WALKS)
def test_header_keys_that_are_not_utf8_are_shown_with_replacement_characters(
    compiled: bool,
) -> None:
    batch = bytearray(build_batch([(b"k", b"v", [("ab", b"x")])]))
    at = batch.index(b"ab\x02x")  # the key, the value's length, the value
    batch[at] = 0xFF
    # build_batch's CRC is not checked by readers here (as librdkafka's default).
    got = decode(bytes(batch), "t", 0, 0, 1, include_headers=True, compiled=compiled)
    assert as_rows(got)[0]["headers"] == [{"key": "\ufffdb", "value": b"x"}]


def test_the_two_walks_agree_on_where_fields_lie() -> None:
    if not record_walk.COMPILED:
        pytest.skip("moldau.spark._record_walk is not built")
    assert record_walk.walk_c is not None
    batch = build_batch(
        [(b"k" * 200, None, [("h", b"v" * 300), ("i", None)]), (None, b"")] * 50,
        compression=Compression.NONE,
    )
    body = batch[61:]
    a, b = record_walk.walk_py(body, 100), record_walk.walk_c(body, 100)
    for name in a.__slots__:  # type: ignore[attr-defined]
        assert (getattr(a, name) == getattr(b, name)).all(), name


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({}, None),
        ({"security.protocol": "PLAINTEXT", "client.id": "x"}, None),
        ({"security.protocol": "SASL_SSL"}, "security.protocol SASL_SSL"),
        ({"security.protocol": "ssl"}, "security.protocol SSL"),
        ({"sasl.mechanism": "PLAIN"}, "the setting sasl.mechanism"),
        ({"ssl.ca.location": "/ca.pem"}, "the setting ssl.ca.location"),
        ({"bootstrap.servers": "no-port"}, "bootstrap.servers it cannot parse"),
    ],
)
def test_settings_the_fetching_path_leaves_to_the_client_path(
    settings: dict[str, str], reason: str | None
) -> None:
    assert client_path_reason({"bootstrap.servers": "h:1,[::1]:2", **settings}) == reason
