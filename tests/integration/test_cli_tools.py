"""`moldau get-offsets`, `delete-records`, `log-dirs` and `broker-api-versions` against
one broker process, run in-process as test_cli.py runs the other commands: what a
Kafka user reads in their output (Kafka's tools' formats), and bad input as one line
on stderr with a non-zero exit."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from moldau.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from moldau.testing.process import BrokerProcess
from tests.integration.test_cli import Cli, assert_one_line_error, new_topic

pytestmark = pytest.mark.integration

BASE_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def tools_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("cli-tools") / "data") as broker:
        yield broker


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tools_broker: BrokerProcess,
) -> Cli:
    return Cli(capsys, monkeypatch, tools_broker.bootstrap)


def produce(bootstrap: str, topic: str, counts: dict[int, int], size: int = 100) -> None:
    """`counts[p]` records to partition p, record i stamped BASE_MS + i*1000."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for p, n in counts.items():
        for i in range(n):
            producer.produce(topic, b"v" * size, partition=p, timestamp=BASE_MS + i * 1000)
    assert producer.flush(30) == 0


def commit(bootstrap: str, topic: str) -> None:
    """A group's offset committed without joining (no rebalance to wait for)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tools"})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        consumer.close()


def offsets(out: str, topic: str) -> dict[int, int]:
    got = {}
    for line in out.splitlines():
        name, p, offset = line.rsplit(":", 2)
        assert name == topic, line
        got[int(p)] = int(offset)
    return got


def test_get_offsets_by_time_topic_and_partition_rules(cli: Cli) -> None:
    topic = new_topic()
    cli.ok("topics", "create", "--topic", topic, "--partitions", "12")
    produce(cli.bootstrap, topic, {0: 5, 2: 3, 10: 1})

    latest = cli.ok("get-offsets", "--topic", topic)
    # Kafka's order: by the text `topic-partition`, so 10 and 11 come before 2.
    order = [0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9]
    assert latest.lines == [f"{topic}:{p}:{ ({0: 5, 2: 3, 10: 1}.get(p, 0)) }" for p in order]
    assert offsets(cli.ok("get-offsets", "--topic", topic, "--time", "-2").out, topic) == {
        p: 0 for p in range(12)
    }
    by_rule = cli.ok("get-offsets", "--topic-partitions", f"{topic}:0-3,{topic}:10",
                     "--time", "max-timestamp")  # fmt: skip
    assert offsets(by_rule.out, topic) == {0: 4, 2: 2, 10: 0}  # empty 1: no record, no line
    # A timestamp: the first record at or after it; a partition with none prints nothing.
    at = cli.ok("get-offsets", "--topic", topic, "--partitions", "0,2",
                "--time", str(BASE_MS + 2500))  # fmt: skip
    assert at.lines == [f"{topic}:0:3"]
    assert cli.ok("get-offsets", "--topic", topic, "--partitions", "0",
                  "--time", "-4").lines == [f"{topic}:0:0"]  # fmt: skip
    assert cli.ok("get-offsets", "--topic", topic, "--time", "-5").out == ""

    # Internal topics are listed unless excluded.
    commit(cli.bootstrap, topic)  # creates __consumer_offsets
    everything = cli.ok("get-offsets").lines
    assert any(line.startswith("__consumer_offsets:") for line in everything)
    assert not any(
        line.startswith("__consumer_offsets:")
        for line in cli.ok("get-offsets", "--exclude-internal-topics").lines
    )

    assert_one_line_error(cli("get-offsets", "--time", "yesterday"), "get-offsets", "--time")
    assert_one_line_error(
        cli("get-offsets", "--topic", "no-such-topic"), "get-offsets", "could not match"
    )
    assert_one_line_error(cli("get-offsets", "--partitions", "a"), "get-offsets", "--partitions")
    assert_one_line_error(
        cli("get-offsets", "--topic", topic, "--topic-partitions", "x"),
        "get-offsets",
        "--topic-partitions cannot be used with --topic",
    )
    assert_one_line_error(
        cli("get-offsets", "--topic-partitions", f"{topic}:x"), "get-offsets", "rule"
    )


def test_delete_records_prints_the_low_watermark_or_the_error(cli: Cli, tmp_path: Path) -> None:
    topic = new_topic()
    cli.ok("topics", "create", "--topic", topic, "--partitions", "2")
    produce(cli.bootstrap, topic, {0: 20, 1: 4})
    plan = tmp_path / "offsets.json"
    entries = [
        {"topic": topic, "partition": 0, "offset": 12},
        {"topic": "no-such-topic", "partition": 0, "offset": 1},
        {"topic": topic, "partition": 1, "offset": 99},
    ]
    plan.write_text(json.dumps({"partitions": entries, "version": 1}))

    done = cli.ok("delete-records", "--offset-json-file", str(plan))
    assert done.lines == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 12",
        "partition: no-such-topic-0\terror: UNKNOWN_TOPIC_OR_PARTITION",
        f"partition: {topic}-1\terror: OFFSET_OUT_OF_RANGE",
    ]  # in the file's order
    # The log start moved: earliest is now 12; -1 deletes up to the high watermark.
    assert cli.ok("get-offsets", "--topic", topic, "--time", "-2").lines == [
        f"{topic}:0:12",
        f"{topic}:1:0",
    ]
    plan.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 1, "offset": -1}]}))
    assert cli.ok("delete-records", "--offset-json-file", str(plan)).lines[-1] == (
        f"partition: {topic}-1\tlow_watermark: 4"
    )

    for bad, fragment in [
        ("{", "not valid JSON"),
        ('{"version": 2, "partitions": []}', "version 2"),
        ('{"partitions": [{"topic": "t"}]}', '{"partitions"'),
        (json.dumps({"partitions": [entries[0], entries[0]]}), f"{topic}-0"),
    ]:
        plan.write_text(bad)
        assert_one_line_error(
            cli("delete-records", "--offset-json-file", str(plan)), "delete-records", fragment
        )
    missing = str(tmp_path / "missing.json")
    assert_one_line_error(
        cli("delete-records", "--offset-json-file", missing), "delete-records", "cannot read"
    )


def test_log_dirs_describes_each_replica_with_the_bytes_on_disk(
    cli: Cli, tools_broker: BrokerProcess
) -> None:
    topic, other = new_topic(), new_topic()
    cli.ok("topics", "create", "--topic", topic, "--partitions", "2")
    cli.ok("topics", "create", "--topic", other, "--partitions", "1")
    produce(cli.bootstrap, topic, {0: 30}, size=200)

    done = cli.ok("log-dirs", "--describe", "--topic-list", topic)
    assert done.lines[:2] == [
        "Querying brokers for log directories information",
        "Received log directory information from brokers 1",
    ]
    assert len(done.lines) == 3
    # Kafka's tool writes these keys in this order; scripts may compare the text.
    assert done.lines[2].startswith('{"brokers":[{"broker":1,"logDirs":[{"partitions":[')
    assert done.lines[2].endswith('"version":1}')
    [broker] = json.loads(done.lines[2])["brokers"]
    [log_dir] = broker["logDirs"]
    data_dir = tools_broker.data_dir
    assert (log_dir["logDir"], log_dir["error"]) == (str(data_dir.resolve()), None)
    sizes = {
        f"{topic}-{p}": sum(f.stat().st_size for f in (data_dir / f"{topic}-{p}").glob("*.log"))
        for p in (0, 1)
    }
    assert sizes[f"{topic}-0"] > 30 * 200
    assert log_dir["partitions"] == [
        {"partition": name, "size": size, "offsetLag": 0, "isFuture": False}
        for name, size in sizes.items()
    ]
    everything = json.loads(cli.ok("log-dirs", "--describe").lines[2])
    names = {p["partition"] for p in everything["brokers"][0]["logDirs"][0]["partitions"]}
    assert {f"{topic}-0", f"{topic}-1", f"{other}-0"} <= names

    assert_one_line_error(
        cli("log-dirs", "--describe", "--broker-list", "1,7"),
        "log-dirs",
        "do not exist from --broker-list: 7. Current existent brokers: 1",
    )
    assert_one_line_error(cli("log-dirs", "--topic-list", topic), "log-dirs", "--describe")
    assert_one_line_error(cli("log-dirs", "--describe", "--broker-list", "x"), "log-dirs")


def test_broker_api_versions_prints_one_block_per_broker(cli: Cli) -> None:
    out = cli.ok("broker-api-versions").out
    host, port = cli.bootstrap.rsplit(":", 1)
    head = f"{host}:{port} (id: 1 rack: null isFenced: false) -> (\n"
    assert out.startswith(head) and out.endswith("\n)\n")
    lines = out[len(head) : -len("\n)\n")].split(",\n")
    assert all(line.startswith("\t") for line in lines)
    got = {}
    for line in lines:
        m = re.fullmatch(r"\t(\w+)\((\d+)\): (\d+)(?: to (\d+))? \[usable: (\d+)\]", line)
        assert m is not None, line
        low, high = int(m[3]), int(m[4] or m[3])
        assert int(m[5]) == high
        got[int(m[2])] = (low, high)
    assert got == {int(k): v for k, v in SUPPORTED_VERSIONS.items()}
    newest = SUPPORTED_VERSIONS[ApiKey.PRODUCE][1]
    assert lines[0] == f"\tProduce(0): 0 to {newest} [usable: {newest}]"
    assert "\tListOffsets(2): " in out and "\tOffsetForLeaderEpoch(23): " in out

    assert_one_line_error(
        cli("broker-api-versions", bootstrap="127.0.0.1:1"), "broker-api-versions", "127.0.0.1:1"
    )


def test_configs_alters_and_describes_a_topic_and_refuses_mistakes_in_one_line(cli: Cli) -> None:
    topic = new_topic()
    cli.ok("topics", "create", "--topic", topic)
    added = "retention.ms=3600000,cleanup.policy=[compact,delete]"
    done = cli.ok("configs", "--alter", "--topic", topic, "--add-config", added)
    assert done.lines == [f"Completed updating config for topic {topic}."]
    assert cli.ok("configs", "--describe", "--topic", topic).lines == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact,delete sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=3600000 sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}",
    ]
    cli.ok("configs", "--alter", "--topic", topic, "--delete-config", "cleanup.policy")
    assert len(cli.ok("configs", "--describe", "--topic", topic).lines) == 2
    # As Kafka's tool: a topic that does not exist is said so, with success.
    assert cli.ok("configs", "--describe", "--topic", "no-such-topic").lines == [
        "The topic 'no-such-topic' doesn't exist and doesn't have dynamic config."
    ]

    for argv, fragment in [
        (["--alter", "--topic", topic, "--delete-config", "segment.ms"],
         "Invalid config(s): segment.ms"),
        (["--alter", "--topic", topic, "--add-config", "retention.ms=soon"],
         "Invalid value soon for configuration retention.ms"),
        (["--alter", "--topic", "no-such-topic", "--add-config", "retention.ms=1"],
         "UNKNOWN_TOPIC_OR_PARTITION"),
        (["--describe", "--topic", "a b"], "Topic name is invalid: 'a b' contains"),
        (["--alter", "--broker", "1", "--add-config", "log.cleaner.threads=2"],
         "log.cleaner.threads"),
        (["--describe", "--entity-type", "groups"], "Invalid entity type groups"),
    ]:  # fmt: skip
        assert_one_line_error(cli("configs", *argv), "configs", fragment)
    assert_one_line_error(
        cli("configs", "--describe", "--topic", topic, bootstrap="127.0.0.1:1"),
        "configs",
        "127.0.0.1:1",
    )
