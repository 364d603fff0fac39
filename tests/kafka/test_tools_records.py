"""Kafka's kafka-delete-records (DeleteRecordsCommand) and kafka-log-dirs
(LogDirsCommand) against one Moldau broker and the three-broker cluster: what a user
reads in their output, the low watermark a deletion reached, and each replica's log
dir with the bytes its segment files hold."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.testing import kafka_java
from moldau.testing.cluster import Cluster
from tests.integration.test_delete_records import produce
from tests.kafka.tools import (
    API_VERSIONS,
    CONFIGS,
    GET_OFFSETS,
    moldau_run,
    moldau_tool,
    tool,
)

pytestmark = pytest.mark.java

DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"


@dataclass(frozen=True)
class Target:
    bootstrap: str
    data_dirs: dict[int, Path]  # broker id -> its log dir

    @property
    def replication_factor(self) -> int:
        return len(self.data_dirs)


@pytest.fixture(params=["single", "cluster"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    """One broker, or the three-broker cluster, with where each keeps its logs."""
    if request.param == "single":
        b = request.getfixturevalue("moldau")
        [broker_id] = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics().brokers
        yield Target(b.bootstrap, {broker_id: b.data_dir})
    else:
        c = request.getfixturevalue("moldau_cluster")
        yield Target(c.bootstrap, {i: c.data_dir(i) for i in c.brokers})


def create(target: Target, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    new = NewTopic(topic, partitions, target.replication_factor)
    admin.create_topics([new])[topic].result(timeout=30)


def low_watermark(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return int(c.get_watermark_offsets(CTP(topic, 0), timeout=10)[0])
    finally:
        c.close()


def delete_records(target: Target, tmp_path: Path, topic: str, offset: int) -> str:
    offsets = tmp_path / "offsets.json"
    entry = {"topic": topic, "partition": 0, "offset": offset}
    offsets.write_text(json.dumps({"partitions": [entry], "version": 1}))
    done = kafka_java.run(
        DELETE_RECORDS, "--bootstrap-server", target.bootstrap, "--offset-json-file", str(offsets)
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return done.stdout


def test_kafka_delete_records_prints_the_low_watermark_reached(
    target: Target, tmp_path: Path, topic_name: str
) -> None:
    create(target, topic_name)
    produce(target.bootstrap, topic_name, 30, size=50)

    out = delete_records(target, tmp_path, topic_name, 12)
    assert "Records delete operation completed:" in out
    assert f"partition: {topic_name}-0\tlow_watermark: 12" in out.splitlines()
    assert low_watermark(target.bootstrap, topic_name) == 12

    # Past the end: the broker's OFFSET_OUT_OF_RANGE, as Kafka's tool shows it.
    out = delete_records(target, tmp_path, topic_name, 31)
    [line] = [x for x in out.splitlines() if x.startswith("partition:")]
    assert line.startswith(f"partition: {topic_name}-0\terror: ")
    assert "OffsetOutOfRangeException" in line
    # -1: up to the high watermark.
    out = delete_records(target, tmp_path, topic_name, -1)
    assert f"partition: {topic_name}-0\tlow_watermark: 30" in out.splitlines()
    assert low_watermark(target.bootstrap, topic_name) == 30


def test_kafka_log_dirs_describes_every_replica_with_the_bytes_on_disk(
    target: Target, topic_name: str
) -> None:
    create(target, topic_name, partitions=2)
    produce(target.bootstrap, topic_name, 40, size=200)
    done = kafka_java.run(
        LOG_DIRS, "--bootstrap-server", target.bootstrap, "--describe", "--topic-list", topic_name
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    assert lines[1].startswith("Received log directory information from brokers ")
    described = json.loads(lines[-1])
    assert described["version"] == 1
    assert {b["broker"] for b in described["brokers"]} == set(target.data_dirs)
    for b in described["brokers"]:
        data_dir = target.data_dirs[b["broker"]]
        [log_dir] = b["logDirs"]
        assert log_dir["logDir"] == str(data_dir.resolve())
        assert log_dir["error"] is None
        # Every replica is here (RF = the number of brokers), with what its files hold.
        got = {p["partition"]: p for p in log_dir["partitions"]}
        assert set(got) == {f"{topic_name}-0", f"{topic_name}-1"}
        for name, p in got.items():
            on_disk = sum(f.stat().st_size for f in (data_dir / name).glob("*.log"))
            assert (p["size"], p["offsetLag"], p["isFuture"]) == (on_disk, 0, False), name
        assert got[f"{topic_name}-0"]["size"] > 40 * 200
        assert got[f"{topic_name}-1"]["size"] == 0


def test_moldaus_tools_print_what_kafkas_print_on_the_same_cluster(
    moldau_cluster: Cluster,
    topic_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    b = moldau_cluster.bootstrap
    target = Target(b, {i: moldau_cluster.data_dir(i) for i in moldau_cluster.brokers})
    create(target, topic_name, partitions=4)
    produce(b, topic_name, 30, size=50)
    offsets_file = json.dumps({"partitions": [{"topic": topic_name, "partition": 0, "offset": 7}]})
    plan = tmp_path / "offsets.json"
    plan.write_text(offsets_file)
    deleted = moldau_tool(capsys, "delete-records", "--bootstrap-server", b,
                          "--offset-json-file", str(plan))  # fmt: skip
    assert f"partition: {topic_name}-0\tlow_watermark: 7" in deleted.splitlines()

    # get-offsets: the same lines, in the same order.
    args = ("--bootstrap-server", b, "--topic-partitions", f"{topic_name}:0-3", "--time", "-2")
    assert moldau_tool(capsys, "get-offsets", *args) == tool(GET_OFFSETS, *args)

    # log-dirs: the same two lines and JSON (Kafka's tool orders replicas by hash).
    args = ("--bootstrap-server", b, "--describe", "--topic-list", topic_name)
    ours, kafkas = moldau_tool(capsys, "log-dirs", *args), tool(LOG_DIRS, *args)
    assert ours.splitlines()[:2] == kafkas.splitlines()[:2]

    def described(out: str) -> object:
        data = json.loads(out.splitlines()[2])
        for broker in data["brokers"]:
            for log_dir in broker["logDirs"]:
                log_dir["partitions"].sort(key=lambda p: p["partition"])
        data["brokers"].sort(key=lambda broker: broker["broker"])
        return data

    assert described(ours) == described(kafkas)

    # broker-api-versions: the same brokers and advertised ranges; "usable" is each
    # tool's own (Kafka 4.1's client and Moldau differ), and Kafka's tool also lists
    # the APIs it knows that Moldau does not serve as UNSUPPORTED.
    def advertised(out: str) -> dict[str, set[str]]:
        blocks = re.findall(r"^(\S+ \(id: \d+ [^\n]*\)) -> \(\n(.*?)\n\)$", out, re.M | re.S)
        return {
            node: {
                re.sub(r" \[.*\]$", "", line.strip().rstrip(","))
                for line in body.splitlines()
                if not line.endswith("UNSUPPORTED,") and not line.endswith("UNSUPPORTED")
            }
            for node, body in blocks
        }

    ours_versions = advertised(moldau_tool(capsys, "broker-api-versions", "--bootstrap-server", b))
    assert len(ours_versions) == 3
    assert ours_versions == advertised(tool(API_VERSIONS, "--bootstrap-server", b))

    # configs: what one tool changes the other describes, in the same lines.
    def configs(*args: str) -> str:
        return moldau_tool(capsys, "configs", "--bootstrap-server", b, *args)

    added = "retention.ms=3600000,cleanup.policy=[compact,delete]"
    assert configs("--alter", "--topic", topic_name, "--add-config", added) == (
        f"Completed updating config for topic {topic_name}.\n"
    )
    args = ("--bootstrap-server", b, "--describe", "--entity-type", "topics",
            "--entity-name", topic_name)  # fmt: skip
    assert moldau_tool(capsys, "configs", *args) == tool(CONFIGS, *args)
    assert "retention.ms=3600000 sensitive=false" in tool(CONFIGS, *args)
    # A harmless default (a cap of 1 TB a partition) for the cluster and a broker.
    big = str(10**12)
    try:
        assert configs("--alter", "--broker-defaults", "--add-config",
                       f"log.retention.bytes={big}") == (
            "Completed updating default config for brokers in the cluster.\n"
        )  # fmt: skip
        tool(CONFIGS, "--bootstrap-server", b, "--alter", "--broker", "2",
             "--add-config", f"log.retention.bytes={big}1")  # fmt: skip
        args = ("--bootstrap-server", b, "--describe", "--entity-type", "brokers")
        described = moldau_tool(capsys, "configs", *args)
        assert described == tool(CONFIGS, *args)
        assert (
            f"  log.retention.bytes={big}1 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:"
            f"log.retention.bytes={big}1, DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.bytes={big}, "
            "DEFAULT_CONFIG:log.retention.bytes=-1}"
        ) in described.splitlines()
        args = ("--bootstrap-server", b, "--describe", "--broker", "3", "--all")
        assert moldau_tool(capsys, "configs", *args) == tool(CONFIGS, *args)
        # kafka-configs' refusal (its own check, before any change): a config that is
        # not set cannot be deleted.
        args = ("--bootstrap-server", b, "--alter", "--broker-defaults",
                "--delete-config", "log.retention.ms")  # fmt: skip
        code, _, err = moldau_run(capsys, "configs", *args)
        assert (code, err) == (1, "moldau configs: Invalid config(s): log.retention.ms\n")
    finally:
        moldau_run(capsys, "configs", "--bootstrap-server", b, "--alter", "--broker-defaults",
                   "--delete-config", "log.retention.bytes")  # fmt: skip
        moldau_run(capsys, "configs", "--bootstrap-server", b, "--alter", "--broker", "2",
                   "--delete-config", "log.retention.bytes")  # fmt: skip
    assert configs("--describe", "--entity-type", "brokers", "--entity-name", "2") == (
        "Dynamic configs for broker 2 are:\n"
    )
