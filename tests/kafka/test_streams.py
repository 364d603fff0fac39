"""Kafka Streams' word count (tests/java moldau.it.WordCount), a real application in its
own JVM, against one Moldau broker and the three-broker cluster.

The topology re-keys each word (a repartition topic) and counts it in a state store
backed by a compacted changelog, with processing.guarantee=at_least_once. What that
guarantee promises a user, and so what these tests hold Moldau to:

- After a clean stop (SIGTERM: Streams flushes its producer, then commits the offsets of
  what it processed) nothing is processed twice: counts are exact.
- After a kill -9, records processed since the last commit are processed again by the
  restarted instance. A count is never below the truth (the restarted store is rebuilt
  from its changelog, which holds at least every committed increment), and it can be
  above it only by re-reads of uncommitted records: each input record at most once more
  from the input topic and once more from the repartition topic, so at most twice the
  occurrences produced after the last settled point. Anything lower is lost data; anything
  higher means offsets or the changelog went back further than Streams committed.

With processing.guarantee=exactly_once_v2 each commit writes the counts, the changelog
and the consumed offsets in one transaction: after a kill -9 and a restart, the output
read with read_committed holds exactly the truth, and each word's counts only ever go up
(a count repeated or going back would be output of an aborted or replayed transaction).

At least once, the restarted instance gets a fresh state directory, so its store can only
come from the changelog topic; exactly once keeps its state directory (and so its
transactional.id) and still restores from the changelog, since exactly-once keeps no local
state through a crash. Streams also deletes (DeleteRecords) what it committed of its
repartition topic, which it creates with retention.ms=-1: without that the topic would grow
for ever.
"""

from __future__ import annotations

import random
import signal
import struct
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from moldau.testing import kafka_java
from moldau.testing.process import wait_for

pytestmark = [pytest.mark.java, pytest.mark.timeout(240)]

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliett",
    "kilo",
    "lima",
]
PARTITIONS = 3


class WordCountApp:
    """One run of moldau.it.WordCount: its stdout lines as they come, stderr in a file."""

    def __init__(
        self, bootstrap: str, app_id: str, topics: tuple[str, str], rf: int, guarantee: str
    ) -> None:
        self.bootstrap = bootstrap
        self.app_id = app_id
        self.topics = topics
        self.rf = rf
        self.guarantee = guarantee
        self.proc: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None
        self.lines: list[str] = []
        self.stderr_path: Path | None = None

    def start(self, state_dir: Path) -> WordCountApp:
        self.lines = []
        self.stderr_path = state_dir.with_suffix(".stderr")
        with open(self.stderr_path, "w") as err:
            self.proc = kafka_java.popen(
                "moldau.it.WordCount",
                self.bootstrap,
                self.app_id,
                *self.topics,
                str(state_dir),
                str(self.rf),
                self.guarantee,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self.reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self.reader.start()
        self.wait_for("STATE RUNNING", 90)
        return self

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, line: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while line not in self.lines:
            assert self.proc is not None
            if self.proc.poll() is not None and line not in self.lines:
                self.fail(f"WordCount exited ({self.proc.returncode}) before {line!r}")
            if time.monotonic() > deadline:
                self.fail(f"no {line!r} from WordCount within {timeout} s")
            time.sleep(0.1)

    def restored(self, timeout: float = 30) -> int:
        """Changelog records this run restored its store from, once every changelog
        partition is restored (a RESTORED line each; restoration may end after RUNNING)."""
        deadline = time.monotonic() + timeout
        while (
            len(done := [ln for ln in self.lines if ln.startswith("RESTORED counts ")]) < PARTITIONS
        ):
            if time.monotonic() > deadline:
                self.fail(f"{len(done)} of {PARTITIONS} changelog partitions restored")
            time.sleep(0.1)
        return sum(int(ln.split()[-1]) for ln in done)

    def stop(self, sig: signal.Signals) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        status = self.proc.wait(90)
        self._reap()
        return status

    def _reap(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None and self.reader is not None
        self.reader.join(10)
        self.proc.stdout.close()

    def fail(self, why: str) -> NoReturn:
        err = self.stderr_path.read_text()[-6000:] if self.stderr_path else ""
        pytest.fail(f"{why}\nstdout:\n" + "\n".join(self.lines) + f"\nstderr:\n{err}")

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            self._reap()


@contextmanager
def word_count_app(bootstrap: str, guarantee: str = "at_least_once") -> Iterator[WordCountApp]:
    """A word-count application with topics of its own; RF 3 on the cluster, else the
    broker's default for its internal topics (replication.factor=-1, KIP-464)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = len(admin.list_topics(timeout=10).brokers)
    rf = min(3, brokers)
    suffix = uuid.uuid4().hex[:8]
    topics = (f"lines-{suffix}", f"counts-{suffix}")
    for f in admin.create_topics([NewTopic(t, PARTITIONS, rf) for t in topics]).values():
        f.result(30)
    wc = WordCountApp(
        bootstrap, f"wordcount-{suffix}", topics, rf if brokers > 1 else -1, guarantee
    )
    try:
        yield wc
    finally:
        wc.close()


@pytest.fixture
def app(bootstrap: str) -> Iterator[WordCountApp]:
    with word_count_app(bootstrap) as wc:
        yield wc


def make_lines(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 8))) for _ in range(n)]


def word_counts(lines: list[str]) -> Counter[str]:
    return Counter(w for line in lines for w in line.split())


def produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, line in enumerate(lines):
        # Keys spread the lines over the partitions; the count re-keys them by word.
        producer.produce(topic, key=str(i).encode(), value=line.encode())
    assert producer.flush(30) == 0


def end_offsets(consumer: Consumer, topic: str) -> list[TopicPartition]:
    return [
        TopicPartition(topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1])
        for p in range(PARTITIONS)
    ]


def wait_settled(app: WordCountApp, timeout: float = 90) -> None:
    """Until the application committed the end of its input and then of its repartition
    topic: at-least-once commits only after its producer flushed, so every count it owes
    for what was produced so far is then in the output topic."""
    consumer = Consumer({"bootstrap.servers": app.bootstrap, "group.id": app.app_id})
    try:
        deadline = time.monotonic() + timeout
        for topic in (app.topics[0], f"{app.app_id}-counts-repartition"):
            ends = end_offsets(consumer, topic)
            while True:
                committed = consumer.committed(ends, timeout=10)
                if [c.offset for c in committed] == [e.offset for e in ends]:
                    break
                if time.monotonic() > deadline:
                    app.fail(f"{topic}: committed {committed}, end {ends}")
                assert app.proc is not None and app.proc.poll() is None, "WordCount exited"
                time.sleep(0.2)
    finally:
        consumer.close()


def latest_counts(bootstrap: str, topic: str) -> dict[str, int]:
    """The output topic read to its end: each word's latest count."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    latest: dict[str, int] = {}
    try:
        for end in end_offsets(consumer, topic):
            if end.offset == 0:
                continue
            consumer.assign([TopicPartition(topic, end.partition, 0)])
            position = 0
            while position < end.offset:
                msg = consumer.poll(10)
                assert msg is not None, (
                    f"{topic}[{end.partition}] stopped at {position} of {end.offset}"
                )
                assert msg.error() is None, msg.error()
                key, value = msg.key(), msg.value()
                assert key is not None and value is not None
                latest[key.decode()] = struct.unpack(">q", value)[0]
                position = msg.offset() + 1
    finally:
        consumer.close()
    return latest


def wait_purged(app: WordCountApp) -> None:
    """Until Streams deleted (DeleteRecords) what it committed of its repartition topic:
    its records are kept for ever otherwise (retention.ms=-1)."""
    repartition = f"{app.app_id}-counts-repartition"
    consumer = Consumer({"bootstrap.servers": app.bootstrap, "group.id": app.app_id})
    try:
        committed = consumer.committed(end_offsets(consumer, repartition), timeout=10)

        def low_watermarks() -> list[int]:
            return [consumer.get_watermark_offsets(c, 10)[0] for c in committed]

        # WordCount purges every second, after a commit.
        if not wait_for(lambda: low_watermarks() == [c.offset for c in committed], 20, 0.5):
            app.fail(f"{repartition}: low watermarks {low_watermarks()}, committed {committed}")
    finally:
        consumer.close()


def check_internal_topics(app: WordCountApp) -> None:
    """The repartition topic and the changelog Streams created: partitions as the input,
    the replication factor asked for, and the configs Streams gave them."""
    admin = AdminClient({"bootstrap.servers": app.bootstrap})
    metadata = admin.list_topics(timeout=10).topics
    expected_rf = app.rf if app.rf > 0 else 1
    policies = {"repartition": "delete", "changelog": "compact"}
    for kind, policy in policies.items():
        name = f"{app.app_id}-counts-{kind}"
        assert name in metadata, sorted(metadata)
        partitions = metadata[name].partitions
        assert len(partitions) == PARTITIONS
        assert {len(p.replicas) for p in partitions.values()} == {expected_rf}
        resource = ConfigResource("topic", name)
        configs = admin.describe_configs([resource])[resource].result(30)
        assert configs["cleanup.policy"].value == policy
        assert configs["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    repartition = ConfigResource("topic", f"{app.app_id}-counts-repartition")
    configs = admin.describe_configs([repartition])[repartition].result(30)
    # Streams keeps repartition records until it purges them itself.
    assert configs["retention.ms"].value == "-1"


def test_counts_are_exact_through_a_clean_stop_and_a_restore_from_the_changelog(
    app: WordCountApp, tmp_path: Path
) -> None:
    rng = random.Random(1)
    lines = make_lines(rng, 300)
    produce(app.bootstrap, app.topics[0], lines)
    app.start(tmp_path / "state-1")
    wait_settled(app)
    assert latest_counts(app.bootstrap, app.topics[1]) == word_counts(lines)
    check_internal_topics(app)
    wait_purged(app)

    # Stopped while it still has lines to count: the clean close commits what it did.
    more = make_lines(rng, 200)
    produce(app.bootstrap, app.topics[0], more)
    assert app.stop(signal.SIGTERM) == 143  # the JVM's status after its shutdown hooks
    assert "CLOSED" in app.lines
    lines += more

    app.start(tmp_path / "state-2")
    assert app.restored() > 0, app.lines
    more = make_lines(rng, 200)
    produce(app.bootstrap, app.topics[0], more)
    lines += more
    wait_settled(app)
    assert latest_counts(app.bootstrap, app.topics[1]) == word_counts(lines)


def test_counts_are_never_below_the_truth_after_a_kill(app: WordCountApp, tmp_path: Path) -> None:
    rng = random.Random(2)
    settled = make_lines(rng, 1000)
    produce(app.bootstrap, app.topics[0], settled)
    app.start(tmp_path / "state-1")
    wait_settled(app)
    assert latest_counts(app.bootstrap, app.topics[1]) == word_counts(settled)

    # Killed while lines keep coming: what it processed since its last commit (every
    # 200 ms) comes again. Only lines produced before the kill can have been processed.
    at_risk: list[str] = []
    for _ in range(10):
        at_risk += (chunk := make_lines(rng, 20))
        produce(app.bootstrap, app.topics[0], chunk)
        time.sleep(0.05)
    assert app.stop(signal.SIGKILL) == -signal.SIGKILL
    after_kill = make_lines(rng, 200)
    produce(app.bootstrap, app.topics[0], after_kill)

    app.start(tmp_path / "state-2")
    assert app.restored() > 0, app.lines
    after_restart = make_lines(rng, 200)
    produce(app.bootstrap, app.topics[0], after_restart)
    wait_settled(app)

    truth = word_counts(settled + at_risk + after_kill + after_restart)
    bound = word_counts(at_risk)
    counts = latest_counts(app.bootstrap, app.topics[1])
    assert counts.keys() == truth.keys()
    below = {w: (counts[w], truth[w]) for w in truth if counts[w] < truth[w]}
    assert not below, f"counts below the truth (lost increments): {below}"
    # Reprocessing from an older commit than the last one (the settled lines hold more
    # of each word than twice the lines at risk) would show here.
    beyond = {w: (counts[w], truth[w]) for w in truth if counts[w] > truth[w] + 2 * bound[w]}
    assert not beyond, f"counted more than at-least-once can re-read: {beyond}"


def count_sequences(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """The output topic read to its end with read_committed (its last stable offset, which
    librdkafka reports as the partition's end): each word's counts in the order written."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    sequences: dict[str, list[int]] = {}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic}: only {sorted(at_end)} read to the end"
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            key, value = msg.key(), msg.value()
            assert key is not None and value is not None
            sequences.setdefault(key.decode(), []).append(struct.unpack(">q", value)[0])
    finally:
        consumer.close()
    return sequences


def wait_exact(app: WordCountApp, truth: Counter[str], timeout: float = 90) -> None:
    """Until the committed output's latest counts are the truth, and still are once the
    application committed the end of its input; never above it on the way."""
    deadline = time.monotonic() + timeout
    while True:
        latest = {w: seq[-1] for w, seq in count_sequences(app.bootstrap, app.topics[1]).items()}
        above = {w: (latest[w], truth[w]) for w in latest if latest[w] > truth[w]}
        if above:
            app.fail(f"counts above the truth (counted twice): {above}")
        if latest == truth:
            break
        if time.monotonic() > deadline:
            app.fail(f"counts {latest}, truth {dict(truth)}")
        assert app.proc is not None and app.proc.poll() is None, "WordCount exited"
        time.sleep(0.5)
    consumer = Consumer({"bootstrap.servers": app.bootstrap, "group.id": app.app_id})
    try:
        ends = end_offsets(consumer, app.topics[0])
        while [c.offset for c in consumer.committed(ends, timeout=10)] != [e.offset for e in ends]:
            if time.monotonic() > deadline:
                app.fail(f"{app.topics[0]}: input not committed to {ends}")
            time.sleep(0.2)
    finally:
        consumer.close()
    latest = {w: seq[-1] for w, seq in count_sequences(app.bootstrap, app.topics[1]).items()}
    assert latest == truth


def feed(bootstrap: str, topic: str, chunks: list[list[str]]) -> None:
    """Produces the chunks one every 25 ms (about a second for 40)."""
    for chunk in chunks:
        produce(bootstrap, topic, chunk)
        time.sleep(0.025)


def test_exactly_once_v2_counts_are_exact_through_a_kill(bootstrap: str, tmp_path: Path) -> None:
    with word_count_app(bootstrap, "exactly_once_v2") as app:
        rng = random.Random(3)
        lines = make_lines(rng, 500)
        produce(app.bootstrap, app.topics[0], lines)
        app.start(tmp_path / "state")
        wait_exact(app, word_counts(lines))

        # Killed while lines keep coming, so inside a transaction: its output and offsets
        # are aborted (fenced by the restarted instance, whose producer has the same
        # transactional.id: same state dir, same process id) and done again.
        chunks = [make_lines(rng, 20) for _ in range(40)]
        feeder = threading.Thread(target=feed, args=(app.bootstrap, app.topics[0], chunks))
        feeder.start()
        time.sleep(0.6)
        assert app.stop(signal.SIGKILL) == -signal.SIGKILL
        feeder.join(30)
        lines += [line for chunk in chunks for line in chunk]

        app.start(tmp_path / "state")
        # Exactly-once keeps no local state through a crash: the store is the changelog's.
        assert app.restored() > 0, app.lines
        lines += (after_restart := make_lines(rng, 200))
        produce(app.bootstrap, app.topics[0], after_restart)
        wait_exact(app, word_counts(lines))

        sequences = count_sequences(app.bootstrap, app.topics[1])
        not_rising = {w: seq for w, seq in sequences.items() if sorted(set(seq)) != seq}
        assert not not_rising, f"counts repeated or going back: {not_rising}"
