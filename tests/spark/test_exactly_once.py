"""Exactly-once streaming writes (`exactlyOnce=true`): a micro-batch Spark runs
again, a task retried, or a publish that died half-way, writes each row once."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from moldau.spark.exactly_once import BATCH_HEADER, BatchPublisher, OutRow
from moldau.spark.writer import producer_config
from tests.integration.clients import create_topic
from tests.spark.test_read import produce
from tests.spark.test_write import consume_all

pytestmark = pytest.mark.spark


def publisher(bootstrap: str, query_id: str, markers: str) -> BatchPublisher:
    config = {"bootstrap.servers": bootstrap}
    p = BatchPublisher(config, producer_config(config), query_id, markers)
    p.ensure_marker_topic()
    return p


class DiesAfter(BatchPublisher):
    """A publisher whose process dies after writing `n` records of a batch."""

    def __init__(self, n: int, *args: Any) -> None:
        super().__init__(*args)
        self.n = n

    def _send(self, rows: Any, header: str | None = None) -> int:
        rows = list(rows)
        if header is None:  # a marker
            return super()._send(rows)
        super()._send(rows[: self.n], header)
        raise SystemExit("died while publishing")


def test_a_batch_is_published_once_even_if_publishing_died_half_way(
    bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name, partitions=2)
    markers, query = f"{topic_name}-markers", str(uuid.uuid4())
    batch0: list[OutRow] = [(topic_name, -1, f"k{i}", b"v", ()) for i in range(10)]
    # Two equal rows are two records; one with a header and an explicit partition.
    batch1: list[OutRow] = [
        (topic_name, -1, "same", b"x", ()),
        (topic_name, -1, "same", b"x", ()),
        (topic_name, 1, "h", None, (("a", b"1"),)),
        *[(topic_name, -1, f"n{i}", b"w", ()) for i in range(7)],
    ]
    first = publisher(bootstrap, query, markers)
    assert first.publish(0, batch0) == 10
    assert first.publish(0, batch0) == 0  # replayed: already there

    config = {"bootstrap.servers": bootstrap}
    dying = DiesAfter(4, config, producer_config(config), query, markers)
    with pytest.raises(SystemExit):
        dying.publish(1, batch1)
    assert publisher(bootstrap, query, markers).publish(1, batch1) == 6

    got = consume_all(bootstrap, topic_name, 2, 20)
    rows = Counter((k, v, tuple(h for h in hs if h[0] != BATCH_HEADER)) for _, k, v, hs in got)
    assert rows == Counter(
        [(b"k%d" % i, b"v", ()) for i in range(10)]
        + [(b"same", b"x", ())] * 2
        + [(b"h", None, (("a", b"1"),))]
        + [(b"n%d" % i, b"w", ()) for i in range(7)]
    )
    assert {p for p, k, _, _ in got if k == b"h"} == {1}
    assert all(
        (BATCH_HEADER, f"{query}:{1 if k[0:1] in b'shn' else 0}".encode()) in hs
        for _, k, _, hs in got
    )


def copy_stream(
    spark: Any, bootstrap: str, source: str, sink: str, checkpoint: str, **extra: str
) -> None:
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    @udf("binary")
    def fails_once(value):  # type: ignore[no-untyped-def]  (hints would make it a pandas UDF)
        # The first attempt of every batch's first task fails: Spark retries it.
        context = TaskContext.get()
        if context is not None and context.partitionId() == 0 and context.attemptNumber() == 0:
            raise RuntimeError("injected task failure")
        return value

    df = (
        spark.readStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
    )
    writer = (
        df.select("key", fails_once("value").alias("value"))
        .writeStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
    )
    for k, v in extra.items():
        writer = writer.option(k, v)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()


def forget_last_commit(checkpoint: str) -> None:
    """As if the query died after writing its last batch but before committing it."""
    commits = Path(checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink()


@pytest.mark.parametrize("exactly_once", [True, False])
def test_replayed_batches_and_retried_tasks(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path, exactly_once: bool
) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=1)
    produce(bootstrap, source, [(i % 2, b"k%d" % i, b"v%d" % i) for i in range(100)])
    checkpoint = str(tmp_path / "checkpoint")
    options = (
        {"exactlyOnce": "true", "exactlyOnce.markerTopic": f"{topic_name}-m"}
        if exactly_once
        else {}
    )

    copy_stream(spark, bootstrap, source, sink, checkpoint, **options)
    forget_last_commit(checkpoint)
    copy_stream(spark, bootstrap, source, sink, checkpoint, **options)

    expected = Counter((b"k%d" % i, b"v%d" % i) for i in range(100))
    if exactly_once:
        got = Counter((k, v) for _, k, v, _ in consume_all(bootstrap, sink, 1, 100))
        assert got == expected
    else:
        # At-least-once: the replayed batch (the last 20 of batches of 40, 40, 20)
        # is written twice. The retried tasks failed before writing anything.
        got = Counter((k, v) for _, k, v, _ in consume_all(bootstrap, sink, 1, 120))
        assert set(got) == set(expected)
        assert sorted(got.values()) == [1] * 80 + [2] * 20
