"""`moldau topics`, `produce` and `consume` against a real broker process, run
in-process through `moldau.cli.main.main` (as click's CliRunner does): the Kafka
tools' flags work, and user mistakes are one line on stderr and a non-zero exit."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from moldau.cli.errors import CliError
from moldau.cli.main import main
from moldau.cli.produce import LineReader
from moldau.cli.topics import matching_topics, parse_replica_assignment
from moldau.testing.process import BrokerProcess

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


class Cli:
    """Runs `moldau <command> --bootstrap-server <broker> ...` in this process."""

    def __init__(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, bootstrap: str
    ) -> None:
        self.capsys = capsys
        self.monkeypatch = monkeypatch
        self.bootstrap = bootstrap

    def __call__(
        self, command: str, *args: str, stdin: str = "", bootstrap: str | None = None
    ) -> Result:
        self.capsys.readouterr()
        stream = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
        self.monkeypatch.setattr(sys, "stdin", stream)
        argv = [command, "--bootstrap-server", bootstrap or self.bootstrap, *args]
        code = main(argv)
        captured = self.capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def ok(self, command: str, *args: str, stdin: str = "") -> Result:
        result = self(command, *args, stdin=stdin)
        assert result.code == 0, result.err
        return result


@pytest.fixture(scope="module")
def cli_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with BrokerProcess(tmp_path_factory.mktemp("cli") / "data") as broker:
        yield broker.bootstrap


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cli_bootstrap: str
) -> Cli:
    return Cli(capsys, monkeypatch, cli_bootstrap)


def new_topic() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


def partition_lines(result: Result) -> list[str]:
    return [line for line in result.lines if line.startswith("\tTopic:")]


def assert_one_line_error(result: Result, command: str, *fragments: str) -> None:
    assert result.code != 0
    assert "Traceback" not in result.err
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith(f"moldau {command}: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0]


# -- topics ---------------------------------------------------------------------


def test_create_describe_list_alter_delete_round_trip(cli: Cli) -> None:
    topic = new_topic()
    created = cli.ok("topics", "create", "--topic", topic, "--partitions", "3")
    assert created.out == f"Created topic {topic}.\n"

    described = cli.ok("topics", "describe", "--topic", topic)
    header = described.lines[0].split("\t")
    assert header[0] == f"Topic: {topic}"
    assert header[1].startswith("TopicId: ") and len(header[1]) > len("TopicId: ")
    assert header[2:] == ["PartitionCount: 3", "ReplicationFactor: 1", "Configs: "]
    assert partition_lines(described) == [
        f"\tTopic: {topic}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1" for p in range(3)
    ]
    assert topic in cli.ok("topics", "list").lines

    assert cli.ok("topics", "alter", "--topic", topic, "--partitions", "5").out == ""
    described = cli.ok("topics", "--describe", "--topic", topic)
    assert "PartitionCount: 5" in described.lines[0]
    assert [line.split("\t")[2] for line in partition_lines(described)] == [
        f"Partition: {p}" for p in range(5)
    ]

    cli.ok("topics", "alter", "--topic", topic, "--config", "retention.ms=1000")
    described = cli.ok("topics", "describe", "--topic", topic)
    assert described.lines[0].endswith("\tConfigs: retention.ms=1000")
    overrides = cli.ok("topics", "describe", "--topics-with-overrides", "--topic", topic)
    assert overrides.lines == described.lines[:1]

    cli.ok("topics", "alter", "--topic", topic, "--delete-config", "retention.ms")
    assert cli.ok("topics", "describe", "--topic", topic).lines[0].endswith("\tConfigs: ")

    assert cli.ok("topics", "delete", "--topic", topic).out == ""
    assert topic not in cli.ok("topics", "list").lines
    assert_one_line_error(
        cli("topics", "describe", "--topic", topic), "topics", f"topic '{topic}' does not exist"
    )


def test_kafka_style_flags_configs_and_if_not_exists(cli: Cli) -> None:
    topic = new_topic()
    cli.ok(
        "topics", "--create", "--topic", topic, "--replication-factor", "1",
        "--config", "cleanup.policy=compact", "--config", "segment.ms=3600000",
    )  # fmt: skip
    header = cli.ok("topics", "--describe", "--topic", topic).lines[0]
    assert header.endswith("\tConfigs: cleanup.policy=compact,segment.ms=3600000")
    again = cli.ok("topics", "--create", "--topic", topic, "--if-not-exists")
    assert again.out == ""
    assert cli.ok("topics", "delete", "--topic", new_topic(), "--if-exists").out == ""
    # --topic is a regular expression, as with kafka-topics.
    assert cli.ok("topics", "list", "--topic", f"{topic[:8]}.*").lines.count(topic) == 1


def test_replica_assignment(cli: Cli) -> None:
    topic = new_topic()
    cli.ok("topics", "create", "--topic", topic, "--replica-assignment", "1,1,1")
    described = cli.ok("topics", "describe", "--topic", topic)
    assert "PartitionCount: 3\tReplicationFactor: 1" in described.lines[0]
    assert len(partition_lines(described)) == 3
    # With alter, the assignment lists every partition; the new ones are created.
    cli.ok("topics", "alter", "--topic", topic, "--partitions", "4", "--replica-assignment",
           "1,1,1,1")  # fmt: skip
    described = cli.ok("topics", "describe", "--topic", topic)
    assert partition_lines(described)[-1].endswith("\tPartition: 3\tLeader: 1\tReplicas: 1\tIsr: 1")


def test_replica_assignment_is_parsed_as_kafka_does() -> None:
    assert parse_replica_assignment("1:2,3:4, 5 : 6") == [[1, 2], [3, 4], [5, 6]]
    for bad in ("1:x", "1,,2", "1:1", "1:2,3", "-1"):
        with pytest.raises(CliError):
            parse_replica_assignment(bad)
    assert matching_topics(["a.b", "axb", "c"], "a.b,c") == ["a.b", "axb", "c"]
    assert matching_topics(["a", "__consumer_offsets"], None, exclude_internal=True) == ["a"]


# -- produce and consume --------------------------------------------------------


def test_produce_keys_and_headers_then_consume_exactly_those(cli: Cli) -> None:
    topic = new_topic()
    cli.ok("topics", "create", "--topic", topic, "--partitions", "1")
    lines = "h1:v1,h2:v2\tk1:hello\ntrace:\tk2:world\nh3:x\tk3:with:colons\n"
    produced = cli.ok(
        "produce", "--topic", topic,
        "--property", "parse.key=true", "--property", "key.separator=:",
        "--property", "parse.headers=true",
        stdin=lines,
    )  # fmt: skip
    assert produced.out == "" and produced.err == ""
    consumed = cli.ok(
        "consume", "--topic", topic, "--from-beginning", "--max-messages", "3",
        "--property", "print.key=true", "--property", "print.headers=true",
        "--property", "key.separator= | ",
    )  # fmt: skip
    assert consumed.lines == [
        "h1:v1,h2:v2 | k1 | hello",
        "trace: | k2 | world",
        "h3:x | k3 | with:colons",
    ]
    assert consumed.err == "Processed a total of 3 messages\n"

    # No key parsed: the key is null; the formatter prints null.literal for it.
    cli.ok("produce", "--topic", topic, "--compression-codec", "--request-required-acks", "1",
           stdin="plain\n")  # fmt: skip
    last = cli.ok(
        "consume", "--topic", topic, "--partition", "0", "--offset", "3", "--max-messages", "1",
        "--property", "print.key=true", "--property", "print.headers=true",
        "--property", "print.offset=true", "--property", "print.timestamp=true",
    )  # fmt: skip
    fields = last.out.rstrip("\n").split("\t")
    assert fields[0].startswith("CreateTime:")
    assert fields[1:] == ["Offset:3", "NO_HEADERS", "null", "plain"]


def test_partition_offset_max_messages_and_timeout(cli: Cli) -> None:
    topic = new_topic()
    cli.ok("topics", "create", "--topic", topic, "--partitions", "2")
    cli.ok("produce", "--topic", topic, "--partition", "0", stdin="a\nb\nc\n")
    cli.ok("produce", "--topic", topic, "--partition", "1", "--sync", stdin="x\ny\n")

    def consume(*args: str) -> Result:
        return cli.ok("consume", "--topic", topic, *args)

    assert consume("--partition", "0", "--offset", "1", "--max-messages", "1").lines == ["b"]
    assert consume("--partition", "0", "--offset", "earliest", "--max-messages", "2").lines == [
        "a",
        "b",
    ]
    from_one = consume("--partition", "1", "--from-beginning", "--timeout-ms", "400")
    assert from_one.lines == ["x", "y"]
    assert from_one.err == "Processed a total of 2 messages\n"
    everything = consume(
        "--from-beginning", "--max-messages", "5",
        "--property", "print.partition=true", "--property", "print.offset=true",
    )  # fmt: skip
    assert sorted(everything.lines) == [
        "Partition:0\tOffset:0\ta",
        "Partition:0\tOffset:1\tb",
        "Partition:0\tOffset:2\tc",
        "Partition:1\tOffset:0\tx",
        "Partition:1\tOffset:1\ty",
    ]
    # Without --from-beginning or --offset it starts at the end: nothing old.
    latest = consume("--timeout-ms", "300")
    assert latest.out == ""
    assert latest.err == "Processed a total of 0 messages\n"


def test_consuming_a_topic_that_does_not_exist_creates_it_as_kafka_console_consumer(
    cli: Cli,
) -> None:
    """The broker creates topics on demand (auto.create.topics.enable): the consumer
    asks it to, as Kafka's, and waits for records instead of failing."""
    topic = new_topic()
    waited = cli.ok("consume", "--topic", topic, "--timeout-ms", "500")
    assert waited.out == ""
    assert waited.err == "Processed a total of 0 messages\n"
    assert partition_lines(cli.ok("topics", "describe", "--topic", topic))


def test_without_auto_creation_a_missing_topic_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with BrokerProcess(tmp_path / "data", {"auto.create.topics.enable": "false"}) as broker:
        cli = Cli(capsys, monkeypatch, broker.bootstrap)
        missing = cli("consume", "--topic", "no-such-topic")
        assert_one_line_error(missing, "consume", "does not exist")
        assert cli("topics", "describe", "--topic", "no-such-topic").code != 0


def test_a_group_resumes_where_it_left_off(cli: Cli) -> None:
    # With --partition the consumer is assigned the partition rather than joining
    # the group, and still resumes from, and commits to, the group's offsets.
    # Without it, it joins the group (subscribes): tested in test_cli_groups.py,
    # on a broker that does not hold a new group's first rebalance back.
    topic = new_topic()
    group = f"g-{topic}"
    cli.ok("topics", "create", "--topic", topic, "--partitions", "1")
    cli.ok("produce", "--topic", topic, stdin="1\n2\n3\n")
    first = cli.ok(
        "consume", "--topic", topic, "--group", group, "--partition", "0", "--from-beginning",
        "--max-messages", "2",
    )  # fmt: skip
    assert first.lines == ["1", "2"]
    rest = cli.ok(
        "consume", "--topic", topic, "--group", group, "--partition", "0", "--max-messages", "1"
    )
    assert rest.lines == ["3"]


def test_line_reader_follows_kafka_console_producer() -> None:
    reader = LineReader({"parse.key": "true", "null.marker": "<null>", "parse.headers": "true"})
    record = reader.parse(b"a:1,b:<null>\t<null>\tvalue\twith tab", 1)
    assert record.headers == [("a", b"1"), ("b", None)]
    assert record.key is None
    assert record.value == b"value\twith tab"
    with pytest.raises(CliError, match="line 7"):
        reader.parse(b"no delimiters", 7)
    lenient = LineReader({"parse.key": "true", "ignore.error": "true"})
    assert lenient.parse(b"just a value", 1).value == b"just a value"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from moldau import __version__

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"moldau {__version__}\n"


# -- mistakes: one line, non-zero exit --------------------------------------------


@pytest.fixture(scope="module")
def existing_topic(cli_bootstrap: str) -> str:
    topic = new_topic()
    assert main(["topics", "--bootstrap-server", cli_bootstrap, "create", "--topic", topic]) == 0
    return topic


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["topics", "create", "--topic", "{existing}"], "already exists"),
        (["topics", "describe", "--topic", "no-such-topic"], "does not exist"),
        (["topics", "delete", "--topic", "no-such-topic"], "does not exist"),
        (["topics", "alter", "--topic", "no-such-topic", "--partitions", "9"], "does not exist"),
        (["topics", "alter", "--topic", "{existing}", "--partitions", "1"], "partitions"),
        (["topics", "create", "--topic", "{new}", "--replica-assignment", "1:x"], "1:x"),
        (["topics", "create", "--topic", "{new}", "--replica-assignment", "1:1"], "more than once"),
        (["topics", "create", "--topic", "{new}", "--replica-assignment", "1,1:2"], "replicas"),
        (["topics", "create", "--topic", "{new}", "--replica-assignment", "1,7"], "broker 7"),
        (["topics", "create", "--topic", "{new}", "--config", "retention.ms"], "KEY=VALUE"),
        (["topics", "create", "--topic", "{new}", "--config", "retention.ms=abc"], "retention"),
        (["topics", "create", "--topic", "{new}", "--config", "no.such=1"], "no.such"),
        (["topics", "create", "--topic", "{new}", "--replication-factor", "3"], "factor"),
        (["topics", "create", "--topic", "bad name!"], "illegal"),
        (["topics", "list", "--partitions", "3"], "--partitions"),
        (["topics", "--topic", "{existing}"], "exactly one action"),
        (["consume", "--topic", "{existing}", "--partition", "5"], "no partition 5"),
        (["consume", "--topic", "{existing}", "--offset", "3"], "--partition"),
        (["consume", "--topic", "{existing}", "--property", "print.keys=true"], "print.keys"),
        (["produce", "--topic", "{existing}", "--partition", "5"], "no partition 5"),
        (["produce", "--topic", "{existing}", "--property", "parse.key=true"], "line 1"),
        (["produce", "--topic", "{existing}", "--producer-property", "no.such=1"], "no.such"),
    ],
)
def test_mistakes_are_one_line_and_a_non_zero_exit(
    cli: Cli, existing_topic: str, argv: list[str], fragment: str
) -> None:
    args = [a.format(existing=existing_topic, new=new_topic()) for a in argv]
    result = cli(*args, stdin="no separator here\n")
    assert_one_line_error(result, args[0], fragment)


@pytest.fixture(scope="module")
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "list"],
        ["topics", "create", "--topic", "t", "--partitions", "1"],
        ["produce", "--topic", "t"],
        ["consume", "--topic", "t", "--from-beginning"],
    ],
)
def test_an_unreachable_broker_is_one_line(cli: Cli, closed_port: int, argv: list[str]) -> None:
    bootstrap = f"127.0.0.1:{closed_port}"
    result = cli(*argv, stdin="a\n", bootstrap=bootstrap)
    assert_one_line_error(result, argv[0], f"cannot reach broker at {bootstrap}")


def test_consume_read_committed_shows_only_committed_records(cli: Cli) -> None:
    """`moldau consume --isolation-level read_committed`, as kafka-console-consumer's:
    a transaction's records once it commits, an aborted one's never."""
    from confluent_kafka import Producer

    topic = new_topic()
    cli.ok("topics", "create", "--topic", topic, "--partitions", "1")
    p = Producer({"bootstrap.servers": cli.bootstrap, "transactional.id": f"cli-{topic}"})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, b"kept")
    p.commit_transaction(20)
    p.begin_transaction()
    p.produce(topic, b"dropped")
    p.flush(10)
    p.abort_transaction(20)
    args = ("consume", "--topic", topic, "--from-beginning", "--timeout-ms", "2000")
    committed = cli.ok(*args, "--isolation-level", "read_committed")
    assert committed.lines == ["kept"]
    # Both records: it ends at the second rather than after the timeout.
    assert cli.ok(*args, "--max-messages", "2").lines == ["kept", "dropped"]


def test_a_reader_that_goes_away_ends_the_command_quietly(cli: Cli) -> None:
    # `moldau ... | head -0`: the pipe is closed before the command writes to it. It
    # must stop with a shell's exit status for SIGPIPE, not a traceback (consume
    # stops reading at once and exits 0; its own test is below).
    moldau = Path(sys.executable).parent / "moldau"
    proc = subprocess.Popen(
        [str(moldau), "broker-api-versions", "--bootstrap-server", cli.bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(30) == 141, err
        assert err == "", err
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
