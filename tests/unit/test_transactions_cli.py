"""kafka-transactions' tables, hanging-transaction search and abort checks, as
`moldau transactions` makes them (no broker: the requests are faked)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

import pytest

from moldau.cli.errors import CliError
from moldau.cli.main import build_parser, main
from moldau.cli.transactions import (
    OpenTransaction,
    abort_command,
    describe_row,
    find_hanging_command,
    hanging,
    hanging_candidates,
    list_rows,
    producer_rows,
    table,
)
from moldau.cli.transactions_admin import (
    AbortSpec,
    Description,
    Listing,
    ProducerState,
    RequestFailed,
)
from moldau.clock import FakeClock
from moldau.storage.partition_name import TopicPartition as TP

NOW = 1_700_000_000_000
MINUTE = 60_000


def producer(
    pid: int, start: int | None, last: int, coordinator_epoch: int | None = 3
) -> ProducerState:
    return ProducerState(pid, 2, 9, last, coordinator_epoch, start)


def test_tables_pad_each_column_to_its_widest_cell_and_end_every_cell_with_a_tab() -> None:
    lines = table(("A", "Long"), [["wide-cell", "x"], ["y", "z"]])
    assert lines == ["A        \tLong\t", "wide-cell\tx   \t", "y        \tz   \t"]
    assert table(("A", "B"), []) == ["A\tB\t"]


def test_list_rows_name_each_transactions_coordinator_in_broker_order() -> None:
    rows = list_rows(
        {
            2: [Listing("b", 7, "Ongoing")],
            1: [Listing("a", 5, "CompleteCommit"), Listing("c", 6, "Dead")],
        }
    )
    assert rows == [
        ["a", "1", "5", "CompleteCommit"],
        ["c", "1", "6", "Unknown"],  # a state Kafka's client does not know
        ["b", "2", "7", "Ongoing"],
    ]


def test_a_transactional_id_pattern_must_match_the_whole_id() -> None:
    listed = {1: [Listing("orders-1", 5, "Ongoing"), Listing("my-orders-1", 6, "Ongoing")]}
    rows = list_rows(listed, re.compile("orders-[0-9]+"))
    assert [r[0] for r in rows] == ["orders-1"]


def test_describe_shows_the_duration_of_an_open_transaction_and_none_without_one() -> None:
    d = Description(1, "tx", 5, 0, "Ongoing", 60000, NOW - 1500, (TP("t", 1), TP("s", 0)))
    assert describe_row(d, NOW) == [
        "1", "tx", "5", "0", "Ongoing", "60000", str(NOW - 1500), "1500", "s-0,t-1",
    ]  # fmt: skip
    empty = Description(1, "tx", 5, 0, "Empty", 60000, None, ())
    assert describe_row(empty, NOW)[6:] == ["None", "None", ""]


def test_producer_rows_show_a_missing_coordinator_epoch_as_minus_one_and_no_txn_as_none() -> None:
    rows = producer_rows([producer(5, None, NOW, None), producer(6, 42, NOW)])
    assert rows == [
        ["5", "2", "-1", "9", str(NOW), "None"],
        ["6", "2", "3", "9", str(NOW), "42"],
    ]


def test_hanging_candidates_are_open_transactions_silent_for_longer_than_the_timeout() -> None:
    old, recent, closed = (
        producer(1, 10, NOW - 16 * MINUTE),
        producer(2, 20, NOW - 14 * MINUTE),
        producer(3, None, NOW - 60 * MINUTE),
    )
    found = hanging_candidates({TP("t", 0): [old, recent, closed]}, NOW, 15 * MINUTE)
    assert found == [OpenTransaction(TP("t", 0), old)]


def test_a_candidate_hangs_unless_its_coordinator_still_counts_the_partition_in() -> None:
    unknown_id = OpenTransaction(TP("t", 0), producer(1, 10, 0))
    still_in = OpenTransaction(TP("t", 0), producer(2, 10, 0))
    moved_on = OpenTransaction(TP("t", 1), producer(2, 30, 0))
    forgotten = OpenTransaction(TP("t", 2), producer(3, 40, 0))
    ongoing = Description(1, "tx2", 2, 0, "Ongoing", 60000, 0, (TP("t", 0),))
    found = hanging(
        [unknown_id, still_in, moved_on, forgotten],
        {2: "tx2", 3: "tx3"},
        {"tx2": ongoing, "tx3": None},
    )
    assert found == [unknown_id, moved_on, forgotten]


class FakeAdmin:
    """The requests abort and find-hanging make, answered from tables."""

    def __init__(self, producers: dict[TP, list[ProducerState]]) -> None:
        self._producers = producers
        self.aborted: list[AbortSpec] = []
        self.listed: list[int] | None = None

    def producers(
        self, partitions: Sequence[TP], broker_id: int | None = None
    ) -> dict[TP, list[ProducerState]]:
        if any(tp not in self._producers for tp in partitions):
            raise RequestFailed("This server does not host this topic-partition.")
        return {tp: self._producers[tp] for tp in partitions}

    def abort(self, spec: AbortSpec) -> None:
        self.aborted.append(spec)

    def partitions(self, topics: list[str] | None, broker_id: int | None) -> list[TP]:
        return sorted(tp for tp in self._producers if topics is None or tp.topic in topics)

    def list_transactions(self, producer_ids: Sequence[int] = ()) -> dict[int, list[Listing]]:
        self.listed = list(producer_ids)
        return {1: [Listing("tx", 2, "Ongoing")]}

    def describe(self, tid: str) -> Description | None:
        return Description(1, tid, 2, 0, "Ongoing", 60000, 0, (TP("t", 0),))


def args_of(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["transactions", "--bootstrap-server", "h:1", *argv])


def test_abort_by_start_offset_aborts_the_producer_whose_transaction_starts_there() -> None:
    admin = FakeAdmin({TP("t", 0): [producer(5, 100, NOW), producer(6, 200, NOW, None)]})
    args = args_of("abort", "--topic", "t", "--partition", "0", "--start-offset", "200")
    assert abort_command(admin, args, FakeClock(NOW)) == 0  # type: ignore[arg-type]
    # No coordinator epoch yet (-1): 0, which no coordinator's is below.
    assert admin.aborted == [AbortSpec(TP("t", 0), 6, 2, 0)]
    assert str(admin.aborted[0]) == (
        "AbortTransactionSpec(topicPartition=t-0, producerId=6, producerEpoch=2, "
        "coordinatorEpoch=0)"
    )


def test_abort_refuses_a_start_offset_where_no_transaction_starts() -> None:
    admin = FakeAdmin({TP("t", 0): [producer(5, 100, NOW)]})
    args = args_of("abort", "--topic", "t", "--partition", "0", "--start-offset", "7")
    with pytest.raises(CliError) as e:
        abort_command(admin, args, FakeClock(NOW))  # type: ignore[arg-type]
    assert (
        str(e.value) == "Could not find any open transactions starting at offset 7 on partition t-0"
    )
    assert admin.aborted == []


def test_abort_by_producer_id_aborts_as_told() -> None:
    admin = FakeAdmin({})
    args = args_of("abort", "--topic", "t", "--partition", "3", "--producer-id", "5",
                   "--producer-epoch", "1", "--coordinator-epoch", "4")  # fmt: skip
    assert abort_command(admin, args, FakeClock(NOW)) == 0  # type: ignore[arg-type]
    assert admin.aborted == [AbortSpec(TP("t", 3), 5, 1, 4)]


def test_find_hanging_prints_only_the_transactions_no_coordinator_will_finish(
    capsys: pytest.CaptureFixture[str],
) -> None:
    admin = FakeAdmin(
        {
            TP("t", 0): [producer(2, 10, NOW - 20 * MINUTE)],  # tx's partition: not hanging
            TP("t", 1): [producer(2, 50, NOW - 20 * MINUTE), producer(9, 60, NOW - 90 * MINUTE)],
        }
    )
    args = args_of("find-hanging", "--topic", "t")
    assert find_hanging_command(admin, args, FakeClock(NOW)) == 0  # type: ignore[arg-type]
    assert admin.listed == [2, 9]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines] == [
        ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
         "LastTimestamp", "Duration(min)"],
        ["t", "1", "2", "2", "3", "50", str(NOW - 20 * MINUTE), "20"],
        ["t", "1", "9", "2", "3", "60", str(NOW - 90 * MINUTE), "90"],
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["abort", "--topic", "t", "--partition", "0"],
         "must be identified either with --start-offset"),
        (["abort", "--topic", "t", "--partition", "0", "--producer-id", "5"],
         "Missing required argument --producer-epoch"),
        (["abort", "--topic", "t", "--partition", "0", "--producer-id", "5",
          "--producer-epoch", "1"], "Missing required argument --coordinator-epoch"),
        (["find-hanging"], "requires either --topic or --broker-id"),
        (["find-hanging", "--partition", "1", "--broker-id", "1"],
         "The --partition argument requires --topic to be provided"),
    ],
)  # fmt: skip
def test_a_command_without_what_it_needs_fails_with_one_line_before_connecting(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # No request is made: the broker's address is not even a valid one.
    assert main(["transactions", "--bootstrap-server", "nowhere", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("moldau transactions: ") and message in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["list", "--state", "Running"], "'Running' is not a transaction state"),
        (["list", "--transactional-id-pattern", "("], "'(' is not a regular expression"),
        (["describe"], "the following arguments are required: --transactional-id"),
        (["describe-producers", "--topic", "t", "--partition", "x"], "invalid int value"),
        (["abort", "--topic", "t", "--partition", "0", "--producer-epoch", "40000"],
         "not a producer epoch"),
        (["nonsense"], "invalid choice"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused_before_any_request(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["transactions", "--bootstrap-server", "127.0.0.1:1", *argv])
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_the_connection_may_come_before_or_after_the_command() -> None:
    for argv in (
        ["transactions", "--bootstrap-server", "h:1", "--command-config", "c", "list"],
        ["transactions", "list", "--bootstrap-server", "h:1", "--command-config", "c"],
    ):
        args = build_parser().parse_args(argv)
        assert (args.bootstrap_server, str(args.command_config)) == ("h:1", "c")


def test_without_a_bootstrap_server_nothing_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["transactions", "list"]) == 2
    assert capsys.readouterr().err == (
        "moldau transactions: the following arguments are required: --bootstrap-server\n"
    )
