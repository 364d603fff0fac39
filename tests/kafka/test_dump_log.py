"""Kafka's kafka-dump-log (kafka.tools.DumpLogSegments) reads Moldau's segment files as
Kafka's own: the same record batches, offset index and time index on disk, so an
operator's tools and habits for Kafka's log directories carry over."""

from __future__ import annotations

import os
import re
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.testing.process import BrokerProcess
from tests.kafka.tools import tool

pytestmark = pytest.mark.java

DUMP_LOG = "kafka.tools.DumpLogSegments"


def test_kafka_dump_log_reads_moldau_segments(moldau: BrokerProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": moldau.bootstrap})
    # Small index steps, so that 300 records of ~1 KiB make several index entries.
    configs = {"index.interval.bytes": "4096", "compression.type": "producer"}
    admin.create_topics([NewTopic(topic_name, 1, 1, config=configs)])[topic_name].result(30)
    sent = 0
    for codec in ("none", "gzip", "zstd"):
        # Values that do not compress, in batches of ~16 KiB: several batches a codec.
        p = Producer(
            {"bootstrap.servers": moldau.bootstrap, "compression.type": codec, "batch.size": 16384}
        )
        for i in range(100):
            p.produce(topic_name, key=f"k{sent + i}", value=f"{codec}-{i}-" + os.urandom(500).hex())
        assert p.flush(30) == 0
        sent += 100
    log_dir = moldau.data_dir / f"{topic_name}-0"
    # The broker writes without waiting for a flush; the tool reads the page cache.
    segment = log_dir / "00000000000000000000.log"
    deadline = time.monotonic() + 10
    while segment.stat().st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.1)

    dumped = tool(DUMP_LOG, "--files", str(segment), "--print-data-log", "--deep-iteration")
    offsets = [int(m) for m in re.findall(r"^\| offset: (\d+) ", dumped, re.M)]
    assert offsets == list(range(sent)), dumped[-2000:]
    assert "isvalid: false" not in dumped and "crc" in dumped
    codecs = set(re.findall(r"compresscodec: (\w+)", dumped))
    assert codecs == {"none", "gzip", "zstd"}, codecs
    assert "payload: zstd-99-" in dumped and "key: k0 " in dumped

    index = tool(DUMP_LOG, "--files", str(log_dir / "00000000000000000000.index"))
    entries = [(int(o), int(p)) for o, p in re.findall(r"offset: (\d+) position: (\d+)", index)]
    assert len(entries) >= 10, index
    assert entries == sorted(entries) and all(0 < o < sent for o, _ in entries)
    assert "Mismatches" not in index and "not found" not in index.lower(), index

    times = tool(DUMP_LOG, "--files", str(log_dir / "00000000000000000000.timeindex"))
    stamps = [int(t) for t in re.findall(r"timestamp: (\d+) offset:", times)]
    assert stamps and stamps == sorted(stamps), times
