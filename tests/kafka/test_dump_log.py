"""Kafka's kafka-dump-log (kafka.tools.DumpLogSegments) reads Moldau's segment files as
Kafka's own: the same record batches, offset index and time index on disk, so an
operator's tools and habits for Kafka's log directories carry over."""

from __future__ import annotations

import contextlib
import io
import os
import re
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.cli.main import main
from moldau.testing import kafka_java
from moldau.testing.process import BrokerProcess, wait_for
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


# -- moldau dump-log against Kafka's tool, on the same files ---------------------------


def _moldau_dump(*args: str) -> tuple[int, str, str]:
    """`moldau dump-log ARGS` (in this process: a tool's start costs more than its
    work here): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["dump-log", *args])
    return code, out.getvalue(), err.getvalue()


def _both(*args: str) -> tuple[str, str]:
    """Kafka's kafka-dump-log and `moldau dump-log` on the same arguments, both
    succeeding: their stdouts."""
    code, ours, err = _moldau_dump(*args)
    assert code == 0, err
    assert "Traceback" not in err
    return tool(DUMP_LOG, *args), ours


def _same_lines(kafka: str, ours: str) -> None:
    assert ours.splitlines() == kafka.splitlines()
    assert ours.count("\n") > 2


def _end_offset(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "dump-log-watermarks"})
    try:
        return int(c.get_watermark_offsets(CTP(topic, 0), timeout=10)[1])
    finally:
        c.close()


def _sizes_settled(paths: list[Path]) -> None:
    """The broker writes markers and commits after answering; wait until the files
    stop growing, so that both tools read the same bytes."""
    last: list[int] = []

    def settled() -> bool:
        nonlocal last
        sizes = [p.stat().st_size if p.exists() else -1 for p in paths]
        done = sizes == last
        last = sizes
        return done

    assert wait_for(settled, timeout=10, interval=0.3)


@pytest.fixture(scope="module")
def dumped_topic(moldau: BrokerProcess) -> tuple[str, Path, str]:
    """A topic holding every kind of batch the tools print differently: each codec,
    keys and null keys, null values, headers, a committed and an aborted transaction
    with their markers; and a group's committed offsets. (topic, log dir, group)"""
    topic, group = f"dump-{uuid.uuid4().hex[:8]}", f"dump-group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": moldau.bootstrap})
    configs = {"index.interval.bytes": "150", "compression.type": "producer"}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer(
            {"bootstrap.servers": moldau.bootstrap, "compression.type": codec, "linger.ms": 5}
        )
        for i in range(6):
            p.produce(
                topic,
                key=None if i == 0 else f"k{i}-é",
                value=None if i == 1 else f"{codec}-{i}-" + "v" * 40,
                headers=[("h1", b"x"), ("h2", None)] if i == 2 else None,
            )
        assert p.flush(30) == 0
    txn = Producer({"bootstrap.servers": moldau.bootstrap, "transactional.id": f"{topic}-tx"})
    txn.init_transactions(30)
    for commit in (True, False):
        txn.begin_transaction()
        txn.produce(topic, key="tk", value="committed" if commit else "aborted")
        assert txn.flush(30) == 0
        txn.commit_transaction(30) if commit else txn.abort_transaction(30)
    c = Consumer(
        {"bootstrap.servers": moldau.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    c.assign([CTP(topic, 0, 3)])
    c.commit(offsets=[CTP(topic, 0, 7)], asynchronous=False)
    c.close()
    # 30 records, 2 transactional ones and 2 markers.
    assert wait_for(lambda: _end_offset(moldau.bootstrap, topic) == 34, timeout=10)
    log_dir = moldau.data_dir / f"{topic}-0"
    _sizes_settled([log_dir / "00000000000000000000.log"])
    return topic, log_dir, group


def test_moldau_dump_log_prints_what_kafkas_prints_for_batches_records_and_indexes(
    dumped_topic: tuple[str, Path, str],
) -> None:
    _, log_dir, _ = dumped_topic
    segment = str(log_dir / "00000000000000000000.log")
    index = str(log_dir / "00000000000000000000.index")
    time_index = str(log_dir / "00000000000000000000.timeindex")
    # One run of Kafka's tool for all three files (a JVM's start is most of its cost).
    kafka, ours = _both("--files", f"{segment},{index},{time_index}", "--print-data-log")
    _same_lines(kafka, ours)
    # What the comparison covers: each codec, a marker, headers, null keys and values,
    # and index entries checked against the log (a mismatch would go to stderr).
    assert set(re.findall(r"compresscodec: (\w+)", ours)) >= {"none", "gzip", "snappy", "zstd"}
    assert "endTxnMarker: ABORT coordinatorEpoch:" in ours
    assert "endTxnMarker: COMMIT coordinatorEpoch:" in ours
    assert "headerKeys: [h1,h2] key: k2-é payload: " in ours
    assert re.search(r"keySize: -1 valueSize: 47 .* payload: gzip-0-v", ours)
    assert re.search(r"valueSize: -1 sequence: -1 headerKeys: \[\] key: k1-é$", ours, re.M)
    assert len(re.findall(r"^offset: \d+ position: \d+$", ours, re.M)) >= 5
    assert len(re.findall(r"^timestamp: \d+ offset: \d+$", ours, re.M)) >= 1
    _same_lines(*_both("--files", f"{index},{time_index}", "--index-sanity-check"))


def _data_logs(data_dir: Path, internal_topic: str, needle: bytes) -> list[Path]:
    return [
        p
        for p in data_dir.glob(f"{internal_topic}-*/00000000000000000000.log")
        if needle in p.read_bytes()
    ]


def test_moldau_dump_log_decodes_the_offsets_and_transaction_logs_as_kafkas(
    moldau: BrokerProcess, dumped_topic: tuple[str, Path, str]
) -> None:
    topic, _, group = dumped_topic
    [offsets_log] = _data_logs(moldau.data_dir, "__consumer_offsets", group.encode())
    [txn_log] = _data_logs(moldau.data_dir, "__transaction_state", f"{topic}-tx".encode())
    _sizes_settled([offsets_log, txn_log])
    kafka, ours = _both("--files", str(offsets_log), "--offsets-decoder")
    _same_lines(kafka, ours)
    key = f'key: {{"type":"1","data":{{"group":"{group}","topic":"{topic}","partition":0}}}}'
    assert f'{key} payload: {{"version":"3","data":{{"offset":7,' in ours
    kafka, ours = _both("--files", str(txn_log), "--transaction-log-decoder")
    _same_lines(kafka, ours)
    assert f'"data":{{"transactionalId":"{topic}-tx"}}}} payload: {{"version":"0"' in ours


def test_moldau_dump_log_reports_a_corrupt_segment_as_kafkas_does(
    dumped_topic: tuple[str, Path, str], tmp_path: Path
) -> None:
    _, log_dir, _ = dumped_topic
    data = (log_dir / "00000000000000000000.log").read_bytes()
    batches = [int(p) for p in re.findall(r"position: (\d+) ", _moldau_dump(
        "--files", str(log_dir / "00000000000000000000.log"))[1])]  # fmt: skip
    second, third = batches[1], batches[2]
    flipped = bytearray(data)
    for i in range(second + 70, second + 90):  # inside the gzip batch's records
        flipped[i] ^= 0xFF
    bad_size = bytearray(data)
    bad_size[third + 8 : third + 12] = (5).to_bytes(4, "big")
    copies = {
        "00000000000000000000.log": bytes(flipped),
        "00000000000000000001.log": data[: third + 40],  # torn in the third batch
        "00000000000000000002.log": bytes(bad_size),
    }
    for name, content in copies.items():
        (tmp_path / name).write_bytes(content)
    flipped_path, torn_path, bad_size_path = (str(tmp_path / name) for name in copies)
    runs = [
        # CRCs fail but batches are walked; the torn tail is counted; then a size no
        # batch can have is Kafka's CorruptRecordException: exit 1 after the rest.
        ["--files", f"{flipped_path},{torn_path},{bad_size_path}"],
        # The records of the flipped batch do not decompress: exit 1 after what came before.
        ["--files", flipped_path, "--deep-iteration"],
    ]
    outcomes = []
    for args in runs:
        java = kafka_java.run(DUMP_LOG, *args)
        code, ours, err = _moldau_dump(*args)
        assert (code, ours.splitlines()) == (java.returncode, java.stdout.splitlines()), err
        assert "Traceback" not in err
        if code != 0:
            assert err.count("\n") == 1, err  # one line saying why
        outcomes.append((code, ours, err))
    (shallow_code, shallow, size_err), (deep_code, _, _) = outcomes
    assert "isvalid: false" in shallow
    assert "Found 40 invalid bytes at the end of 00000000000000000001.log" in shallow
    assert f"Dumping {bad_size_path}" in shallow
    assert shallow_code == 1 and deep_code == 1
    assert (
        "Found record size 5 smaller than minimum record overhead (14) in file "
        f"{bad_size_path}." in size_err
    )


def test_moldau_dump_log_reads_a_segment_the_broker_is_appending_to(
    moldau: BrokerProcess, topic_name: str
) -> None:
    admin = AdminClient({"bootstrap.servers": moldau.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    segment = moldau.data_dir / f"{topic_name}-0" / "00000000000000000000.log"
    stop = threading.Event()

    def write() -> None:
        p = Producer({"bootstrap.servers": moldau.bootstrap, "linger.ms": 1})
        while not stop.is_set():
            for _ in range(20):
                p.produce(topic_name, value=os.urandom(300))
            p.poll(0.01)
        p.flush(30)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert wait_for(lambda: segment.exists() and segment.stat().st_size > 50_000)
        for _ in range(3):
            code, out, err = _moldau_dump("--files", str(segment), "--deep-iteration")
            assert code == 0 and "Traceback" not in err, err
            offsets = [int(o) for o in re.findall(r"^\| offset: (\d+) ", out, re.M)]
            # Every whole batch there when the tool looked, in order, none skipped.
            assert offsets == list(range(len(offsets))) and len(offsets) > 100
            assert "Non-consecutive" not in err
    finally:
        stop.set()
        writer.join(30)
    # The broker went on appending, unhindered: the tool took nothing from it.
    assert _end_offset(moldau.bootstrap, topic_name) >= len(offsets)
