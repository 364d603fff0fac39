"""The parts of the randomised fault test: writers that remember what was
acknowledged, readers that fetch with raw Fetch requests and remember what they were
given and under which high watermark, a nemesis that picks faults from a seeded
random generator, and the checks run over what they recorded.

Every loop here is bounded in time; every fault is undone before the checks.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import LOG_OVERHEAD, iter_records, offset_and_length
from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from tests.integration.kafka_wire import WireClient
from tests.integration.requests import fetch, metadata

PLAIN = "chaos-plain"
COMPACTED = "chaos-compacted"
RECREATED = "chaos-recreated"
TOPICS = {PLAIN: 3, COMPACTED: 2, RECREATED: 1}  # partitions each
KEYS = 20  # distinct keys of the compacted topic


def topic_configs(topic: str) -> dict[str, str]:
    configs = {"min.insync.replicas": "2"}
    if topic == COMPACTED:
        # Small segments and an eager cleaner, so compaction runs during the faults.
        configs |= {"cleanup.policy": "compact", "segment.bytes": "4096",
                    "min.cleanable.dirty.ratio": "0.01"}  # fmt: skip
    return configs


def create_topic(admin: AdminClient, topic: str, timeout: float = 30) -> None:
    """Create `topic`, retrying while a deletion of the same name is still under way."""
    deadline = time.monotonic() + timeout
    while True:
        new = NewTopic(topic, TOPICS[topic], 3, config=topic_configs(topic))
        try:
            admin.create_topics([new])[topic].result(15)
            return
        except KafkaException as e:
            code = e.args[0].code()
            retriable = (KafkaError.TOPIC_ALREADY_EXISTS, KafkaError._TIMED_OUT)
            if code not in retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.3)


class Worker:
    """A loop on a thread of its own, started and stopped by the test (bounded: a
    worker's loop ends by itself after an hour)."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(60)


@dataclass
class Acked:
    """What a writer was told: (topic, partition, offset) -> (key, value)."""

    records: dict[tuple[str, int, int], tuple[bytes | None, bytes | None]] = field(
        default_factory=dict
    )
    errors: list[str] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)


class Writer(Worker):
    """Writes numbered records to one topic with acks=all until stopped, a few hundred
    a second (the machine runs three brokers and ZooKeeper beside it). Idempotent
    unless the topic is deleted and created again under it (a recreated topic's
    producer ids mean nothing to the new log): then a new producer is made for each
    generation of the topic, and only the latest generation's acknowledgements
    count."""

    def __init__(self, bootstrap: str, topic: str, idempotent: bool) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.idempotent = idempotent
        self.generation = 0
        self.acked: dict[int, Acked] = {0: Acked()}
        self._new_generation = threading.Event()
        super().__init__(f"writer-{topic}")

    def _producer(self) -> Producer:
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": self.idempotent,
                "linger.ms": 5,
                "message.timeout.ms": 30_000,
                "retry.backoff.ms": 100,
                # A compacted topic's segments are small: keep batches well below them.
                "batch.size": 2048,
            }
        )

    def next_generation(self) -> None:
        """The topic was deleted and created again: start a new producer on it."""
        self._new_generation.set()

    def _run(self) -> None:
        producer = self._producer()
        gen = self.generation
        i = 0
        deadline = time.monotonic() + 3600
        while not self._stop.is_set() and time.monotonic() < deadline:
            if self._new_generation.is_set():
                self._new_generation.clear()
                producer.flush(10)
                gen = self.generation = gen + 1
                self.acked[gen] = Acked()
                producer = self._producer()
            key = b"k%02d" % (i % KEYS) if self.topic == COMPACTED else None
            value = b"%s-g%d-%08d" % (self.topic.encode(), gen, i)
            partition = (i % KEYS if key else i) % TOPICS[self.topic]
            try:
                producer.produce(
                    self.topic, key=key, value=value, partition=partition,
                    on_delivery=self._on_delivery(self.acked[gen]),
                )  # fmt: skip
                i += 1
            except BufferError:
                producer.poll(0.05)
            except KafkaException as e:  # e.g. the topic is being deleted: try again
                self.acked[gen].errors.append(str(e))
                producer.poll(0.1)
            producer.poll(0)
            time.sleep(0.003)
        producer.flush(30)

    @staticmethod
    def _on_delivery(acked: Acked) -> Callable[[KafkaError | None, Message], None]:
        def done(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                key = (str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0))
                acked.records[key] = (msg.key(), msg.value())
            elif err.fatal():
                acked.fatal.append(str(err))
            else:
                acked.errors.append(str(err))

        return done


@dataclass
class Reads:
    """What readers were given: (topic, partition, offset) -> (key, value), and every
    breach of the rules seen on the way."""

    records: dict[tuple[str, int, int], tuple[bytes | None, bytes | None]] = field(
        default_factory=dict
    )
    violations: list[str] = field(default_factory=list)
    fetches: int = 0


class Reader(Worker):
    """Reads every partition of the given topics from its leader with raw Fetch
    requests (consumer replica id -1, read_uncommitted), one partition after
    another, and checks each response on its own: no record at or above the high
    watermark the same response gives, and no offset that once held one value
    holding another. A reader of a topic that is deleted and created again starts
    over from 0 when the partition is gone or out of range."""

    def __init__(self, cluster: Cluster, topics: list[str], restartable: bool = False) -> None:
        self.cluster = cluster
        self.topics = topics
        self.restartable = restartable
        self.reads = Reads()
        self.next_offset = {(t, p): 0 for t in topics for p in range(TOPICS[t])}
        self.high_watermarks: dict[tuple[str, int], int] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.clients: dict[int, WireClient] = {}
        super().__init__("reader")

    def stop(self) -> None:
        super().stop()
        for c in self.clients.values():
            c.close()

    def _client(self, broker_id: int) -> WireClient:
        client = self.clients.get(broker_id)
        if client is None:
            client = WireClient(self.cluster.brokers[broker_id].bootstrap, timeout=5)
            self.clients[broker_id] = client
        return client

    def _drop(self, broker_id: int) -> None:
        client = self.clients.pop(broker_id, None)
        if client is not None:
            client.close()

    def refresh_leaders(self) -> None:
        for broker_id in self.cluster.brokers:
            try:
                request = metadata(*self.topics, auto_create=False)
                response = self._client(broker_id).request(request)
            except (OSError, ConnectionError):
                self._drop(broker_id)
                continue
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code == ErrorCode.none and p.leader_id >= 0:
                        self.leaders[(t.name, p.partition_index)] = p.leader_id
            return

    def _run(self) -> None:
        deadline = time.monotonic() + 3600
        while not self._stop.is_set() and time.monotonic() < deadline:
            for tp in list(self.next_offset):
                if self._stop.is_set():
                    return
                if not self.read_once(tp):
                    self.refresh_leaders()
                    time.sleep(0.05)

    def read_once(self, tp: tuple[str, int], max_wait_ms: int = 50) -> bool:
        """One fetch of `tp` from its leader; False if the leader must be found again."""
        leader = self.leaders.get(tp)
        if leader is None:
            return False
        topic, partition = tp
        offset = self.next_offset[tp]
        try:
            response = self._client(leader).request(
                fetch(topic, partition, offset, max_wait=max_wait_ms)
            )
        except (OSError, ConnectionError):
            self._drop(leader)
            return False
        self.reads.fetches += 1
        [t] = response.responses
        [d] = t.partitions
        if d.error_code == ErrorCode.offset_out_of_range:
            if self.restartable:
                self.next_offset[tp] = 0
            else:
                self.reads.violations.append(
                    f"{topic}-{partition}: offset {offset} out of range on broker {leader}"
                )
                self.next_offset[tp] = d.log_start_offset
            return True
        if d.error_code != ErrorCode.none:
            if self.restartable and d.error_code == ErrorCode.unknown_topic_or_partition:
                self.next_offset[tp] = 0
            return False
        hw = self.high_watermarks[tp] = d.high_watermark
        for offset_read, record in _records(d.records):
            if offset_read < offset:
                continue  # the start of a batch before the fetch offset
            if offset_read >= hw:
                self.reads.violations.append(
                    f"{topic}-{partition}: offset {offset_read} read from broker {leader}"
                    f" above the high watermark {hw} of the same response"
                )
            key = (topic, partition, offset_read)
            before = self.reads.records.get(key, record)
            if before != record and not self.restartable:
                self.reads.violations.append(
                    f"{topic}-{partition}: offset {offset_read} read as {before}, later {record}"
                )
            self.reads.records[key] = record
            self.next_offset[tp] = offset_read + 1
        return True


def _records(records: bytes | None) -> list[tuple[int, tuple[bytes | None, bytes | None]]]:
    """(offset, (key, value)) of every record of the whole batches in a records field."""
    if not records:
        return []
    view = memoryview(records)
    out = []
    pos = 0
    while pos + LOG_OVERHEAD <= len(view):
        _, length = offset_and_length(view, pos)
        end = pos + LOG_OVERHEAD + length
        if end > len(view):
            break  # cut by the byte limit: fetched again next time
        out += [(r.offset, (r.key, r.value)) for r in iter_records(view[pos:end])]
        pos = end
    return out


GROUP = "chaos-group"
# What a client retries while a group's coordinator moves (Kafka's retriable codes).
_COORDINATOR_MOVING = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
)


class Committer(Worker):
    """Commits offsets of a consumer group synchronously, one after another (a
    consumer that commits what it processed), and remembers the last commit each
    partition had acknowledged and the last it tried: a committed offset read back
    must lie between the two."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.partitions = [CTP(PLAIN, p) for p in range(TOPICS[PLAIN])]
        self.acked: dict[int, int] = {}
        self.tried: dict[int, int] = {}
        self.last_ack = threading.Event()  # set at each acknowledged commit
        super().__init__("committer")

    def _run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP,
                             "enable.auto.commit": False})  # fmt: skip
        n = 0
        deadline = time.monotonic() + 3600
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                n += 1
                offsets = [CTP(tp.topic, tp.partition, n) for tp in self.partitions]
                for tp in offsets:
                    self.tried[tp.partition] = n
                try:
                    consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException:
                    time.sleep(0.1)  # no coordinator just now: the next commit goes on
                    continue
                for tp in offsets:
                    self.acked[tp.partition] = n
                self.last_ack.set()
                time.sleep(0.02)
        finally:
            consumer.close()

    def check(self, when: str) -> list[str]:
        """The group's committed offsets, read back now, against what was
        acknowledged (every acknowledged commit reads back)."""
        acked, tried = dict(self.acked), dict(self.tried)
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP,
                             "enable.auto.commit": False})  # fmt: skip
        # A coordinator that just moved answers NOT_COORDINATOR or loads the group
        # first: retriable, as for any client, within a bound.
        deadline = time.monotonic() + 30
        try:
            while True:
                try:
                    committed = consumer.committed(self.partitions, timeout=10)
                    break
                except KafkaException as e:
                    if e.args[0].code() not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                        return [f"{when}: committed offsets of {GROUP} unreadable: {e}"]
                    time.sleep(0.2)
        finally:
            consumer.close()
        problems = []
        for tp in committed:
            low, high = acked.get(tp.partition, -1001), tried.get(tp.partition, 0)
            if not low <= tp.offset <= max(high, self.tried.get(tp.partition, 0)):
                problems.append(
                    f"{when}: {GROUP} {tp.topic}-{tp.partition} committed {tp.offset},"
                    f" acknowledged {low}"
                )
        return problems


@dataclass
class Fault:
    at: float  # seconds since the start
    name: str
    broker: int | None = None


class Nemesis:
    """Picks a fault every one to three seconds from a seeded generator, makes it,
    waits a random while, and undoes it (one fault at a time): kill -9 and restart,
    SIGSTOP and SIGCONT, a network cut and heal, a clean restart (SIGTERM), a
    preferred leader election, or the deletion and re-creation of a topic."""

    def __init__(
        self,
        cluster: Cluster,
        seed: int,
        on_recreated: Callable[[], None],
        committer: Committer,
        faults: tuple[str, ...],
    ) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.on_recreated = on_recreated
        self.committer = committer
        self.faults = faults
        self.history: list[Fault] = []
        self.problems: list[str] = []
        self.admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def run(self, seconds: float, leader_bound_s: float) -> None:
        """Faults for `seconds`; after each is undone, every partition must have a
        leader within `leader_bound_s`, and every acknowledged commit read back."""
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            time.sleep(self.rng.uniform(1.0, 3.0))
            name = self.rng.choice(self.faults)
            broker = self.rng.choice(sorted(self.cluster.brokers))
            fault = Fault(round(time.monotonic() - start, 1), name, broker)
            self.history.append(fault)
            print(f"nemesis {fault}", flush=True)
            getattr(self, name)(broker)
            self.problems += leaderless_after(self.cluster, leader_bound_s, str(fault))
            self.problems += self.committer.check(f"after {fault}")

    def kill(self, broker: int) -> None:
        """kill -9, then a start at once (before its ZooKeeper session expires: the
        controller sees the broker bounce) or after a while."""
        self.cluster.kill(broker)
        time.sleep(self.rng.choice([0.0, self.rng.uniform(0.5, 4.0)]))
        self.cluster.restart(broker)

    def kill_coordinator(self, _broker: int) -> None:
        """kill -9 the group coordinator right after it acknowledged a commit, and
        start it again at once."""
        try:
            described = self.admin.describe_consumer_groups([GROUP])[GROUP].result(15)
        except (KafkaException, TimeoutError):
            return  # no coordinator just now: nothing to kill
        self.committer.last_ack.clear()
        self.committer.last_ack.wait(10)
        self.cluster.kill(described.coordinator.id)
        self.cluster.restart(described.coordinator.id)

    def pause(self, broker: int) -> None:
        self.cluster.pause(broker)
        try:
            time.sleep(self.rng.uniform(0.5, 4.0))
        finally:
            self.cluster.resume(broker)

    def isolate(self, broker: int) -> None:
        self.cluster.isolate(broker)
        try:
            time.sleep(self.rng.uniform(1.0, 5.0))
        finally:
            self.cluster.heal(broker)

    def restart(self, broker: int) -> None:
        self.cluster.restart(broker)  # SIGTERM (a controlled shutdown), then start

    def elect(self, broker: int) -> None:
        """Leadership back to each partition's preferred replica (errors such as
        'already the leader' are answers, not failures)."""
        partitions = [CTP(t, p) for t, n in TOPICS.items() for p in range(n)]
        with contextlib.suppress(KafkaException, TimeoutError):
            self.admin.elect_leaders(ElectionType.PREFERRED, partitions).result(15)

    def recreate(self, broker: int) -> None:
        self.admin.delete_topics([RECREATED])[RECREATED].result(30)
        create_topic(self.admin, RECREATED)
        self.on_recreated()

    def heal_all(self) -> None:
        """Undo whatever a fault cut short: every broker runs and is reachable."""
        for b in self.cluster.brokers:
            self.cluster.resume(b)
            self.cluster.heal(b)
            if not Cluster.is_running(self.cluster.brokers[b]):
                self.cluster.restart(b)


def leaderless_after(cluster: Cluster, bound_s: float, when: str) -> list[str]:
    """Every partition of the test's topics has a leader within `bound_s`, or the
    problem with those that have none."""
    missing: list[tuple[str, int]] = []

    def all_led() -> bool:
        try:
            states = partition_states(cluster.bootstrap)
        except KafkaException:
            return False
        missing[:] = [tp for tp, (leader, _, _) in states.items() if leader < 0]
        return not missing and len(states) == sum(TOPICS.values())

    if wait_for(all_led, bound_s, interval=0.2):
        return []
    return [f"after {when}: no leader within {bound_s:.0f} s for {missing or 'some partitions'}"]


def partition_states(bootstrap: str) -> dict[tuple[str, int], tuple[int, list[int], list[int]]]:
    """(topic, partition) -> (leader, replicas, ISR), as a client sees them."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {
        (t, p): (m.leader, sorted(m.replicas), sorted(m.isrs))
        for t in TOPICS
        if t in md.topics
        for p, m in md.topics[t].partitions.items()
    }


def read_to_end(reader: Reader, tp: tuple[str, int], timeout: float = 60) -> None:
    """Fetch `tp` from where `reader` is up to its high watermark."""
    deadline = time.monotonic() + timeout
    while reader.next_offset[tp] < reader.high_watermarks.get(tp, 1):
        assert time.monotonic() < deadline, f"{tp} not read to its end within {timeout} s"
        if not reader.read_once(tp, max_wait_ms=200):
            reader.refresh_leaders()
            time.sleep(0.1)


def check(
    plain: Acked, compacted: Acked, recreated: Acked, during: Reads, final: Reads
) -> list[str]:
    """Every rule over what was acknowledged (`recreated`: by the last generation of
    that topic), read during the faults, and read at the end: the problems found
    (none: the run passed)."""
    problems = [*during.violations, *final.violations]
    for name, a in ((PLAIN, plain), (COMPACTED, compacted), (RECREATED, recreated)):
        problems += [f"{name}: fatal producer error {e}" for e in a.fatal]
    end = final.records

    # Every acknowledged record is read once, at the offset it was acknowledged with.
    for acked in (plain, recreated):
        for (t, p, o), record in acked.records.items():
            if end.get((t, p, o)) != record:
                problems.append(f"{t}-{p}: acknowledged {record} at {o}, read {end.get((t, p, o))}")
    values = [v for (t, _, _), (_, v) in end.items() if t == PLAIN]
    if len(values) != len(set(values)):
        problems.append(f"{PLAIN}: {len(values) - len(set(values))} records duplicated")

    # Nothing read during the faults was uncommitted: the offsets a reader was given
    # hold the same records at the end (in the compacted topic a record may be gone,
    # if a later record of its key replaced it).
    latest_end: dict[tuple[int, bytes | None], int] = {}
    for (t, p, o), (key, _) in end.items():
        if t == COMPACTED:
            latest_end[(p, key)] = max(latest_end.get((p, key), -1), o)
    for (t, p, o), record in during.records.items():
        if t == RECREATED:
            continue
        if (t, p, o) in end:
            if end[(t, p, o)] != record:
                problems.append(f"{t}-{p}: offset {o} read as {record}, holds {end[(t, p, o)]}")
        elif t == PLAIN or latest_end.get((p, record[0]), -1) <= o:
            problems.append(f"{t}-{p}: offset {o} read as {record} during the run, gone at the end")

    # The latest acknowledged value of every key of the compacted topic survives, or
    # a later record of the key replaced it.
    latest_acked: dict[tuple[int, bytes | None], int] = {}
    for _, p, o in compacted.records:
        key = compacted.records[(COMPACTED, p, o)][0]
        latest_acked[(p, key)] = max(latest_acked.get((p, key), -1), o)
    for (p, key), o in latest_acked.items():
        at = latest_end.get((p, key), -1)
        record = compacted.records[(COMPACTED, p, o)]
        if at < o or (at == o and end.get((COMPACTED, p, o)) != record):
            problems.append(f"{COMPACTED}-{p}: the latest acknowledged {record} at {o} is lost")
    return problems
