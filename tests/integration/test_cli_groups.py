"""`moldau groups` (kafka-consumer-groups.sh) and `moldau consume --group` against a
real broker process, the CLI run in-process through `moldau.cli.main.main`: groups
are listed, described with Kafka's tables while a real consumer is a member and
after it left, their offsets reset (dry run and execute) and deleted; console
consumers of one group share the partitions and resume from its commits."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient

from moldau.cli.errors import CliError
from moldau.cli.groups import (
    PartitionRow,
    offsets_table,
    parse_datetime,
    parse_duration,
    parse_topic_partitions,
)
from moldau.testing.process import BrokerProcess, wait_for
from tests.integration.test_cli import Cli, Result, assert_one_line_error
from tests.integration.test_groups import Member

pytestmark = pytest.mark.integration

OFFSETS_HEADER = [
    "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
    "CONSUMER-ID", "HOST", "CLIENT-ID",
]  # fmt: skip


@pytest.fixture(scope="module")
def groups_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("cli-groups") / "data"
    with BrokerProcess(data, {"group.initial.rebalance.delay.ms": "0"}) as broker:
        yield broker.bootstrap


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, groups_bootstrap: str
) -> Cli:
    return Cli(capsys, monkeypatch, groups_bootstrap)


@pytest.fixture
def topic(cli: Cli) -> str:
    """A new topic of two partitions: 3 records in partition 0, 2 in partition 1."""
    name = f"cg-{uuid.uuid4().hex[:10]}"
    cli.ok("topics", "create", "--topic", name, "--partitions", "2")
    cli.ok("produce", "--topic", name, "--partition", "0", stdin="a\nb\nc\n")
    cli.ok("produce", "--topic", name, "--partition", "1", stdin="x\ny\n")
    return name


def table(result: Result) -> list[list[str]]:
    """The rows of the table a describe or reset printed, header first, each
    split into its columns (Kafka's tables have no spaces inside cells, except
    the coordinator's `host:port  (id)`)."""
    assert result.lines[0] == "", "Kafka's tables start with a blank line"
    return [line.split() for line in result.lines[1:]]


def committed(bootstrap: str, group: str, topic: str, partitions: int = 2) -> list[int]:
    """The group's committed offsets, as a fresh consumer of the group sees them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([CTP(topic, p) for p in range(partitions)], timeout=10)
    finally:
        consumer.close()
    return [tp.offset for tp in tps]


# -- list and describe ------------------------------------------------------------


def test_describe_a_live_group_then_after_its_member_left(
    cli: Cli, groups_bootstrap: str, topic: str
) -> None:
    group = f"g-{topic}"
    member = Member(groups_bootstrap, group, topic, **{
        "client.id": "billing-1", "enable.auto.commit": False,
    })  # fmt: skip
    try:
        assert wait_for(lambda: len(member.records) == 5, 20)
        member.stop_polling()  # it stays in the group: librdkafka keeps heartbeating
        member.consumer.commit(offsets=[CTP(topic, 0, 1)], asynchronous=False)
        member_id = member.consumer.memberid()
        assert member_id is not None and member_id.startswith("billing-1-")

        assert group in cli.ok("groups", "list").lines
        assert [group, "Stable"] in [
            line.split() for line in cli.ok("groups", "list", "--state").lines
        ]
        assert group in cli.ok("groups", "--list", "--state", "stable").out

        described = cli.ok("groups", "describe", "--group", group)
        assert described.err == ""
        assert table(described) == [
            OFFSETS_HEADER,
            [group, topic, "0", "1", "3", "2", member_id, "/127.0.0.1", "billing-1"],
            # Assigned, nothing committed: no current offset, no lag.
            [group, topic, "1", "-", "2", "-", member_id, "/127.0.0.1", "billing-1"],
        ]
        # Kafka's column widths: at least 15, or the longest value, one space apart.
        header = described.lines[1]
        assert header.startswith(f"{'GROUP':<15} {'TOPIC':<{max(15, len(topic))}} PARTITION  ")
        assert header.index("HOST") == described.lines[2].index("/127.0.0.1")

        members = cli.ok("groups", "--describe", "--group", group, "--members")
        assert table(members) == [
            ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
            [group, member_id, "/127.0.0.1", "billing-1", "2"],
        ]
        state = cli.ok("groups", "describe", "--group", group, "--state")
        rows = table(state)
        assert rows[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                           "#MEMBERS"]  # fmt: skip
        assert rows[1] == [group, groups_bootstrap, "(1)", "range", "Stable", "1"]

        # A live group's offsets cannot be reset, nor can it be deleted.
        refused = cli("groups", "reset-offsets", "--group", group, "--topic", topic,
                      "--to-earliest", "--execute")  # fmt: skip
        assert_one_line_error(
            refused, "groups",
            f"Assignments can only be reset if the group '{group}' is inactive, but the "
            "current state is Stable.",
        )  # fmt: skip
        assert refused.out == ""
        assert_one_line_error(
            cli("groups", "delete", "--group", group),
            "groups",
            "Deletion of some consumer groups failed: "
            f"* Group '{group}' could not be deleted due to: NON_EMPTY_GROUP",
        )
    finally:
        member.close()

    after = cli.ok("groups", "describe", "--group", group)
    assert after.err == f"Consumer group '{group}' has no active members.\n"
    assert table(after) == [OFFSETS_HEADER, [group, topic, "0", "1", "3", "2", "-", "-", "-"]]
    assert [group, "Empty"] in [line.split() for line in cli.ok("groups", "list", "--state").lines]
    state = cli.ok("groups", "describe", "--group", group, "--state")
    assert table(state)[1][3:] == ["-", "Empty", "0"]


# -- reset-offsets ----------------------------------------------------------------


def test_reset_offsets_dry_run_changes_nothing_and_execute_commits(
    cli: Cli, groups_bootstrap: str, topic: str
) -> None:
    group = f"g-{topic}"

    def reset(*args: str) -> Result:
        return cli.ok("groups", "reset-offsets", "--group", group, *args)

    # A group that does not exist yet may be given offsets (it is inactive).
    first = reset("--topic", topic, "--to-offset", "2", "--execute")
    assert table(first) == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        [group, topic, "0", "2"],
        [group, topic, "1", "2"],
    ]
    assert committed(groups_bootstrap, group, topic) == [2, 2]

    planned = reset("--topic", topic, "--to-earliest", "--dry-run")
    assert [row[2:] for row in table(planned)[1:]] == [["0", "0"], ["1", "0"]]
    assert planned.err == ""
    assert committed(groups_bootstrap, group, topic) == [2, 2]
    # Neither --dry-run nor --execute: a dry run, with Kafka's warning.
    assert "No action will be performed" in reset("--topic", topic, "--to-latest").err
    assert committed(groups_bootstrap, group, topic) == [2, 2]

    reset("--topic", topic, "--to-earliest", "--execute")
    assert committed(groups_bootstrap, group, topic) == [0, 0]

    shifted = reset("--topic", f"{topic}:1", "--shift-by", "1", "--execute")
    assert [row[2:] for row in table(shifted)[1:]] == [["1", "1"]]
    assert committed(groups_bootstrap, group, topic) == [0, 1]

    # Out of range: moved into [log start, log end], as Kafka does, with a warning.
    clamped = reset("--all-topics", "--shift-by", "5", "--dry-run")
    assert [row[2:] for row in table(clamped)[1:]] == [["0", "3"], ["1", "2"]]
    assert "is higher than latest offset" in clamped.err
    assert committed(groups_bootstrap, group, topic) == [0, 1]

    reset("--all-topics", "--shift-by", "2", "--execute")
    assert committed(groups_bootstrap, group, topic) == [2, 2]  # partition 1 ends at 2

    back = reset("--topic", topic, "--to-datetime", "2001-01-01T00:00:00.000", "--dry-run")
    assert [row[2:] for row in table(back)[1:]] == [["0", "0"], ["1", "0"]]
    recent = reset("--topic", topic, "--by-duration", "PT1H", "--dry-run", "--export")
    assert recent.lines == [f"{topic},0,0", f"{topic},1,0"]
    assert committed(groups_bootstrap, group, topic) == [2, 2]

    reset("--topic", f"{topic}:0", "--to-current", "--execute")
    assert committed(groups_bootstrap, group, topic) == [2, 2]

    # 0 is an offset and a shift like any other.
    reset("--topic", topic, "--to-offset", "0", "--execute")
    assert committed(groups_bootstrap, group, topic) == [0, 0]
    reset("--topic", topic, "--shift-by", "0", "--execute")
    assert committed(groups_bootstrap, group, topic) == [0, 0]


# -- delete -----------------------------------------------------------------------


def test_delete_an_empty_group(cli: Cli, groups_bootstrap: str, topic: str) -> None:
    group = f"g-{topic}"
    cli.ok("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-latest",
           "--execute")  # fmt: skip
    assert group in cli.ok("groups", "list").lines
    deleted = cli.ok("groups", "delete", "--group", group)
    assert deleted.out == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    assert group not in cli.ok("groups", "list").lines
    assert committed(groups_bootstrap, group, topic) == [-1001, -1001]  # no offsets left
    for action in ("describe", "delete"):
        gone = cli("groups", action, "--group", group)
        assert_one_line_error(gone, "groups", f"Consumer group '{group}' does not exist.")


# -- consume --group: a member of the group ---------------------------------------


def test_consume_with_a_group_resumes_from_its_commits_across_runs(cli: Cli, topic: str) -> None:
    group = f"g-{topic}"

    def consume(*args: str) -> list[str]:
        result = cli.ok("consume", "--topic", topic, "--group", group,
                        "--property", "print.partition=true", *args)  # fmt: skip
        return sorted(result.lines)

    first = consume("--from-beginning", "--max-messages", "4")
    assert len(first) == 4
    # It committed what it printed, as a member of the group, and left it.
    described = cli.ok("groups", "describe", "--group", group)
    assert "has no active members" in described.err
    assert sum(int(row[3]) for row in table(described)[1:]) == 4

    second = consume("--max-messages", "1", "--timeout-ms", "10000")
    assert sorted(first + second) == [
        "Partition:0\ta", "Partition:0\tb", "Partition:0\tc", "Partition:1\tx", "Partition:1\ty",
    ]  # fmt: skip
    cli.ok("produce", "--topic", topic, "--partition", "1", stdin="z\n")
    # Only the new record: nothing printed before is printed again.
    assert consume("--timeout-ms", "1000") == ["Partition:1\tz"]
    assert [row[5] for row in table(cli.ok("groups", "describe", "--group", group))[1:]] == [
        "0",
        "0",
    ]


def test_console_consumers_of_one_group_share_the_partitions(
    cli: Cli, groups_bootstrap: str
) -> None:
    topic = f"cg-{uuid.uuid4().hex[:10]}"
    group = f"g-{topic}"
    cli.ok("topics", "create", "--topic", topic, "--partitions", "2")
    argv = [
        sys.executable, "-m", "moldau", "consume", "--bootstrap-server", groups_bootstrap,
        "--topic", topic, "--group", group, "--from-beginning", "--max-messages", "3",
        "--timeout-ms", "30000", "--property", "print.partition=true",
    ]  # fmt: skip
    cwd = Path(__file__).parents[2]
    consumers = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
        for _ in range(2)
    ]
    admin = AdminClient({"bootstrap.servers": groups_bootstrap})

    def one_partition_each() -> bool:
        described = admin.describe_consumer_groups([group])[group].result(10)
        counts = [len(m.assignment.topic_partitions) for m in described.members]
        return described.state.name == "STABLE" and counts == [1, 1]

    try:
        assert wait_for(one_partition_each, 30, interval=0.2)
        cli.ok("produce", "--topic", topic, "--partition", "0", stdin="a\nb\nc\n")
        cli.ok("produce", "--topic", topic, "--partition", "1", stdin="x\ny\nz\n")
        outputs = [c.communicate(timeout=30) for c in consumers]
    finally:
        for c in consumers:
            if c.poll() is None:
                c.kill()
                c.communicate()
    printed = [out.decode().splitlines() for out, _ in outputs]
    assert sorted(printed) == [
        ["Partition:0\ta", "Partition:0\tb", "Partition:0\tc"],
        ["Partition:1\tx", "Partition:1\ty", "Partition:1\tz"],
    ]
    assert [err.decode().splitlines()[-1] for _, err in outputs] == [
        "Processed a total of 3 messages"
    ] * 2
    assert [c.returncode for c in consumers] == [0, 0]
    after = cli.ok("groups", "describe", "--group", group)
    assert [row[2:6] for row in table(after)[1:]] == [["0", "3", "3", "0"], ["1", "3", "3", "0"]]


# -- mistakes: one line, non-zero exit --------------------------------------------


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("describe", "--group or --all-groups"),
        ("--group g", "exactly one action"),
        ("list --topic t", "--topic is only valid with reset-offsets"),
        ("describe --group g --members --state", "at most one"),
        ("describe --group g --state stable", "value for --state"),
        ("list --state sleepy", "valid states are"),
        ("describe --group g --all-groups", "cannot be used together"),
        ("reset-offsets --group g --topic t --dry-run", "exactly one of"),
        ("reset-offsets --group g --topic t --to-earliest --to-latest --dry-run", "exactly one of"),
        ("reset-offsets --group g --to-earliest --dry-run", "--topic or --all-topics"),
        ("reset-offsets --group g --topic t --to-latest --dry-run --execute", "not both"),
        ("reset-offsets --group g --topic no-such-topic --to-earliest --dry-run",
         "topic 'no-such-topic' does not exist"),
        ("reset-offsets --group g --topic {topic}:7 --to-earliest --dry-run", "no partition 7"),
        ("reset-offsets --group g --topic {topic}:x --to-earliest --dry-run", "partition 'x'"),
        ("reset-offsets --group g --topic {topic} --to-datetime yesterday --dry-run",
         "--to-datetime"),
        ("reset-offsets --group {new} --topic {topic} --shift-by 1 --dry-run",
         "no current committed offset"),
        ("describe --group {new}", "does not exist"),
        ("describe --group g --to-offset 0", "--to-offset is only valid with reset-offsets"),
        ("delete --group {new}", "does not exist"),
    ],
)  # fmt: skip
def test_mistakes_are_one_line_and_a_non_zero_exit(
    cli: Cli, topic: str, command: str, fragment: str
) -> None:
    args = command.format(topic=topic, new=f"g-{uuid.uuid4().hex[:8]}").split()
    assert_one_line_error(cli("groups", *args), "groups", fragment)


def test_an_unreachable_broker_is_one_line(cli: Cli) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bootstrap = f"127.0.0.1:{port}"
    result = cli("groups", "list", bootstrap=bootstrap)
    assert_one_line_error(result, "groups", f"cannot reach broker at {bootstrap}")


# -- parsing and the table, without a broker ----------------------------------------


def test_topic_partitions_datetimes_and_durations_parse_as_kafka_does() -> None:
    assert parse_topic_partitions("orders") == ("orders", None)
    assert parse_topic_partitions("orders:0,2,2") == ("orders", [0, 2])
    for bad in ("orders:", "orders:a", ":1", "orders:-1"):
        with pytest.raises(CliError):
            parse_topic_partitions(bad)
    assert parse_datetime("1970-01-01T00:00:01.500") == 1500  # no zone: UTC, as Kafka
    assert parse_datetime("1970-01-01T02:00:00.000+02:00") == 0
    assert parse_datetime("1970-01-01T00:00:02Z") == 2000
    assert parse_duration("PT1H30M") == timedelta(hours=1, minutes=30)
    assert parse_duration("P2DT0.5S") == timedelta(days=2, seconds=0.5)
    assert parse_duration("-PT1M") == timedelta(minutes=-1)
    for bad in ("P", "PT", "1H", "PT1X"):
        with pytest.raises(CliError):
            parse_duration(bad)


def test_the_offsets_table_has_kafkas_widths() -> None:
    long_topic = "t" * 20
    rows = [
        PartitionRow("g", long_topic, 0, 5, 7, "c-1", "/10.0.0.1", "client"),
        PartitionRow("g", "short", 3, None, 4, "-", "-", "-"),
    ]
    assert offsets_table(rows) == [
        f"GROUP           {'TOPIC':<20} PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG"
        "             CONSUMER-ID     HOST            CLIENT-ID",
        f"g               {long_topic} 0          5               7               2"
        "               c-1             /10.0.0.1       client",
        f"g               {'short':<20} 3          -               4               -"
        "               -               -               -",
    ]
