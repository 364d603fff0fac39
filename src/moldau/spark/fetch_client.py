"""A Spark task's own small Kafka client: Fetch (as a consumer, replica_id -1),
Metadata and ListOffsets for one topic partition, over one blocking socket to the
partition's leader.

Versions are agreed with ApiVersions, the highest both sides speak within what
this client knows, so it reads Apache Kafka's brokers as well as Moldau's. Only
PLAINTEXT: a task whose settings ask for more reads through confluent-kafka
(moldau.spark.reader decides).
"""

from __future__ import annotations

import collections
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_entity, decode_response, encode_body, is_flexible
from moldau.protocol.codec import request_class as _request_class
from moldau.protocol.wire import DecodeError

Address = tuple[str, int]

#: Versions this client speaks, lowest and highest. Fetch v4 brings isolation levels
#: and aborted transactions, v13 swaps topic names for ids; ListOffsets v1 is the
#: first with one offset a partition; Metadata v1 the first with leaders' racks.
_OURS = {
    ApiKey.FETCH: (4, 12),
    ApiKey.METADATA: (1, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
}
_EARLIEST, _LATEST = -2, -1
_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")


class BrokerError(ConnectionError):
    """A broker that cannot be reached, hangs up or answers nonsense: look the leader
    up again. A ConnectionError, so that code handling lost connections handles it."""


class PartitionGone(Exception):
    """The cluster does not have the partition (its topic was deleted)."""


class UnsupportedBroker(Exception):
    """A broker that speaks no version of an API this client knows."""


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    #: (producer id, first offset); None when the broker sent none (read_uncommitted).
    aborted: list[tuple[int, int]] | None
    records: bytes
    #: A quota's delay: the answer is empty because of it, not for want of records.
    throttle_ms: int = 0


def parse_bootstrap(servers: str) -> list[Address]:
    out = []
    for server in servers.split(","):
        item = server.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        out.append((host.strip("[]") or "localhost", int(port)))
    return out


class Connection:
    """One blocking socket to a broker: request frames with their correlation ids,
    answers read in the order sent. The tests' raw wire client
    (tests/integration/kafka_wire.py) is this too, with frames of its own making."""

    def __init__(self, address: Address, client_id: str, timeout_s: float) -> None:
        self.address = address
        self.client_id = client_id.encode()
        self.sock = socket.create_connection(address, timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        #: The correlation id of the last request framed.
        self.correlation = 0
        #: Correlation ids of the requests sent and not yet answered, oldest first.
        self.unanswered: collections.deque[int] = collections.deque()
        self.versions: dict[int, int] = {}

    def close(self) -> None:
        self.sock.close()

    def frame(self, api_key: int, version: int, body: bytes) -> bytes:
        """`body` as a request of the next correlation id (for `send_raw`)."""
        self.correlation += 1
        head = _HEADER.pack(api_key, version, self.correlation)
        head += struct.pack(">h", len(self.client_id)) + self.client_id
        if is_flexible(api_key, version):
            head += b"\x00"  # no tagged fields
        return _I32.pack(len(head) + len(body)) + head + body

    def send_raw(self, data: bytes) -> None:
        """Bytes as they are: frames whose answers the caller reads itself."""
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise BrokerError(f"{self.address[0]}:{self.address[1]}: {e}") from e

    def _read_exactly(self, n: int) -> bytearray:
        out = bytearray(n)
        view = memoryview(out)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise BrokerError(f"{self.address[0]}:{self.address[1]} closed the connection")
            got += k
        return out

    def read_frame(self) -> bytearray:
        """The next frame from the broker, without its size."""
        try:
            (size,) = _I32.unpack(self._read_exactly(4))
            return self._read_exactly(size)
        except BrokerError:
            raise
        except OSError as e:
            raise BrokerError(f"{self.address[0]}:{self.address[1]}: {e}") from e

    def call(self, api_key: int, version: int, fields: Mapping[str, Any]) -> Any:
        self.send(api_key, version, fields)
        return self.receive(api_key, version)

    def send(self, api_key: int, version: int, fields: Mapping[str, Any]) -> None:
        """A request whose answer `receive` reads later (the producer keeps its
        requests in flight while it builds the next ones)."""
        cls = _request_class(api_key, version)
        assert cls is not None
        self.send_raw(self.frame(api_key, version, encode_body(build_entity(cls, fields))))
        self.unanswered.append(self.correlation)

    def receive(self, api_key: int, version: int) -> Any:
        """The answer to the oldest request not yet answered (answers come in order)."""
        frame = self.read_frame()
        (correlation,) = _I32.unpack_from(frame)
        expected = self.unanswered.popleft() if self.unanswered else None
        if correlation != expected:
            raise BrokerError(f"answer {correlation} to request {expected}")
        try:
            return decode_answer(api_key, version, frame)
        except DecodeError as e:
            raise BrokerError(f"unreadable answer to api {api_key} v{version}: {e}") from e

    def agree_versions(self, ours: Mapping[ApiKey, tuple[int, int]] = _OURS) -> None:
        """`ours`: the APIs wanted, with the lowest and highest versions known."""
        answer = self.call(ApiKey.API_VERSIONS, 0, {})
        theirs = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
        for key, (low, high) in ours.items():
            their_low, their_high = theirs.get(key, (1, -1))
            if max(low, their_low) > min(high, their_high):
                raise UnsupportedBroker(f"no common version of api {key} with {self.address}")
            self.versions[key] = min(high, their_high)


def open_connection(
    address: Address,
    client_id: str,
    timeout_s: float,
    versions: Mapping[ApiKey, tuple[int, int]] = _OURS,
) -> Connection:
    """A connection whose versions of `versions`' APIs are agreed; BrokerError if
    the broker cannot be reached, UnsupportedBroker if it speaks none of one."""
    try:
        conn = Connection(address, client_id, timeout_s)
    except OSError as e:
        raise BrokerError(f"{address[0]}:{address[1]}: {e}") from e
    try:
        conn.agree_versions(versions)
    except BaseException:
        conn.close()
        raise
    return conn


def decode_answer(api_key: int, version: int, frame: bytes | bytearray) -> Any:
    """The response in `frame` (as `Connection.read_frame` gives it: the header
    first); DecodeError if it is not one."""
    pos = 4  # the correlation id
    # Response header v1 (flexible, but never ApiVersions'): its tagged fields.
    if is_flexible(api_key, version) and api_key != ApiKey.API_VERSIONS:
        try:
            pos = _skip_tags(frame, pos)
        except IndexError:
            raise DecodeError("the response header ends in its tagged fields") from None
    return decode_response(api_key, version, memoryview(frame)[pos:])


def _skip_tags(frame: bytes | bytearray, pos: int) -> int:
    def uvarint(p: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            b = frame[p]
            p += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value, p
            shift += 7

    count, pos = uvarint(pos)
    for _ in range(count):
        _, pos = uvarint(pos)
        size, pos = uvarint(pos)
        pos += size
    return pos


def _ms(value: Any) -> int:
    """kio gives durations as timedelta."""
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


@dataclass(frozen=True, slots=True)
class Leader:
    address: Address
    epoch: int


class PartitionClient:
    """Reads one topic partition. Not thread-safe: a task's own."""

    def __init__(
        self,
        bootstrap: Sequence[Address],
        topic: str,
        partition: int,
        *,
        read_committed: bool,
        client_id: str = "moldau-spark",
        timeout_s: float = 30.0,
        max_wait_ms: int = 500,
    ) -> None:
        self.bootstrap = list(bootstrap)
        self.topic = topic
        self.partition = partition
        self.read_committed = read_committed
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.max_wait_ms = max_wait_ms
        self._leader: Leader | None = None
        self._conn: Connection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def forget_leader(self) -> None:
        """After an error that may mean the leader moved: look it up again next time."""
        self.close()
        self._leader = None

    def _connect(self, address: Address) -> Connection:
        return open_connection(address, self.client_id, self.timeout_s + self.max_wait_ms / 1000)

    def _metadata(self) -> Any:
        errors = []
        for address in self.bootstrap:
            try:
                conn = self._connect(address)
            except BrokerError as e:
                errors.append(str(e))
                continue
            try:
                version = conn.versions[ApiKey.METADATA]
                return conn.call(
                    ApiKey.METADATA,
                    version,
                    {"topics": [{"name": self.topic}], "allow_auto_topic_creation": False},
                )
            except BrokerError as e:
                errors.append(str(e))
            finally:
                conn.close()
        raise BrokerError("no bootstrap server answered Metadata: " + "; ".join(errors))

    def partition_exists(self) -> bool:
        """Whether the cluster has the partition (its topic not deleted)."""
        return self._partition(self._metadata()) is not None

    def _partition(self, metadata: Any) -> Any:
        for t in metadata.topics:
            if t.name == self.topic and t.error_code == 0:
                for p in t.partitions:
                    if p.partition_index == self.partition:
                        return p
        return None

    def leader(self) -> Leader | None:
        """The partition's leader, None if it has none just now; PartitionGone if the
        cluster does not have it."""
        metadata = self._metadata()
        p = self._partition(metadata)
        if p is None:
            raise PartitionGone(f"{self.topic}-{self.partition} does not exist")
        brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}
        if p.leader_id not in brokers:
            return None
        return Leader(brokers[p.leader_id], int(getattr(p, "leader_epoch", -1)))

    def _leader_connection(self) -> tuple[Connection, Leader]:
        if self._leader is None:
            leader = self.leader()
            if leader is None:
                raise BrokerError(f"{self.topic}-{self.partition} has no leader")
            self._leader = leader
        if self._conn is None:
            try:
                self._conn = self._connect(self._leader.address)
            except BrokerError:
                self._leader = None  # gone, perhaps for good: ask Metadata again
                raise
        return self._conn, self._leader

    def fetch(self, offset: int, max_bytes: int) -> FetchAnswer:
        conn, leader = self._leader_connection()
        version = conn.versions[ApiKey.FETCH]
        try:
            answer = conn.call(
                ApiKey.FETCH,
                version,
                {
                    "replica_id": -1,
                    "max_wait": self.max_wait_ms,
                    "min_bytes": 1,
                    "max_bytes": max_bytes,
                    "isolation_level": 1 if self.read_committed else 0,
                    "session_id": 0,
                    "session_epoch": -1,  # no fetch session: every fetch is whole
                    "topics": [
                        {
                            "topic": self.topic,
                            "partitions": [
                                {
                                    "partition": self.partition,
                                    "current_leader_epoch": leader.epoch,
                                    "fetch_offset": offset,
                                    "log_start_offset": -1,
                                    "partition_max_bytes": max_bytes,
                                    "last_fetched_epoch": -1,
                                }
                            ],
                        }
                    ],
                    "rack_id": "",
                },
            )
        except BrokerError:
            self.forget_leader()
            raise
        if answer.error_code != 0:
            return FetchAnswer(int(answer.error_code), -1, -1, -1, None, b"")
        for t in answer.responses:
            for p in t.partitions:
                if t.topic == self.topic and p.partition_index == self.partition:
                    aborted = p.aborted_transactions
                    return FetchAnswer(
                        int(p.error_code),
                        int(p.high_watermark),
                        int(p.last_stable_offset),
                        int(getattr(p, "log_start_offset", -1)),
                        None
                        if aborted is None
                        else [(int(a.producer_id), int(a.first_offset)) for a in aborted],
                        bytes(p.records or b""),
                        _ms(getattr(answer, "throttle_time", 0)),
                    )
        raise BrokerError(f"the Fetch answer has no {self.topic}-{self.partition}")

    def offsets(self) -> tuple[int, int]:
        """The partition's earliest and latest offsets (the latest stable one for
        read_committed), from its leader."""
        conn, leader = self._leader_connection()
        version = conn.versions[ApiKey.LIST_OFFSETS]
        found = []
        for timestamp in (_EARLIEST, _LATEST):
            try:
                answer = conn.call(
                    ApiKey.LIST_OFFSETS,
                    version,
                    {
                        "replica_id": -1,
                        "isolation_level": 1 if self.read_committed else 0,
                        "topics": [
                            {
                                "name": self.topic,
                                "partitions": [
                                    {
                                        "partition_index": self.partition,
                                        "current_leader_epoch": leader.epoch,
                                        "timestamp": timestamp,
                                    }
                                ],
                            }
                        ],
                    },
                )
            except BrokerError:
                self.forget_leader()
                raise
            p = answer.topics[0].partitions[0]
            if p.error_code != 0:
                self.forget_leader()
                raise BrokerError(f"ListOffsets of {self.topic}-{self.partition}: {p.error_code}")
            found.append(int(p.offset))
        return found[0], found[1]
