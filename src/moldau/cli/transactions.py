"""`moldau transactions`: look at and repair the transactions of a cluster, as
kafka-transactions.sh does (KIP-664), with its sub-commands, columns, messages and
exit codes:

    list [--state S ...] [--producer-id P ...] [--duration-filter MS]
    describe --transactional-id X
    describe-producers --topic T --partition P [--broker-id B]
    abort --topic T --partition P (--start-offset O
                                   | --producer-id P --producer-epoch E --coordinator-epoch C)
    find-hanging (--broker-id B | --topic T [--partition P]) [--max-transaction-timeout MIN]

confluent-kafka has no call for these APIs: the requests (ListTransactions,
FindCoordinator for a transactional id, DescribeTransactions, DescribeProducers,
WriteTxnMarkers) go on the wire through cli/admin_call.py, to the brokers Metadata
names (fetched through librdkafka, which also notices an unreachable broker).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from moldau.cli.admin_call import AdminCalls, CallError
from moldau.cli.common import (
    TIMEOUT_S,
    add_bootstrap_argument,
    add_command_config_argument,
    admin_client,
    fetch_metadata,
)
from moldau.cli.errors import CliError
from moldau.clock import SYSTEM_CLOCK, Clock
from moldau.protocol.errors import ErrorCode
from moldau.storage.partition_name import TopicPartition

T = TypeVar("T")

# The APIs and the versions sent: the newest that both Moldau and Kafka 3.x/4.x serve.
FIND_COORDINATOR, FIND_COORDINATOR_VERSION = 10, 4
WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION = 27, 1
DESCRIBE_PRODUCERS, DESCRIBE_PRODUCERS_VERSION = 61, 0
DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION = 65, 0
LIST_TRANSACTIONS, LIST_TRANSACTIONS_VERSION = 66, 1
TRANSACTION_KEY_TYPE = 1

#: The states Kafka's admin client knows; any other a broker sends is shown as Unknown.
STATES = (
    "Ongoing",
    "PrepareAbort",
    "PrepareCommit",
    "CompleteAbort",
    "CompleteCommit",
    "Empty",
    "PrepareEpochFence",
)
#: find-hanging's MAX_BATCH_SIZE: partitions per DescribeProducers request.
BATCH = 500
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15

# Kafka's text for the errors these commands can meet without a message of the broker's.
_ERROR_TEXT = {
    ErrorCode.unknown_server_error: (
        "The server experienced an unexpected error when processing the request."
    ),
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.not_leader_or_follower: (
        "For requests intended only for the leader, this error indicates that the broker is "
        "not the current leader. For requests intended for any replica, this error indicates "
        "that the broker is not a replica of the topic partition."
    ),
    ErrorCode.coordinator_load_in_progress: (
        "The coordinator is loading and hence can't process requests."
    ),
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.not_coordinator: "This is not the correct coordinator.",
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.unsupported_version: "The version of API is not supported.",
    ErrorCode.invalid_producer_epoch: "Producer attempted to produce with an old epoch.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
    ErrorCode.transactional_id_not_found: "The transactionalId could not be found.",
}


def error_text(code: ErrorCode, message: str | None = None) -> str:
    """An error as Kafka's client words it: the broker's message, else Kafka's own."""
    return message or _ERROR_TEXT.get(code) or code.name.upper()


class RequestFailed(Exception):
    """A request was answered with an error that retrying will not cure."""


# -- what the brokers answer --------------------------------------------------------------


@dataclass(frozen=True)
class Listing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class Description:
    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int | None
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None
    txn_start_offset: int | None


@dataclass(frozen=True)
class AbortSpec:
    partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int

    def __str__(self) -> str:
        return (
            f"AbortTransactionSpec(topicPartition={self.partition}, "
            f"producerId={self.producer_id}, producerEpoch={self.producer_epoch}, "
            f"coordinatorEpoch={self.coordinator_epoch})"
        )


@dataclass(frozen=True)
class OpenTransaction:
    partition: TopicPartition
    producer: ProducerState


def state_name(wire: str) -> str:
    return wire if wire in STATES else "Unknown"


def _ms(value: Any) -> int | None:
    """A timestamp field as ms since the epoch; None for -1 (kio gives None or a datetime)."""
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        return (value - epoch) // datetime.timedelta(milliseconds=1)
    return None if int(value) < 0 else int(value)


def _duration_ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def producer_state(p: Any) -> ProducerState:
    """A DescribeProducers entry; negative epochs and offsets mean none."""
    return ProducerState(
        int(p.producer_id),
        int(p.producer_epoch),
        int(p.last_sequence),
        int(p.last_timestamp),
        None if p.coordinator_epoch < 0 else int(p.coordinator_epoch),
        None if p.current_txn_start_offset < 0 else int(p.current_txn_start_offset),
    )


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


def list_rows(by_broker: Mapping[int, Sequence[Listing]]) -> list[list[str]]:
    return [
        [t.transactional_id, str(broker), str(t.producer_id), state_name(t.state)]
        for broker in sorted(by_broker)
        for t in by_broker[broker]
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


# -- talking to the cluster ---------------------------------------------------------------


class Retry(Exception):
    """An answer that asks to try again (a moved leader or coordinator, a loading one)."""


class TxnAdmin:
    """The requests of the sub-commands, each retried on the errors Kafka's admin
    client retries until the tool's timeout, then failed with the last reason."""

    def __init__(self, args: argparse.Namespace, calls: AdminCalls) -> None:
        self.admin, self.watch = admin_client(args)
        self.calls = calls

    def metadata(self) -> Any:
        return fetch_metadata(self.admin, self.watch)

    def _send(self, broker_id: int, api_key: int, version: int, fields: Mapping[str, Any]) -> Any:
        broker = self.metadata().brokers.get(broker_id)
        if broker is None:
            raise Retry(f"broker {broker_id} is not in the cluster")
        try:
            return self.calls.call((broker.host, broker.port), api_key, version, fields)
        except CallError as e:
            raise Retry(
                f"cannot reach broker {broker_id} at {e.address[0]}:{e.address[1]} ({e.reason})"
            ) from None

    @staticmethod
    def _retrying(attempt: Callable[[], T]) -> T:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                return attempt()
            except Retry as e:
                if time.monotonic() >= deadline:
                    raise RequestFailed(str(e)) from None
            time.sleep(0.1)

    def leader(self, tp: TopicPartition) -> int:
        """The partition's leader, from Metadata; RequestFailed for a partition that
        does not exist. (Metadata of all topics: asking for one by name would create
        it on a broker with auto.create.topics.enable.)"""
        t = self.metadata().topics.get(tp.topic)
        if t is None or (t.error is None and tp.partition not in t.partitions):
            raise RequestFailed(error_text(ErrorCode.unknown_topic_or_partition))
        p = t.partitions.get(tp.partition)
        if p is None or p.leader < 0:
            raise Retry(error_text(ErrorCode.leader_not_available))
        return int(p.leader)

    # ListTransactions, to every broker

    def list_transactions(
        self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1
    ) -> dict[int, list[Listing]]:
        fields = {
            "state_filters": tuple(states),
            "producer_id_filters": tuple(producer_ids),
            "duration_filter": duration_ms,
        }
        return {
            broker_id: self._retrying(functools.partial(self._list_on, broker_id, fields))
            for broker_id in sorted(self.metadata().brokers)
        }

    def _list_on(self, broker_id: int, fields: Mapping[str, Any]) -> list[Listing]:
        r = self._send(broker_id, LIST_TRANSACTIONS, LIST_TRANSACTIONS_VERSION, fields)
        code = ErrorCode(r.error_code)
        if code == ErrorCode.coordinator_load_in_progress:
            raise Retry(f"the coordinator on broker {broker_id} is loading")
        if code == ErrorCode.coordinator_not_available:
            raise RequestFailed(
                f"ListTransactions request sent to broker {broker_id} failed "
                "because the coordinator is shutting down"
            )
        if code != ErrorCode.none:
            raise RequestFailed(
                f"ListTransactions request sent to broker {broker_id} failed "
                f"with an unexpected exception: {error_text(code)}"
            )
        return [
            Listing(t.transactional_id, int(t.producer_id), t.transaction_state)
            for t in r.transaction_states
        ]

    # FindCoordinator and DescribeTransactions

    def coordinator(self, transactional_id: str) -> int:
        """The broker coordinating `transactional_id` (any broker can tell)."""
        brokers = sorted(self.metadata().brokers)
        if not brokers:
            raise Retry("no broker to ask")
        r = self._send(
            brokers[0],
            FIND_COORDINATOR,
            FIND_COORDINATOR_VERSION,
            {"key_type": TRANSACTION_KEY_TYPE, "coordinator_keys": (transactional_id,)},
        )
        c = r.coordinators[0]
        code = ErrorCode(c.error_code)
        if code == ErrorCode.none:
            return int(c.node_id)
        if code in (
            ErrorCode.coordinator_not_available,
            ErrorCode.not_coordinator,
            ErrorCode.coordinator_load_in_progress,
        ):
            raise Retry(error_text(code, c.error_message))
        raise RequestFailed(error_text(code, c.error_message))

    def describe(self, transactional_id: str) -> Description | None:
        """The transaction of `transactional_id`; None if its coordinator knows no such id."""
        return self._retrying(lambda: self._describe_once(transactional_id))

    def _describe_once(self, tid: str) -> Description | None:
        broker_id = self.coordinator(tid)
        r = self._send(
            broker_id,
            DESCRIBE_TRANSACTIONS,
            DESCRIBE_TRANSACTIONS_VERSION,
            {"transactional_ids": (tid,)},
        )
        for s in r.transaction_states:
            if s.transactional_id != tid:
                continue
            code = ErrorCode(s.error_code)
            if code == ErrorCode.transactional_id_not_found:
                return None
            if code in (
                ErrorCode.coordinator_load_in_progress,
                ErrorCode.not_coordinator,
                ErrorCode.coordinator_not_available,
            ):
                raise Retry(error_text(code))
            if code == ErrorCode.transactional_id_authorization_failed:
                raise RequestFailed(
                    f"DescribeTransactions request for transactionalId `{tid}` "
                    "failed due to authorization failure"
                )
            if code != ErrorCode.none:
                raise RequestFailed(
                    f"DescribeTransactions request for transactionalId `{tid}` "
                    f"failed due to unexpected error: {error_text(code)}"
                )
            return Description(
                broker_id,
                tid,
                int(s.producer_id),
                int(s.producer_epoch),
                s.transaction_state,
                _duration_ms(s.transaction_timeout),
                _ms(s.transaction_start_time),
                tuple(TopicPartition(t.topic, p) for t in s.topics for p in t.partitions),
            )
        raise Retry(f"broker {broker_id} did not describe `{tid}`")

    # DescribeProducers

    def producers(
        self, partitions: Sequence[TopicPartition], broker_id: int | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        """The active producers of each partition, from its leader or, given
        `broker_id`, from that replica."""
        if broker_id is not None and broker_id not in self.metadata().brokers:
            raise RequestFailed(f"broker {broker_id} is not in the cluster")
        out: dict[TopicPartition, list[ProducerState]] = {}
        todo = list(partitions)
        deadline = time.monotonic() + TIMEOUT_S
        while todo:
            by_broker: dict[int, list[TopicPartition]] = {}
            retry: list[TopicPartition] = []
            reason = ""
            for tp in todo:
                try:
                    target = broker_id if broker_id is not None else self.leader(tp)
                except Retry as e:
                    retry.append(tp)
                    reason = str(e)
                    continue
                by_broker.setdefault(target, []).append(tp)
            for target, tps in by_broker.items():
                try:
                    answered = self._producers_on(target, tps, broker_id is not None)
                except Retry as e:
                    retry += tps
                    reason = str(e)
                    continue
                for tp in tps:
                    if tp in answered:
                        out[tp] = answered[tp]
                    else:
                        retry.append(tp)
                        reason = error_text(ErrorCode.not_leader_or_follower)
            todo = retry
            if todo and time.monotonic() >= deadline:
                raise RequestFailed(reason)
            if todo:
                time.sleep(0.1)
        return out

    def _producers_on(
        self, broker_id: int, tps: Sequence[TopicPartition], pinned: bool
    ) -> dict[TopicPartition, list[ProducerState]]:
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        r = self._send(
            broker_id,
            DESCRIBE_PRODUCERS,
            DESCRIBE_PRODUCERS_VERSION,
            {"topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]},
        )
        out = {}
        for t in r.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                code = ErrorCode(p.error_code)
                if code == ErrorCode.none:
                    out[tp] = [producer_state(s) for s in p.active_producers]
                elif code == ErrorCode.not_leader_or_follower and not pinned:
                    continue  # the leader moved: looked up again
                elif code == ErrorCode.not_leader_or_follower:
                    raise RequestFailed(
                        f"Failed to describe active producers for partition {tp} "
                        f"on brokerId {broker_id}"
                    )
                elif code == ErrorCode.unknown_topic_or_partition:
                    raise RequestFailed(error_text(code, p.error_message))
                elif code == ErrorCode.topic_authorization_failed:
                    raise RequestFailed(
                        f"Failed to describe active producers for partition {tp} "
                        f"due to authorization failure on topic `{tp.topic}`"
                    )
                else:
                    raise RequestFailed(
                        f"Failed to describe active producers for partition {tp} "
                        f"due to unexpected error: "
                        f"{error_text(code, p.error_message)}"
                    )
        return out

    # WriteTxnMarkers, to the partition's leader (Kafka's Admin.abortTransaction)

    def abort(self, spec: AbortSpec) -> None:
        self._retrying(lambda: self._abort_once(spec))

    def _abort_once(self, spec: AbortSpec) -> None:
        tp = spec.partition
        leader = self.leader(tp)
        marker = {
            "producer_id": spec.producer_id,
            "producer_epoch": spec.producer_epoch,
            "transaction_result": False,  # abort
            "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}],
            "coordinator_epoch": spec.coordinator_epoch,
        }
        r = self._send(leader, WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, {"markers": [marker]})
        codes = [
            ErrorCode(p.error_code)
            for m in r.markers
            if m.producer_id == spec.producer_id
            for t in m.topics
            if t.name == tp.topic
            for p in t.partitions
            if p.partition_index == tp.partition
        ]
        if len(codes) != 1:
            raise RequestFailed(f"WriteTxnMarkers response did not answer for {tp} alone")
        code = codes[0]
        if code == ErrorCode.none:
            return
        if code in (
            ErrorCode.not_leader_or_follower,
            ErrorCode.replica_not_available,
            ErrorCode.broker_not_available,
            ErrorCode.unknown_topic_or_partition,
        ):
            raise Retry(error_text(code))
        if code == ErrorCode.cluster_authorization_failed:
            raise RequestFailed(
                f"WriteTxnMarkers request with {spec} failed due to cluster authorization error"
            )
        if code == ErrorCode.invalid_producer_epoch:
            raise RequestFailed(
                f"WriteTxnMarkers request with {spec} failed due an invalid producer epoch"
            )
        if code == ErrorCode.transaction_coordinator_fenced:
            raise RequestFailed(
                f"WriteTxnMarkers request with {spec} failed since the provided "
                f"coordinator epoch {spec.coordinator_epoch} has been fenced by "
                "the active coordinator"
            )
        raise RequestFailed(
            f"WriteTxnMarkers request with {spec} failed due to unexpected "
            f"error: {error_text(code)}"
        )

    # Topics, for find-hanging

    def partitions(
        self, topics: Iterable[str] | None, broker_id: int | None
    ) -> list[TopicPartition]:
        """The partitions of `topics` (every topic if None, internal ones too), those
        with a replica on `broker_id` if given."""
        md = self.metadata()
        names = sorted(md.topics) if topics is None else list(topics)
        out = []
        for name in names:
            t = md.topics.get(name)
            if t is None or (t.error is not None and not t.partitions):
                raise RequestFailed(f"topic '{name}' does not exist")
            for index in sorted(t.partitions):
                replicas = t.partitions[index].replicas
                if broker_id is None or broker_id in replicas:
                    out.append(TopicPartition(name, int(index)))
        return out


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
    _print(table(LIST_HEADERS, list_rows(listed)))
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
    if args.start_offset is None and args.producer_id is None:
        raise CliError(
            "The transaction to abort must be identified either with --start-offset "
            "(for brokers on 3.0 or above) or with --producer-id, --producer-epoch, "
            "and --coordinator-epoch (for older brokers)"
        )
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
        if args.producer_epoch is None:
            raise CliError("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise CliError("Missing required argument --coordinator-epoch")
        # A transaction left hanging before its producer's first commit or abort has no
        # coordinator epoch (-1 in describe-producers); 0 is no newer than any.
        spec = AbortSpec(tp, args.producer_id, args.producer_epoch, max(0, args.coordinator_epoch))
    try:
        admin.abort(spec)
    except RequestFailed as e:
        raise _failed(f"Failed to abort transaction {spec}", e) from None
    return 0


def find_hanging_command(admin: TxnAdmin, args: argparse.Namespace, clock: Clock) -> int:
    if args.topic is None and args.broker_id is None:
        raise CliError(
            "The `find-hanging` command requires either --topic or --broker-id to "
            "limit the scope of the search"
        )
    if args.partition is not None and args.topic is None:
        raise CliError("The --partition argument requires --topic to be provided")
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
    add_bootstrap_argument(p)
    add_command_config_argument(p)
    commands = p.add_subparsers(dest="txn_command", required=True, metavar="COMMAND")

    c = commands.add_parser("list", help="list transactions")
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

    c = commands.add_parser("describe", help="describe the state of an active transactional-id")
    c.add_argument("--transactional-id", required=True, help="transactional id")

    c = commands.add_parser(
        "describe-producers", help="describe the states of active producers for a topic partition"
    )
    c.add_argument(
        "--broker-id",
        type=int,
        help="describe the producer state on this replica rather than the leader",
    )
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partition", type=int, required=True, help="partition number")

    c = commands.add_parser(
        "abort", help="abort a hanging transaction (requires administrative privileges)"
    )
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

    c = commands.add_parser("find-hanging", help="find hanging transactions")
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
    with AdminCalls("kafka-transactions-tool", TIMEOUT_S) as calls:
        admin = TxnAdmin(args, calls)
        return _COMMANDS[args.txn_command](admin, args, clock)
