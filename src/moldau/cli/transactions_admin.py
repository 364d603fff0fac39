"""The requests behind `moldau transactions` (cli/transactions.py), as Kafka's admin
client makes them (KIP-664): ListTransactions to every broker, FindCoordinator for a
transactional id and DescribeTransactions to its coordinator, DescribeProducers to a
partition's leader or a chosen replica, WriteTxnMarkers(abort) to the leader.

confluent-kafka has no call for these APIs: they go on the wire through
cli/admin_call.py, to the brokers Metadata names (fetched through librdkafka, which
also notices an unreachable broker). Each is retried, on the errors Kafka's admin
client retries, until the tool's timeout.
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
from moldau.cli.common import TIMEOUT_S, admin_client, fetch_metadata
from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode
from moldau.storage.partition_name import TopicPartition, by_topic

T = TypeVar("T")

# The APIs and the versions sent: the newest that both Moldau and Kafka 4.x serve.
FIND_COORDINATOR, FIND_COORDINATOR_VERSION = ApiKey.FIND_COORDINATOR, 4
WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION = ApiKey.WRITE_TXN_MARKERS, 1
DESCRIBE_PRODUCERS, DESCRIBE_PRODUCERS_VERSION = ApiKey.DESCRIBE_PRODUCERS, 0
DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION = ApiKey.DESCRIBE_TRANSACTIONS, 0
LIST_TRANSACTIONS, LIST_TRANSACTIONS_VERSION = ApiKey.LIST_TRANSACTIONS, 1
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


# -- talking to the cluster ---------------------------------------------------------------


class Retry(Exception):
    """An answer that asks to try again (a moved leader or coordinator, a loading one)."""


class TxnAdmin:
    """The requests of the sub-commands, each retried on the errors Kafka's admin
    client retries until the tool's timeout, then failed with the last reason."""

    def __init__(self, args: argparse.Namespace, calls: AdminCalls) -> None:
        self.admin, self.watch = admin_client(args)
        self.calls = calls
        self._metadata: Any = None

    def metadata(self) -> Any:
        """The cluster's brokers and topics, asked once and again only after an answer
        that said they changed (find-hanging looks up hundreds of leaders)."""
        if self._metadata is None:
            self._metadata = fetch_metadata(self.admin, self.watch)
        return self._metadata

    def _stale(self) -> None:
        self._metadata = None

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

    def _retrying(self, attempt: Callable[[], T]) -> T:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                return attempt()
            except Retry as e:
                if time.monotonic() >= deadline:
                    raise RequestFailed(str(e)) from None
            self._stale()
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
                self._stale()
                time.sleep(0.1)
        return out

    def _producers_on(
        self, broker_id: int, tps: Sequence[TopicPartition], pinned: bool
    ) -> dict[TopicPartition, list[ProducerState]]:
        topics = by_topic(tps)
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
