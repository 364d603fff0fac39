"""The Spark sink's record building (moldau.spark.record_build): the C helper and
the Python fallback build the same bytes, headers included, equal to
moldau.protocol.records' builder and read back as the rows they came from; the
partitioner is Kafka's."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from moldau.protocol.records import Compression, build_batch, iter_records, wrap_records
from moldau.spark import record_build
from moldau.spark.batch_writer import compression_of
from moldau.spark.options import WriteOptions
from moldau.spark.record_build import (
    BinaryColumn,
    HeaderColumn,
    build_py,
    murmur2_py,
    partitions_py,
)
from moldau.spark.write_path import batch_path_refusal
from moldau.spark.writer import producer_config

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


HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def random_headers(rng: random.Random, n: int) -> list[list[tuple[str, bytes | None]] | None]:
    """Rows of no headers (null or empty) and of several, values null or not."""
    return [
        None
        if rng.random() < 0.2
        else [
            (f"h{rng.randrange(300)}" * rng.choice((0, 1, 40)), v)
            for v in random_column(rng, rng.choice((0, 1, 3, 200)), nulls=True)
        ]
        for _ in range(n)
    ]


@pytest.mark.parametrize("with_headers", [False, True])
@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("with_keys", [False, True])
def test_records_equal_the_protocol_builders_and_read_back(
    nulls: bool, with_keys: bool, with_headers: bool
) -> None:
    rng = random.Random(int(nulls) * 4 + int(with_keys) * 2 + int(with_headers))
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
    headers = random_headers(rng, n) if with_headers else [None] * n
    # Sliced too: the list's offsets then point into the middle of its entries.
    header_col = (
        HeaderColumn.of(pa.array([[("pad", b"")], *headers], HEADERS).slice(1))
        if with_headers
        else None
    )
    rows = np.array(sorted(rng.sample(range(n), 150)), dtype=np.int64)
    expected = [(keys[r], values[r], headers[r] or []) for r in rows.tolist()]
    body = build_py(key_col, value_col, rows, header_col)
    if record_build.COMPILED:
        assert record_build.build(key_col, value_col, rows, header_col) == body
    batch = wrap_records(body, len(rows), base_timestamp=1234, max_timestamp=1234)
    assert batch == build_batch(expected, timestamp=1234)
    assert [
        (r.key, r.value, list(r.headers), r.offset, r.timestamp) for r in iter_records(batch)
    ] == [(k, v, h, i, 1234) for i, (k, v, h) in enumerate(expected)]


def test_a_header_with_a_null_key_is_refused() -> None:
    with pytest.raises(ValueError, match="header's key is null"):
        HeaderColumn.of(pa.array([[("k", b"v")], [(None, b"v")]], HEADERS))


def test_an_empty_selection_builds_nothing() -> None:
    column = BinaryColumn.of(pa.array([b"x"], pa.binary()))
    assert build_py(None, column, np.array([], dtype=np.int64)) == b""
    assert record_build.build(None, column, np.array([], dtype=np.int64)) == b""


def refusal(config: dict[str, str]) -> str | None:
    return batch_path_refusal(WriteOptions({"bootstrap.servers": "h:1", **config}, "t"))


def test_the_batch_path_refuses_what_it_does_not_serve() -> None:
    assert refusal({}) is None
    assert refusal({"acks": "all", "linger.ms": "5", "partitioner": "murmur2_random"}) is None
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert refusal({"compression.type": codec, "compression.level": "3"}) is None
        assert refusal({"compression.codec": codec.upper()}) is None
    assert refusal({"compression.type": "zstd", "compression.zstd.level": "7"}) is None
    assert "acks=1" in (refusal({"acks": "1"}) or "")
    assert "SASL_SSL" in (refusal({"security.protocol": "SASL_SSL"}) or "")
    assert "compression.codec=inherit" in (refusal({"compression.codec": "inherit"}) or "")
    assert "partitioner=consistent" in (refusal({"partitioner": "consistent"}) or "")
    assert "max.in.flight" in (refusal({"max.in.flight": "1"}) or "")


def test_the_codec_and_its_level() -> None:
    assert compression_of({}) == (Compression.NONE, None)
    assert compression_of({"compression.codec": "Snappy"}) == (Compression.SNAPPY, None)
    gzip = {"compression.type": "gzip"}
    assert compression_of({**gzip, "compression.level": "-1"}) == (Compression.GZIP, None)
    assert compression_of({**gzip, "compression.level": "4"}) == (Compression.GZIP, 4)
    # Kafka's name for the codec's level wins; another codec's is not this one's.
    both = {**gzip, "compression.level": "4", "compression.gzip.level": "9"}
    assert compression_of(both) == (Compression.GZIP, 9)
    assert compression_of({**gzip, "compression.zstd.level": "9"}) == (Compression.GZIP, None)
    # The client path's librdkafka knows only compression.level: Kafka's names become it.
    assert producer_config({**gzip, "compression.gzip.level": "9"})["compression.level"] == "9"
    assert "compression.level" not in producer_config({**gzip, "compression.lz4.level": "9"})
    assert "compression.lz4.level" not in producer_config({**gzip, "compression.lz4.level": "9"})
