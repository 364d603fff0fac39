"""`moldau transactions`: look at and repair the transactions of a cluster, as
kafka-transactions.sh does (KIP-664), with its sub-commands, columns, messages and
exit codes:

    list [--state S ...] [--producer-id P ...] [--duration-filter MS]
         [--transactional-id-pattern REGEX]
    describe --transactional-id X
    describe-producers --topic T --partition P [--broker-id B]
    abort --topic T --partition P (--start-offset O
                                   | --producer-id P --producer-epoch E --coordinator-epoch C)
    find-hanging (--broker-id B | --topic T [--partition P]) [--max-transaction-timeout MIN]

The requests are cli/transactions_admin.py's; here are the tables and the decisions.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from moldau.cli.admin_call import AdminCalls
from moldau.cli.common import TIMEOUT_S, add_command_config_argument, read_config_file
from moldau.cli.errors import CliError
from moldau.cli.transactions_admin import (
    STATES,
    AbortSpec,
    Description,
    Listing,
    ProducerState,
    RequestFailed,
    TxnAdmin,
    state_name,
)
from moldau.clock import SYSTEM_CLOCK, Clock
from moldau.storage.partition_name import TopicPartition

T = TypeVar("T")

#: find-hanging's MAX_BATCH_SIZE: partitions per DescribeProducers request.
BATCH = 500
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15


@dataclass(frozen=True)
class OpenTransaction:
    partition: TopicPartition
    producer: ProducerState


# -- the tables, as Kafka prints them -----------------------------------------------------

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)
PRODUCER_HEADERS = (
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
)
HANGING_HEADERS = (
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
)


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Kafka's ToolsUtils.prettyPrintTable: each cell padded to its column's width and
    followed by a tab (so a line ends in one), the header first."""
    rows = [list(r) for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    return [
        "".join(cell.ljust(width) + "\t" for cell, width in zip(row, widths, strict=True))
        for row in [list(headers), *rows]
    ]


def list_rows(
    by_broker: Mapping[int, Sequence[Listing]], pattern: re.Pattern[str] | None = None
) -> list[list[str]]:
    """The listing, coordinator by coordinator; with `pattern`, only the transactional
    ids it matches whole (as Kafka's coordinator matches --transactional-id-pattern,
    here on the tool's side: Moldau serves ListTransactions up to v1, without it)."""
    return [
        [t.transactional_id, str(broker), str(t.producer_id), state_name(t.state)]
        for broker in sorted(by_broker)
        for t in by_broker[broker]
        if pattern is None or pattern.fullmatch(t.transactional_id)
    ]


def describe_row(d: Description, now_ms: int) -> list[str]:
    started = "None" if d.start_time_ms is None else str(d.start_time_ms)
    duration = "None" if d.start_time_ms is None else str(now_ms - d.start_time_ms)
    return [
        str(d.coordinator_id),
        d.transactional_id,
        str(d.producer_id),
        str(d.producer_epoch),
        state_name(d.state),
        str(d.timeout_ms),
        started,
        duration,
        ",".join(str(tp) for tp in sorted(d.partitions)),
    ]


def producer_rows(producers: Iterable[ProducerState]) -> list[list[str]]:
    return [
        [
            str(p.producer_id),
            str(p.producer_epoch),
            str(-1 if p.coordinator_epoch is None else p.coordinator_epoch),
            str(p.last_sequence),
            str(p.last_timestamp),
            "None" if p.txn_start_offset is None else str(p.txn_start_offset),
        ]
        for p in producers
    ]


def open_transaction_at(producers: Iterable[ProducerState], start_offset: int) -> ProducerState:
    """The producer whose open transaction starts at `start_offset` (abort --start-offset)."""
    for p in producers:
        if p.txn_start_offset == start_offset:
            return p
    raise LookupError(start_offset)


def hanging_candidates(
    producers: Mapping[TopicPartition, Sequence[ProducerState]], now_ms: int, max_timeout_ms: int
) -> list[OpenTransaction]:
    """Open transactions whose producer has written nothing for longer than any
    transaction may last: no coordinator would still let them run."""
    return [
        OpenTransaction(tp, p)
        for tp, states in producers.items()
        for p in states
        if p.txn_start_offset is not None and now_ms - p.last_timestamp > max_timeout_ms
    ]


def hanging(
    candidates: Iterable[OpenTransaction],
    transactional_ids: Mapping[int, str],
    descriptions: Mapping[str, Description | None],
) -> list[OpenTransaction]:
    """Kafka's filterHangingTransactions: a candidate hangs unless its coordinator
    still counts its partition in the transaction (ongoing, or markers not yet
    written), which it cannot if it knows no transactional id for the producer."""
    out = []
    for c in candidates:
        tid = transactional_ids.get(c.producer.producer_id)
        d = descriptions.get(tid) if tid is not None else None
        if d is None or c.partition not in d.partitions:
            out.append(c)
    return out


def hanging_rows(transactions: Iterable[OpenTransaction], now_ms: int) -> list[list[str]]:
    return [
        [
            t.partition.topic,
            str(t.partition.partition),
            str(t.producer.producer_id),
            str(t.producer.producer_epoch),
            str(-1 if t.producer.coordinator_epoch is None else t.producer.coordinator_epoch),
            str(-1 if t.producer.txn_start_offset is None else t.producer.txn_start_offset),
            str(t.producer.last_timestamp),
            str((now_ms - t.producer.last_timestamp) // 60_000),
        ]
        for t in transactions
    ]


def _batches(items: Sequence[T], size: int) -> Iterable[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# -- the sub-commands ---------------------------------------------------------------------


def _print(lines: Iterable[str]) -> None:
    for line in lines:
        print(line)


def _failed(what: str, e: Exception) -> CliError:
    return CliError(f"{what}: {e}")


def list_command(admin: TxnAdmin, args: argparse.Namespace, clock: Clock) -> int:
    try:
        listed = admin.list_transactions(
            args.state or (), args.producer_id or (), args.duration_filter
        )
    except RequestFailed as e:
        raise _failed("Failed to list transactions", e) from None
    _print(table(LIST_HEADERS, list_rows(listed, args.transactional_id_pattern)))
    return 0


def describe_command(admin: TxnAdmin, args: argparse.Namespace, clock: Clock) -> int:
    tid = args.transactional_id
    what = f"Failed to describe transaction state of transactional-id `{tid}`"
    try:
        d = admin.describe(tid)
    except RequestFailed as e:
        raise _failed(what, e) from None
    if d is None:
        raise CliError(
            f"{what}: DescribeTransactions request for transactionalId `{tid}` "
            "failed because the ID could not be found"
        )
    _print(table(DESCRIBE_HEADERS, [describe_row(d, clock.milliseconds())]))
    return 0


def describe_producers_command(admin: TxnAdmin, args: argparse.Namespace, clock: Clock) -> int:
    tp = TopicPartition(args.topic, args.partition)
    where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
    try:
        producers = admin.producers([tp], args.broker_id)[tp]
    except RequestFailed as e:
        raise _failed(f"Failed to describe producers for partition {tp} on {where}", e) from None
    _print(table(PRODUCER_HEADERS, producer_rows(producers)))
    return 0


def abort_command(admin: TxnAdmin, args: argparse.Namespace, clock: Clock) -> int:
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is not None:
        try:
            producers = admin.producers([tp])[tp]
        except RequestFailed as e:
            raise _failed(f"Failed to validate producer state for partition {tp}", e) from None
        try:
            p = open_transaction_at(producers, args.start_offset)
        except LookupError:
            raise CliError(
                f"Could not find any open transactions starting at offset "
                f"{args.start_offset} on partition {tp}"
            ) from None
        spec = AbortSpec(tp, p.producer_id, p.producer_epoch, p.coordinator_epoch or 0)
    else:
        # A transaction left hanging before its producer's first commit or abort has no
        # coordinator epoch (-1 in describe-producers); 0 is no newer than any.
        spec = AbortSpec(tp, args.producer_id, args.producer_epoch, max(0, args.coordinator_epoch))
    try:
        admin.abort(spec)
    except RequestFailed as e:
        raise _failed(f"Failed to abort transaction {spec}", e) from None
    return 0


def find_hanging_command(admin: TxnAdmin, args: argparse.Namespace, clock: Clock) -> int:
    max_timeout_ms = args.max_transaction_timeout * 60_000
    if args.partition is not None:
        partitions = [TopicPartition(args.topic, args.partition)]
    else:
        try:
            partitions = admin.partitions(
                None if args.topic is None else [args.topic], args.broker_id
            )
        except RequestFailed as e:
            raise _failed("Failed to describe topics", e) from None
    candidates: list[OpenTransaction] = []
    for batch in _batches(partitions, BATCH):
        try:
            producers = admin.producers(batch, args.broker_id)
        except RequestFailed as e:
            where = "" if args.broker_id is None else f" on broker {args.broker_id}"
            raise _failed(
                f"Failed to describe producers for {len(batch)} partitions{where}", e
            ) from None
        candidates += hanging_candidates(producers, clock.milliseconds(), max_timeout_ms)
    found: list[OpenTransaction] = []
    if candidates:
        pids = sorted({c.producer.producer_id for c in candidates})
        try:
            listed = admin.list_transactions(producer_ids=pids)
        except RequestFailed as e:
            raise _failed(f"Failed to list transactions for {len(pids)} producers", e) from None
        tids = {
            t.producer_id: t.transactional_id
            for ts in listed.values()
            for t in ts
            if t.producer_id in pids
        }
        descriptions: dict[str, Description | None] = {}
        for tid in sorted(set(tids.values())):
            try:
                descriptions[tid] = admin.describe(tid)
            except RequestFailed as e:
                raise _failed(
                    f"Failed to describe {len(set(tids.values()))} transactions", e
                ) from None
        found = hanging(candidates, tids, descriptions)
    _print(table(HANGING_HEADERS, hanging_rows(found, clock.milliseconds())))
    return 0


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse, before connecting, what argparse cannot: abort's two ways to name a
    transaction, find-hanging's scope (Kafka's messages)."""
    if not args.bootstrap_server:
        raise CliError("the following arguments are required: --bootstrap-server", exit_code=2)
    if args.txn_command == "abort":
        if args.start_offset is None and args.producer_id is None:
            raise CliError(
                "The transaction to abort must be identified either with --start-offset "
                "(for brokers on 3.0 or above) or with --producer-id, --producer-epoch, "
                "and --coordinator-epoch (for older brokers)"
            )
        if args.start_offset is None and args.producer_epoch is None:
            raise CliError("Missing required argument --producer-epoch")
        if args.start_offset is None and args.coordinator_epoch is None:
            raise CliError("Missing required argument --coordinator-epoch")
    if args.txn_command == "find-hanging":
        if args.topic is None and args.broker_id is None:
            raise CliError(
                "The `find-hanging` command requires either --topic or --broker-id to "
                "limit the scope of the search"
            )
        if args.partition is not None and args.topic is None:
            raise CliError("The --partition argument requires --topic to be provided")


_COMMANDS: dict[str, Callable[[TxnAdmin, argparse.Namespace, Clock], int]] = {
    "list": list_command,
    "describe": describe_command,
    "describe-producers": describe_producers_command,
    "abort": abort_command,
    "find-hanging": find_hanging_command,
}


# -- the command line ---------------------------------------------------------------------


def _state(text: str) -> str:
    for state in STATES:
        if state.lower() == text.lower():
            return state
    raise argparse.ArgumentTypeError(f"{text!r} is not a transaction state: " + ", ".join(STATES))


def _pattern(text: str) -> re.Pattern[str] | None:
    try:
        return re.compile(text) if text else None  # empty: no filter, as Kafka
    except re.error as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {e}") from None


def _epoch(text: str) -> int:
    value = int(text)
    if not -(2**15) <= value < 2**15:
        raise argparse.ArgumentTypeError(f"{text} is not a producer epoch (a 16-bit number)")
    return value


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "transactions",
        help="list, describe and abort transactions, as kafka-transactions.sh",
        description="Analyze the transactional state of producers in the cluster; detect "
        "and recover from hanging transactions, as kafka-transactions.sh does.",
    )
    # As kafka-transactions.sh, the connection comes before COMMAND; as the other moldau
    # commands, it may come after it too (SUPPRESS: not given there, the first stands).
    p.add_argument("--bootstrap-server", dest="bootstrap_server", metavar="HOST:PORT",
                   help="the broker(s) to connect to, comma-separated (required)")  # fmt: skip
    add_command_config_argument(p)
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--bootstrap-server", dest="bootstrap_server",
                            default=argparse.SUPPRESS, help=argparse.SUPPRESS)  # fmt: skip
    connection.add_argument("--command-config", type=Path, default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)  # fmt: skip
    commands = p.add_subparsers(dest="txn_command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(name, parents=[connection], help=help)
        return parser

    c = command("list", help="list transactions")
    c.add_argument(
        "--state",
        nargs="+",
        type=_state,
        metavar="STATE",
        help="only transactions in these states: " + ", ".join(STATES),
    )
    c.add_argument(
        "--producer-id",
        nargs="+",
        type=int,
        metavar="ID",
        help="only the transactions of these producer ids",
    )
    c.add_argument(
        "--duration-filter",
        type=int,
        default=-1,
        metavar="MS",
        help="only transactions running longer than this many ms (< 0: all)",
    )
    c.add_argument(
        "--transactional-id-pattern",
        type=_pattern,
        metavar="REGEX",
        help="only the transactional ids this regular expression matches whole",
    )

    c = command("describe", help="describe the state of an active transactional-id")
    c.add_argument("--transactional-id", required=True, help="transactional id")

    c = command(
        "describe-producers", help="describe the states of active producers for a topic partition"
    )
    c.add_argument(
        "--broker-id",
        type=int,
        help="describe the producer state on this replica rather than the leader",
    )
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partition", type=int, required=True, help="partition number")

    c = command("abort", help="abort a hanging transaction (requires administrative privileges)")
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partition", type=int, required=True, help="partition number")
    g = c.add_argument_group(
        "Brokers on versions 3.0 and above",
        "only the start offset of the transaction to abort is needed",
    )
    g.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    g = c.add_argument_group("Brokers on versions older than 3.0", "all of these are needed")
    g.add_argument("--producer-id", type=int, help="producer id")
    g.add_argument("--producer-epoch", type=_epoch, help="producer epoch")
    g.add_argument("--coordinator-epoch", type=int, help="coordinator epoch")

    c = command("find-hanging", help="find hanging transactions")
    c.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    c.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
        metavar="MINUTES",
        help="maximum transaction timeout in minutes to limit the scope of the "
        "search (default %(default)s)",
    )
    c.add_argument("--topic", help="topic name to limit search to (needed with --partition)")
    c.add_argument("--partition", type=int, help="partition number")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, clock: Clock = SYSTEM_CLOCK) -> int:
    check_arguments(args)
    settings = read_config_file(args.command_config, "--command-config")
    with AdminCalls("kafka-transactions-tool", TIMEOUT_S, settings) as calls:
        admin = TxnAdmin(args, calls)
        return _COMMANDS[args.txn_command](admin, args, clock)
