"""Kafka's command-line tools as a user runs them (kafka-topics.sh and the rest are
`kafka-run-class <class>`), and readers of the tables they print."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from moldau.cli.main import main
from moldau.testing import kafka_java

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"


def tool(main_class: str, *args: str, input: str | None = None, timeout: float = 90) -> str:
    """Runs a tool that must succeed; its stdout (the test fails with both streams)."""
    done = kafka_java.run(main_class, *args, input=input, timeout=timeout)
    if done.returncode != 0:
        pytest.fail(
            f"{main_class} {' '.join(args)} exited {done.returncode}:\n"
            f"{done.stdout}\n{done.stderr[-6000:]}"
        )
    return done.stdout


def failing_tool(main_class: str, *args: str, timeout: float = 90) -> str:
    """Runs a tool that must fail; what it printed on both streams."""
    done = kafka_java.run(main_class, *args, timeout=timeout)
    assert done.returncode != 0, f"{main_class} {' '.join(args)} succeeded:\n{done.stdout}"
    return done.stdout + done.stderr


def moldau_tool(capsys: pytest.CaptureFixture[str], command: str, *args: str) -> str:
    """`moldau <command> ...` run in this process; its stdout."""
    code, out, err = moldau_run(capsys, command, *args)
    assert code == 0, err
    return out


def moldau_run(
    capsys: pytest.CaptureFixture[str], command: str, *args: str
) -> tuple[int, str, str]:
    """`moldau <command> ...` run in this process: its exit code, stdout and stderr."""
    capsys.readouterr()
    code = main([command, *args])
    out, err = capsys.readouterr()
    return code, out, err


def table(output: str, first_column: str) -> list[dict[str, str]]:
    """The rows of every whitespace-aligned table in `output` whose header starts with
    `first_column` (kafka-consumer-groups prints one per group), as dicts by header; the
    last column takes the rest of its line (an error message)."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in output.splitlines():
        cells = line.split()
        if not cells:
            header = None
        elif cells[0] == first_column:
            header = cells
        elif header is not None:
            cells = line.split(None, len(header) - 1)
            rows.append(dict(zip(header, (c.strip() for c in cells), strict=False)))
    return rows


@dataclass(frozen=True)
class PartitionLine:
    """One partition as `kafka-topics --describe` prints it."""

    topic: str
    partition: int
    leader: int | None  # None: "none"
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


_PARTITION = re.compile(
    r"Topic: (\S+)\tPartition: (\d+)\tLeader: (\S+)\tReplicas: (\S*)\tIsr: (\S*)"
)


def _ids(text: str) -> tuple[int, ...]:
    return tuple(int(i) for i in text.split(",") if i)


def partitions(describe_output: str) -> list[PartitionLine]:
    return [
        PartitionLine(
            m[1], int(m[2]), None if m[3] == "none" else int(m[3]), _ids(m[4]), _ids(m[5])
        )
        for m in _PARTITION.finditer(describe_output)
    ]


def describe_topic(bootstrap: str, topic: str) -> list[PartitionLine]:
    return partitions(tool(TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", topic))


def offsets(get_offsets_output: str) -> dict[int, int]:
    """`topic:partition:offset` lines of kafka-get-offsets, by partition."""
    out = {}
    for line in get_offsets_output.split():
        _, partition, offset = line.rsplit(":", 2)
        out[int(partition)] = int(offset)
    return out
