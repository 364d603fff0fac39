"""`moldau transactions` against a real broker process, with real confluent-kafka
transactional producers: what kafka-transactions.sh's sub-commands print for a user
to read, the transaction an abort ends for read_committed consumers, and a user's
mistakes and an unreachable broker as one line on stderr and a non-zero exit."""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.cli.main import main

pytestmark = pytest.mark.integration

TXN_TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def rows(self) -> list[dict[str, str]]:
        """The table printed, as dicts by header (cells are tab-separated, padded)."""
        lines = self.out.splitlines()
        header = [h.strip() for h in lines[0].split("\t")[:-1]]
        return [
            dict(zip(header, (c.strip() for c in line.split("\t")[:-1]), strict=True))
            for line in lines[1:]
        ]


class Cli:
    def __init__(self, capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
        self.capsys = capsys
        self.bootstrap = bootstrap

    def __call__(self, *args: str, bootstrap: str | None = None) -> Result:
        self.capsys.readouterr()
        code = main(["transactions", "--bootstrap-server", bootstrap or self.bootstrap, *args])
        captured = self.capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def ok(self, *args: str) -> Result:
        result = self(*args)
        assert result.code == 0, result.err
        assert result.err == ""
        return result

    def fails(self, *args: str, bootstrap: str | None = None) -> str:
        """The one line a failing command prints on stderr."""
        result = self(*args, bootstrap=bootstrap)
        assert result.code == 1
        assert result.out == ""
        lines = result.err.splitlines()
        assert len(lines) == 1, result.err
        assert lines[0].startswith("moldau transactions: ")
        return lines[0].removeprefix("moldau transactions: ")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], bootstrap: str) -> Cli:
    return Cli(capsys, bootstrap)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def topic(bootstrap: str) -> str:
    name = _name("txn-cli")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)
    return name


class Producers:
    """Transactional producers a test opens; whatever they leave open is aborted."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.open: list[Producer] = []

    def begin(self, topic: str, partition: int = 0, records: int = 3) -> tuple[str, Producer]:
        """A new transactional id with a transaction left open after `records` records."""
        tid = _name("tx")
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": tid,
                      "transaction.timeout.ms": TXN_TIMEOUT_MS})  # fmt: skip
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(records):
            p.produce(topic, value=b"v%d" % i, partition=partition)
        assert p.flush(30) == 0
        self.open.append(p)
        return tid, p

    def committed(self, topic: str, partition: int = 0, records: int = 3) -> tuple[str, Producer]:
        tid, p = self.begin(topic, partition, records)
        p.commit_transaction(30)
        self.open.remove(p)
        return tid, p

    def close(self) -> None:
        for p in self.open:
            with contextlib.suppress(Exception):  # the test may have ended it another way
                p.abort_transaction(30)


@pytest.fixture
def producers(bootstrap: str) -> Iterator[Producers]:
    made = Producers(bootstrap)
    yield made
    made.close()


def _last_stable_offset(bootstrap: str, topic: str, partition: int) -> int:
    """What a read_committed consumer may read up to (ListOffsets at read_committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("g"),
                         "isolation.level": "read_committed"})  # fmt: skip
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(high)
    finally:
        consumer.close()


def _mine(rows: list[dict[str, str]], *tids: str) -> dict[str, dict[str, str]]:
    return {r["TransactionalId"]: r for r in rows if r["TransactionalId"] in tids}


def test_list_shows_each_transaction_with_its_coordinator_and_filters_them(
    cli: Cli, producers: Producers, topic: str
) -> None:
    done, _ = producers.committed(topic)
    running, _ = producers.begin(topic)
    listed = cli.ok("list")
    assert listed.out.splitlines()[0].split() == [
        "TransactionalId", "Coordinator", "ProducerId", "TransactionState",
    ]  # fmt: skip
    mine = _mine(listed.rows(), done, running)
    assert {t: r["TransactionState"] for t, r in mine.items()} == {
        done: "CompleteCommit",
        running: "Ongoing",
    }
    assert all(r["Coordinator"].isdigit() for r in mine.values())

    ongoing = _mine(cli.ok("list", "--state", "Ongoing").rows(), done, running)
    assert list(ongoing) == [running]
    by_producer = cli.ok("list", "--producer-id", mine[done]["ProducerId"]).rows()
    assert [r["TransactionalId"] for r in by_producer] == [done]
    # A pattern matches whole ids.
    by_id = cli.ok("list", "--transactional-id-pattern", running[:-1] + ".").rows()
    assert [r["TransactionalId"] for r in by_id] == [running]
    assert cli.ok("list", "--transactional-id-pattern", running[:-1]).rows() == []
    # None of them has been running for an hour.
    assert _mine(cli.ok("list", "--duration-filter", "3600000").rows(), done, running) == {}


def test_describe_shows_an_open_transactions_partitions_and_timeout(
    cli: Cli, producers: Producers, topic: str
) -> None:
    tid, _ = producers.begin(topic, partition=1)
    (row,) = cli.ok("describe", "--transactional-id", tid).rows()
    assert row["TransactionalId"] == tid
    assert row["TransactionState"] == "Ongoing"
    assert row["TransactionTimeoutMs"] == str(TXN_TIMEOUT_MS)
    assert row["TopicPartitions"] == f"{topic}-1"
    assert row["ProducerEpoch"] == "0"
    assert 0 <= int(row["TransactionDurationMs"]) < TXN_TIMEOUT_MS
    listed = _mine(cli.ok("list").rows(), tid)[tid]
    assert (row["CoordinatorId"], row["ProducerId"]) == (
        listed["Coordinator"],
        listed["ProducerId"],
    )


def test_describe_producers_shows_where_the_open_transaction_starts(
    cli: Cli, producers: Producers, topic: str
) -> None:
    producers.committed(topic, records=3)  # offsets 0-2, its commit marker 3
    tid, _ = producers.begin(topic, records=2)  # from offset 4
    pid = _mine(cli.ok("list").rows(), tid)[tid]["ProducerId"]
    rows = cli.ok("describe-producers", "--topic", topic, "--partition", "0").rows()
    starts = {r["ProducerId"]: r["CurrentTransactionStartOffset"] for r in rows}
    assert len(starts) == 2
    assert starts.pop(pid) == "4"
    assert list(starts.values()) == ["None"]
    assert {r["LastSequence"] for r in rows} == {"1", "2"}
    # The other partition has no producer: the header alone.
    empty = cli.ok("describe-producers", "--topic", topic, "--partition", "1")
    assert empty.rows() == [] and empty.out.startswith("ProducerId\tProducerEpoch\t")


def test_abort_ends_the_transaction_starting_at_an_offset_for_read_committed_readers(
    cli: Cli, producers: Producers, topic: str, bootstrap: str
) -> None:
    producers.committed(topic, records=2)  # offsets 0-1, marker 2
    producers.begin(topic, records=3)  # offsets 3-5
    assert _last_stable_offset(bootstrap, topic, 0) == 3
    assert cli.ok("abort", "--topic", topic, "--partition", "0", "--start-offset", "3").out == ""
    # The abort marker at 6 ends it: everything is stable.
    assert _last_stable_offset(bootstrap, topic, 0) == 7
    rows = cli.ok("describe-producers", "--topic", topic, "--partition", "0").rows()
    assert {r["CurrentTransactionStartOffset"] for r in rows} == {"None"}
    # Nothing is left to abort there.
    assert cli.fails("abort", "--topic", topic, "--partition", "0", "--start-offset", "3") == (
        f"Could not find any open transactions starting at offset 3 on partition {topic}-0"
    )


def test_find_hanging_leaves_out_transactions_their_coordinator_is_running(
    cli: Cli, producers: Producers, topic: str
) -> None:
    producers.begin(topic)
    # Even with no time allowed, the coordinator still counts the partition in.
    for scope in (["--topic", topic], ["--topic", topic, "--partition", "0"]):
        found = cli.ok("find-hanging", *scope, "--max-transaction-timeout", "0")
        assert found.rows() == []
        assert found.out.split() == [
            "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
            "StartOffset", "LastTimestamp", "Duration(min)",
        ]  # fmt: skip


def test_mistakes_are_one_line_and_exit_1(cli: Cli, topic: str) -> None:
    assert cli.fails("describe", "--transactional-id", "no-such-id") == (
        "Failed to describe transaction state of transactional-id `no-such-id`: "
        "DescribeTransactions request for transactionalId `no-such-id` failed because the ID "
        "could not be found"
    )
    assert cli.fails("describe-producers", "--topic", topic, "--partition", "7") == (
        f"Failed to describe producers for partition {topic}-7 on leader: "
        "This server does not host this topic-partition."
    )
    assert "not in the cluster" in cli.fails(
        "describe-producers", "--topic", topic, "--partition", "0", "--broker-id", "99"
    )
    assert "does not exist" in cli.fails("find-hanging", "--topic", _name("missing"))
    assert "requires either --topic or --broker-id" in cli.fails("find-hanging")


@pytest.fixture(scope="module")
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["describe", "--transactional-id", "t"],
        ["describe-producers", "--topic", "t", "--partition", "0"],
        ["abort", "--topic", "t", "--partition", "0", "--start-offset", "0"],
        ["find-hanging", "--broker-id", "1"],
    ],
)
def test_an_unreachable_broker_is_one_line(cli: Cli, closed_port: int, argv: list[str]) -> None:
    bootstrap = f"127.0.0.1:{closed_port}"
    assert cli.fails(*argv, bootstrap=bootstrap).startswith(f"cannot reach broker at {bootstrap}")
