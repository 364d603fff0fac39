"""The Spark sink's record building (moldau.spark.record_build): the C helper and
the Python fallback build the same bytes, equal to moldau.protocol.records'
builder and read back as the rows they came from; the partitioner is Kafka's."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from moldau.protocol.records import build_batch, iter_records, wrap_records
from moldau.spark import record_build
from moldau.spark.options import WriteOptions
from moldau.spark.record_build import BinaryColumn, build_py, murmur2_py, partitions_py
from moldau.spark.write_path import batch_path_refusal
from moldau.spark.writer import WriteColumns

needs_c = pytest.mark.skipif(not record_build.COMPILED, reason="the C helper is not built")

#: Kafka's own murmur2 test vectors (UtilsTest), as signed 32-bit values.
KAFKA_MURMUR2 = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


def random_column(rng: random.Random, n: int, nulls: bool) -> list[bytes | None]:
    return [
        None if nulls and rng.random() < 0.2 else rng.randbytes(rng.choice((0, 1, 5, 63, 64, 300)))
        for _ in range(n)
    ]


def test_murmur2_is_kafkas() -> None:
    for text, signed in KAFKA_MURMUR2.items():
        assert murmur2_py(text.encode()) == signed & 0xFFFFFFFF


@needs_c
def test_c_partitions_equal_pythons_and_nulls_have_none() -> None:
    rng = random.Random(7)
    keys = random_column(rng, 500, nulls=True) + [k.encode() for k in KAFKA_MURMUR2]
    column = BinaryColumn.of(pa.array(keys, pa.binary()))
    for partitions in (1, 3, 7, 1000):
        c = record_build.key_partitions(column, len(keys), partitions)
        assert c.tolist() == partitions_py(column, len(keys), partitions).tolist()
        assert all((p == -1) == (k is None) for p, k in zip(c.tolist(), keys, strict=True))
    expected = [(s & 0x7FFFFFFF) % 7 for s in KAFKA_MURMUR2.values()]
    assert record_build.key_partitions(column, len(keys), 7).tolist()[500:] == expected


@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("with_keys", [False, True])
def test_records_equal_the_protocol_builders_and_read_back(nulls: bool, with_keys: bool) -> None:
    rng = random.Random(int(nulls) * 2 + int(with_keys))
    n = 400
    keys = random_column(rng, n, nulls) if with_keys else [None] * n
    values = random_column(rng, n, nulls)
    # A sliced array (an Arrow batch Spark hands over may start inside its buffers)
    # and a string column, as Spark's string keys come.
    key_array = pa.array([b"pad", *keys], pa.binary()).slice(1) if with_keys else None
    value_array = pa.array([None if v is None else v.hex() for v in values], pa.string())
    values = [None if v is None else v.hex().encode() for v in values]
    key_col = BinaryColumn.of(key_array) if key_array is not None else None
    value_col = BinaryColumn.of(value_array)
    rows = np.array(sorted(rng.sample(range(n), 150)), dtype=np.int64)
    expected_pairs = [(keys[r], values[r]) for r in rows.tolist()]
    body = build_py(key_col, value_col, rows)
    if record_build.COMPILED:
        assert record_build.build(key_col, value_col, rows) == body
    batch = wrap_records(body, len(rows), base_timestamp=1234, max_timestamp=1234)
    assert batch == build_batch(expected_pairs, timestamp=1234)
    assert [(r.key, r.value, r.offset, r.timestamp) for r in iter_records(batch)] == [
        (k, v, i, 1234) for i, (k, v) in enumerate(expected_pairs)
    ]


def test_an_empty_selection_builds_nothing() -> None:
    column = BinaryColumn.of(pa.array([b"x"], pa.binary()))
    assert build_py(None, column, np.array([], dtype=np.int64)) == b""
    assert record_build.build(None, column, np.array([], dtype=np.int64)) == b""


def refusal(config: dict[str, str], **columns: bool) -> str | None:
    cols = WriteColumns(key=True, topic=False, partition=False, headers=False)
    cols = WriteColumns(**{**cols.__dict__, **columns})
    return batch_path_refusal(WriteOptions({"bootstrap.servers": "h:1", **config}, "t"), cols)


def test_the_batch_path_refuses_what_it_does_not_serve() -> None:
    assert refusal({}) is None
    assert refusal({"acks": "all", "linger.ms": "5", "partitioner": "murmur2_random"}) is None
    assert "acks=1" in (refusal({"acks": "1"}) or "")
    assert "SASL_SSL" in (refusal({"security.protocol": "SASL_SSL"}) or "")
    assert "compression.type=lz4" in (refusal({"compression.type": "lz4"}) or "")
    assert "partitioner=consistent" in (refusal({"partitioner": "consistent"}) or "")
    assert "max.in.flight" in (refusal({"max.in.flight": "1"}) or "")
    assert "headers column" in (refusal({}, headers=True) or "")
    no_topic = WriteOptions({"bootstrap.servers": "h:1"})
    cols = WriteColumns(key=False, topic=True, partition=False, headers=False)
    assert "topic column" in (batch_path_refusal(no_topic, cols) or "")
