"""A Spark task's read by fetching record batches itself (moldau.spark.fetch_client)
and turning them into Arrow in bulk (moldau.spark.arrow_records): the default read
path, with no Python object per record.

What the client path (moldau.spark.reader's confluent-kafka consumer) does, this
does too: a leader that moves or fences the fetch (NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH and kin), or a broker that goes away, means looking the leader
up again and going on; records aged out or truncated (OFFSET_OUT_OF_RANGE) and a
partition deleted mid-read are data loss (failOnDataLoss); a range ending in
records compaction removed ends at the log's end; and a read that makes no
progress for kafkaConsumer.pollTimeoutMs fails.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from moldau.protocol.errors import ErrorCode
from moldau.spark.arrow_records import UnsupportedRecords, decode
from moldau.spark.fetch_client import (
    Address,
    BrokerError,
    PartitionClient,
    PartitionGone,
    UnsupportedBroker,
    parse_bootstrap,
)
from moldau.spark.offsets import OffsetRange, report_data_loss, report_out_of_range

log = logging.getLogger(__name__)

#: Bytes one fetch asks for, as the client path's fetch.message.max.bytes; a batch
#: larger than this doubles it (Kafka sends at least one whole batch anyway).
FETCH_BYTES = 4 * 1024 * 1024
#: How long to wait before fetching again after an error that a retry may cure.
_BACKOFF_S = 0.1
#: The same warning is logged at most this often (s).
_WARN_EVERY_S = 10.0

#: Errors that say the leader moved, or that this broker cannot serve the fetch
#: just now: look the leader up again and fetch again.
_RETRY_ELSEWHERE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.replica_not_available,
        ErrorCode.kafka_storage_error,
        ErrorCode.offset_not_available,
        ErrorCode.request_timed_out,
        ErrorCode.network_exception,
    }
)
#: Errors that may mean the partition is gone (its topic deleted).
_MAYBE_GONE = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id})


class NeedsClientPath(Exception):
    """What is left of the range needs the client path: records or a broker this
    path does not read."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason


def client_path_reason(client_config: Mapping[str, str]) -> str | None:
    """Why settings need the client path (confluent-kafka), or None: this path
    speaks PLAINTEXT only."""
    protocol = client_config.get("security.protocol", "plaintext").lower()
    if protocol != "plaintext":
        return f"security.protocol {protocol.upper()}"
    for key in sorted(client_config):
        if key.startswith(("sasl.", "ssl.")):
            return f"the setting {key}"
    try:
        parse_bootstrap(client_config["bootstrap.servers"])
    except ValueError:
        return "bootstrap.servers it cannot parse"
    return None


@dataclass(frozen=True, slots=True)
class FetchSettings:
    """What of the `kafka.*` settings this path honours."""

    bootstrap: list[Address]
    read_committed: bool
    client_id: str
    timeout_s: float
    max_bytes: int

    @classmethod
    def of(cls, client_config: Mapping[str, str]) -> FetchSettings:
        c = client_config
        max_bytes = c.get("max.partition.fetch.bytes") or c.get("fetch.message.max.bytes")
        timeout_ms = c.get("request.timeout.ms") or c.get("socket.timeout.ms")
        return cls(
            parse_bootstrap(c["bootstrap.servers"]),
            c.get("isolation.level", "").lower() == "read_committed",
            c.get("client.id", "moldau-spark"),
            int(timeout_ms) / 1000 if timeout_ms else 30.0,
            int(max_bytes) if max_bytes else FETCH_BYTES,
        )


def read_range_fetching(
    client_config: Mapping[str, str],
    r: OffsetRange,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    new_client: Callable[..., PartitionClient] = PartitionClient,
) -> Iterator[pa.RecordBatch]:
    settings = FetchSettings.of(client_config)
    read_committed = settings.read_committed
    client = new_client(
        settings.bootstrap,
        r.topic,
        r.partition,
        read_committed=read_committed,
        client_id=settings.client_id,
        timeout_s=settings.timeout_s,
    )
    max_bytes = settings.max_bytes
    warned: dict[str, float] = {}

    def warn(what: str) -> None:
        # A leader's failover takes seconds of retries: say each thing once in a while.
        now = clock()
        if now - warned.get(what, -_WARN_EVERY_S) >= _WARN_EVERY_S:
            warned[what] = now
            log.warning("reading %s-%s: %s", r.topic, r.partition, what)

    try:
        position = r.start
        deadline = clock() + poll_timeout_ms / 1000
        while position < r.end:
            if clock() > deadline:
                raise TimeoutError(
                    f"Cannot fetch offset {position} of {r.topic}-{r.partition} "
                    f"within kafkaConsumer.pollTimeoutMs ({poll_timeout_ms} ms)"
                )
            try:
                answer = client.fetch(position, max_bytes)
            except UnsupportedBroker as e:
                raise NeedsClientPath(position, str(e)) from e
            except PartitionGone:
                _report_gone(r, position, fail_on_data_loss)
                return
            except BrokerError as e:
                warn(f"{e} (retrying)")
                sleep(_BACKOFF_S)
                continue
            error = answer.error
            if error == ErrorCode.none:
                try:
                    decoded = decode(
                        answer.records,
                        r.topic,
                        r.partition,
                        position,
                        r.end,
                        include_headers=include_headers,
                        aborted=(answer.aborted or []) if read_committed else None,
                    )
                except UnsupportedRecords as e:
                    raise NeedsClientPath(position, str(e)) from e
                if decoded.batch is not None:
                    yield decoded.batch
                if decoded.next_offset > position:
                    position = decoded.next_offset
                    deadline = clock() + poll_timeout_ms / 1000
                elif decoded.stalled:
                    max_bytes *= 2
                elif answer.throttle_ms > 0:
                    sleep(answer.throttle_ms / 1000)  # a quota's empty answer says nothing
                else:
                    # Nothing from `position` to the log's end (the last stable offset
                    # for read_committed), or the broker would have sent it: records
                    # compaction removed. Records still to come are waited for.
                    log_end = answer.last_stable_offset if read_committed else answer.high_watermark
                    if log_end > position:
                        position = log_end
                        deadline = clock() + poll_timeout_ms / 1000
                continue
            if error == ErrorCode.offset_out_of_range:
                resume = _out_of_range(client, r, position, fail_on_data_loss)
                if resume is None:
                    sleep(_BACKOFF_S)
                    continue
                if resume >= r.end:
                    return
                position = resume
                continue
            if error in _MAYBE_GONE:
                if _is_gone(client):
                    _report_gone(r, position, fail_on_data_loss)
                    return
                client.forget_leader()
                sleep(_BACKOFF_S)
                continue
            if error in _RETRY_ELSEWHERE:
                warn(f"{_name(error)} (looking the leader up again)")
                client.forget_leader()
                sleep(_BACKOFF_S)
                continue
            raise RuntimeError(
                f"reading {r.topic}-{r.partition}: the broker answered {_name(error)}"
            )
    finally:
        client.close()


def _name(error: int) -> str:
    try:
        return ErrorCode(error).name.upper()
    except ValueError:
        return f"error {error}"


def _report_gone(r: OffsetRange, position: int, fail_on_data_loss: bool) -> None:
    report_data_loss(
        f"Cannot fetch offset {position} of {r.topic}-{r.partition}: "
        "the partition does not exist any more",
        fail_on_data_loss,
    )


def _is_gone(client: PartitionClient) -> bool:
    try:
        return not client.partition_exists()
    except BrokerError:
        return False


def _out_of_range(
    client: PartitionClient, r: OffsetRange, position: int, fail_on_data_loss: bool
) -> int | None:
    """Records of the range are gone: report it; the offset to go on from, or None
    to try again (the offsets could not be learnt)."""
    try:
        low, high = client.offsets()
    except PartitionGone:
        return None  # the next fetch finds it gone
    except BrokerError as e:
        log.warning("reading %s-%s: %s (retrying)", r.topic, r.partition, e)
        return None
    if low <= position < high:
        return position  # the leader had moved; the new one has it
    return report_out_of_range(r.topic, r.partition, position, r.end, low, high, fail_on_data_loss)
