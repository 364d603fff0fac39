"""Kafka's system-test clients, kafka-verifiable-producer and kafka-verifiable-consumer,
through a kill -9 of a partition leader on a three-broker cluster of its own (RF 3,
min.insync.replicas=2, acks=all), read from the JSON events they print; then the killed
broker back, and kafka-leader-election giving leadership back to the preferred replicas."""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from moldau.testing.cluster import Cluster
from moldau.testing.kafka_java import popen
from moldau.testing.process import wait_for
from tests.cluster.conftest import make_cluster  # noqa: F401 (a fixture)
from tests.kafka.tools import (
    LEADER_ELECTION,
    TOPICS,
    VERIFIABLE_CONSUMER,
    VERIFIABLE_PRODUCER,
    describe_topic,
    tool,
)

pytestmark = pytest.mark.java

RECORDS = 4000
TOPIC = "verifiable"


def _events(path: Path) -> list[dict[str, Any]]:
    """The JSON events a verifiable client printed so far (a torn last line skipped)."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def _named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["name"] == name]


@pytest.mark.timeout(300)
def test_every_acknowledged_record_is_consumed_through_a_leader_kill(
    make_cluster: Callable[..., Cluster],  # noqa: F811
    kafka_java: Path,
    tmp_path: Path,
) -> None:
    cluster = make_cluster(3, **{"auto.leader.rebalance.enable": "false"})
    b = cluster.bootstrap
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", TOPIC, "--partitions", "3",
         "--replication-factor", "3", "--config", "min.insync.replicas=2")  # fmt: skip
    before = describe_topic(b, TOPIC)
    assert all(p.leader == p.replicas[0] for p in before)

    # Retries through the failover, and idempotence, so every record gets acknowledged
    # exactly once (the tool's own default is retries=0).
    producer_config = tmp_path / "producer.properties"
    producer_config.write_text(
        "enable.idempotence=true\nretries=2147483647\ndelivery.timeout.ms=90000\n"
        "request.timeout.ms=10000\nlinger.ms=5\n"
    )
    produced, consumed = tmp_path / "producer.jsonl", tmp_path / "consumer.jsonl"
    with produced.open("w") as p_out, consumed.open("w") as c_out:
        consumer = popen(
            VERIFIABLE_CONSUMER, "--bootstrap-server", b, "--topic", TOPIC,
            "--group-id", "verifiable-group", "--verbose", "--reset-policy", "earliest",
            stdout=c_out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        producer = popen(
            VERIFIABLE_PRODUCER, "--bootstrap-server", b, "--topic", TOPIC,
            # Five seconds of records: the kill comes a third of the way in and the
            # failover (a 2 s ZooKeeper session) falls inside the run.
            "--max-messages", str(RECORDS), "--throughput", "800", "--acks", "-1",
            # Keyed, so every partition gets records all along (keyless records stick
            # to a partition per 16 KiB batch, and these are a few bytes each).
            "--repeating-keys", "30",
            "--producer.config", str(producer_config),
            stdout=p_out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            # Mid-run: kill -9 the leader of partition 0 once a third is acknowledged.
            assert wait_for(
                lambda: len(_named(_events(produced), "producer_send_success")) >= RECORDS // 3,
                90, 0.2,
            ), produced.read_text()[-3000:]  # fmt: skip
            victim = before[0].leader
            assert victim is not None
            cluster.kill(victim)
            assert producer.wait(150) == 0, produced.read_text()[-3000:]

            events = _events(produced)
            acked = {
                (e["partition"], e["offset"]): e["value"]
                for e in _named(events, "producer_send_success")
            }
            # One key, one partition.
            assert all(
                len({e["partition"] for e in _named(events, "producer_send_success")
                     if e["key"] == k}) == 1
                for k in {e["key"] for e in _named(events, "producer_send_success")}
            )  # fmt: skip
            (summary,) = _named(events, "tool_data")
            assert (summary["sent"], summary["acked"]) == (RECORDS, RECORDS), summary
            assert _named(events, "producer_send_error") == []
            # Each record once: no value at two offsets.
            assert sorted(int(v) for v in acked.values()) == list(range(RECORDS))
            assert {p for p, _ in acked} == {0, 1, 2}

            def consumed_offsets() -> set[tuple[int, int]]:
                return {
                    (e["partition"], e["offset"]) for e in _named(_events(consumed), "record_data")
                }

            assert wait_for(lambda: set(acked) <= consumed_offsets(), 90, 0.5), (
                f"{len(set(acked) - consumed_offsets())} acknowledged records not consumed"
            )
        finally:
            for proc in (producer, consumer):
                if proc.poll() is None:
                    proc.terminate()
            consumer.wait(30)
            producer.wait(30)

    events = _events(consumed)
    assert events[0]["name"] == "startup_complete"
    assert events[-1]["name"] == "shutdown_complete"
    records = _named(events, "record_data")
    # Nothing read that was not sent, and the same record wherever an offset was read
    # again after a rebalance.
    for r in records:
        assert r["topic"] == TOPIC
        assert acked.get((r["partition"], r["offset"])) == r["value"], r
    # The per-poll summaries ("records_consumed") cover every acknowledged offset too.
    ranges: dict[int, list[tuple[int, int]]] = defaultdict(list)
    summaries = _named(events, "records_consumed")
    for s in summaries:
        for part in s["partitions"]:
            ranges[part["partition"]].append((part["minOffset"], part["maxOffset"]))
    assert sum(s["count"] for s in summaries) == len(records)
    for partition, offset in acked:
        assert any(lo <= offset <= hi for lo, hi in ranges[partition]), (partition, offset)
    assert any(e["success"] for e in _named(events, "offsets_committed"))

    # Every partition has a leader again, none of them the killed broker.
    b = cluster.bootstrap
    after = describe_topic(b, TOPIC)
    assert all(p.leader is not None and p.leader != victim for p in after)
    assert all(victim not in p.isr and len(p.isr) == 2 for p in after)
    under = tool(TOPICS, "--bootstrap-server", b, "--describe", "--under-replicated-partitions")
    assert {f"Topic: {TOPIC}\tPartition: {p}\t" in under for p in range(3)} == {True}

    # The killed broker back: it catches up and rejoins every ISR.
    cluster.restart(victim)
    b = cluster.bootstrap

    def healed() -> bool:
        under = tool(TOPICS, "--bootstrap-server", b, "--describe", "--topic", TOPIC,
                     "--under-replicated-partitions")  # fmt: skip
        return under.strip() == ""

    assert wait_for(healed, 60, 1.0)
    # Partition 0 (and any other it led) is led by another broker than its preferred one
    # until a preferred election gives it back.
    moved = {p.partition for p in describe_topic(b, TOPIC) if p.leader != p.replicas[0]}
    assert 0 in moved
    out = tool(LEADER_ELECTION, "--bootstrap-server", b, "--election-type", "preferred",
               "--all-topic-partitions")  # fmt: skip
    (line,) = out.splitlines()
    assert line.startswith("Successfully completed leader election (PREFERRED) for partitions ")
    elected = set(line.split(" for partitions ", 1)[1].split(", "))
    assert {f"{TOPIC}-{p}" for p in moved} <= elected
    assert all(p.leader == p.replicas[0] for p in describe_topic(b, TOPIC))
    # Nothing left to elect: Kafka lists no partition at all (none "already elected").
    out = tool(LEADER_ELECTION, "--bootstrap-server", b, "--election-type", "preferred",
               "--all-topic-partitions")  # fmt: skip
    assert out.strip() == ""
    # Named partitions are answered each, already led by their preferred replica.
    out = tool(LEADER_ELECTION, "--bootstrap-server", b, "--election-type", "preferred",
               "--topic", TOPIC, "--partition", "0")  # fmt: skip
    assert out.strip() == f"Valid replica already elected for partitions {TOPIC}-0"
