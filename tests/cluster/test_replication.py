"""Replication on a cluster of real broker processes on a real ZooKeeper, with real
clients and real signals (as Kafka's ReplicationTest): a topic with three replicas
and min.insync.replicas=2 keeps every record acknowledged with acks=all, at the
offset it was acknowledged with, through the death of a leader (kill -9), of the
controller, a follower's bounce (SIGTERM, restart), a leader paused past its
ZooKeeper session (SIGSTOP, SIGCONT), and (on its own) a leader cut off the network
and healed; with the idempotent producer none is duplicated. ISR and leaders move
as clients see them on Kafka."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.metadata import znodes as z
from moldau.storage.checkpoint import LeaderEpochCheckpointFile
from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from moldau.testing.zookeeper import read_znodes
from tests.integration.clients import confluent_consume

MakeCluster = Callable[..., Cluster]
LAG_MS = 3000
PARTITIONS = 2


def partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, ISR), as a client sees them."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=20)
    return {
        p: (m.leader, sorted(m.replicas), sorted(m.isrs))
        for p, m in md.topics[topic].partitions.items()
    }


class Load:
    """A producer writing numbered records with acks=all until stopped; what was
    acknowledged, at which partition and offset."""

    def __init__(self, bootstrap: str, topic: str, idempotent: bool, acks: str = "all") -> None:
        self.topic = topic
        self.acked: dict[tuple[int, int], bytes] = {}
        self.acked_at: dict[tuple[int, int], float] = {}
        self.errors: list[KafkaError] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": acks,
                "enable.idempotence": idempotent,
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
                "retry.backoff.ms": 100,
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def _run(self) -> None:
        i = 0
        deadline = time.monotonic() + 240
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                self.producer.produce(
                    self.topic, value=b"%08d" % i, partition=i % PARTITIONS,
                    on_delivery=self._done,
                )  # fmt: skip
                i += 1
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0.001)

    def _done(self, err: KafkaError | None, msg: object) -> None:
        if err is None:
            key = (msg.partition(), msg.offset())  # type: ignore[attr-defined]
            self.acked[key] = msg.value()  # type: ignore[attr-defined]
            self.acked_at[key] = time.monotonic()
        else:
            self.errors.append(err)

    def grows(self, by: int = 200, timeout: float = 60) -> bool:
        """Wait until `by` more records are acknowledged."""
        target = len(self.acked) + by
        return wait_for(lambda: len(self.acked) >= target, timeout)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(60)


def verify(load: Load, bootstrap: str, topic: str, idempotent: bool) -> None:
    """Every acknowledged record is there, at the offset it was acknowledged with;
    with idempotence none twice and each partition in order."""
    lost = duplicated = 0
    for p in range(PARTITIONS):
        acked = {o: v for (part, o), v in load.acked.items() if part == p}
        got = confluent_consume(bootstrap, topic, max(acked) + 1, partition=p)
        stored = {o: v for _, o, _, v, _ in got}
        lost += sum(1 for o, v in acked.items() if stored.get(o) != v)
        # The load's own records (numbered): another writer's may share the topic.
        values = [v for _, _, _, v, _ in got if v is not None and len(v) == 8 and v.isdigit()]
        duplicated += len(values) - len(set(values))
        if idempotent:
            assert values == sorted(values), "records of a partition out of order"
    print(
        f"acked {len(load.acked)}, lost {lost}, duplicated {duplicated}, errors {len(load.errors)}"
    )
    assert lost == 0
    if idempotent:
        assert duplicated == 0


def run_failures(make_cluster: MakeCluster, topic: str, idempotent: bool) -> None:
    cluster = make_cluster(3, **{"replica.lag.time.max.ms": str(LAG_MS)})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic].result(timeout=30)
    assert wait_for(
        lambda: all(
            isr == [1, 2, 3] for _, _, isr in partitions(cluster.bootstrap, topic).values()
        ),
        20,
    )
    with Load(cluster.bootstrap, topic, idempotent) as load:
        assert load.grows()
        # kill -9 the leader of partition 0: a follower in the ISR takes over.
        leader = partitions(cluster.bootstrap, topic)[0][0]
        cluster.kill(leader)
        assert wait_for(lambda: partitions(cluster.bootstrap, topic)[0][0] not in (leader, -1), 30)
        assert load.grows()
        cluster.restart(leader)
        assert wait_for(
            lambda: all(
                len(isr) == 3 for _, _, isr in partitions(cluster.bootstrap, topic).values()
            ),
            30,
        )
        assert load.grows()
        # kill -9 the controller.
        controller = cluster.wait_for_controller()
        cluster.kill(controller)
        cluster.wait_for_controller(other_than=controller)
        assert load.grows()
        cluster.restart(controller)
        assert load.grows()
        # Bounce a follower of partition 1 (SIGTERM, start again).
        leader1, replicas1, _ = partitions(cluster.bootstrap, topic)[1]
        follower = next(r for r in replicas1 if r != leader1)
        assert cluster.stop(follower) == 0
        assert load.grows()
        cluster.restart(follower)
        assert load.grows()
        # Pause the leader of partition 1 past its ZooKeeper session, then resume it.
        leader1 = partitions(cluster.bootstrap, topic)[1][0]
        cluster.pause(leader1)
        others = [b for b in cluster.brokers.values() if b is not cluster.brokers[leader1]]
        bootstrap = ",".join(b.bootstrap for b in others)
        assert wait_for(lambda: partitions(bootstrap, topic)[1][0] not in (leader1, -1), 30)
        cluster.resume(leader1)
        assert load.grows()
        assert wait_for(
            lambda: all(
                len(isr) == 3 for _, _, isr in partitions(cluster.bootstrap, topic).values()
            ),
            30,
        )
        assert load.grows()
    verify(load, cluster.bootstrap, topic, idempotent)


def test_acks_all_loses_nothing_through_failures_idempotent(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    run_failures(make_cluster, topic_name, idempotent=True)


def test_acks_all_loses_nothing_through_failures(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    run_failures(make_cluster, topic_name, idempotent=False)


def test_a_leader_cut_off_the_network_loses_no_acknowledged_record(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    """The leader of a partition is cut off (moldau.testing.isolation: it runs on,
    but nothing it sends arrives): the others elect a new leader; healed, the old
    one follows again, cutting what only it had."""
    cluster = make_cluster(3, **{"replica.lag.time.max.ms": str(LAG_MS)})
    if cluster.isolation_unavailable is not None:
        pytest.skip(cluster.isolation_unavailable)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic_name, PARTITIONS, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic_name].result(timeout=30)
    assert wait_for(lambda: isr_full(cluster.bootstrap, topic_name), 20)
    with Load(cluster.bootstrap, topic_name, idempotent=True) as load:
        assert load.grows()
        leader = partitions(cluster.bootstrap, topic_name)[0][0]
        cluster.isolate(leader)
        others = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != leader)
        assert wait_for(lambda: partitions(others, topic_name)[0][0] not in (leader, -1), 30)
        assert load.grows()
        cluster.heal(leader)
        assert wait_for(lambda: isr_full(cluster.bootstrap, topic_name), 60)
        assert load.grows()
    verify(load, cluster.bootstrap, topic_name, idempotent=True)


def isr_full(bootstrap: str, topic: str) -> bool:
    return all(len(isr) == 3 for _, _, isr in partitions(bootstrap, topic).values())


def test_too_small_an_isr_refuses_acks_all_and_the_cli_shows_it(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    """min.insync.replicas=3 and a follower down: once it leaves the ISR, acks=all
    is refused with NOT_ENOUGH_REPLICAS (acks=1 still works), and kafka-topics'
    filters name the partition; when the follower is back, all is as before."""
    import subprocess
    import sys

    cluster = make_cluster(3, **{"replica.lag.time.max.ms": str(LAG_MS)})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic_name, 1, 3, config={"min.insync.replicas": "3"})
    admin.create_topics([new])[topic_name].result(timeout=30)
    assert wait_for(lambda: partitions(cluster.bootstrap, topic_name)[0][2] == [1, 2, 3], 20)
    leader = partitions(cluster.bootstrap, topic_name)[0][0]
    # Not the controller: it takes a dead broker out of the ISR at once (a follower
    # that dies with the controller leaves only once new data finds it behind).
    controller = cluster.wait_for_controller()
    follower = next(b for b in (1, 2, 3) if b not in (leader, controller))

    def describe(*flags: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "moldau", "topics", "--bootstrap-server", cluster.bootstrap,
             "describe", "--topic", topic_name, *flags],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return done.stdout

    def send(acks: str) -> KafkaError | None:
        errors: list[KafkaError | None] = []
        p = Producer(
            {"bootstrap.servers": cluster.bootstrap, "acks": acks, "retries": 0,
             "message.timeout.ms": 10_000}
        )  # fmt: skip
        p.produce(topic_name, b"v", partition=0, on_delivery=lambda e, _m: errors.append(e))
        p.flush(20)
        return errors[0]

    assert send("all") is None
    assert describe("--under-replicated-partitions") == ""
    cluster.kill(follower)
    assert wait_for(lambda: follower not in partitions(cluster.bootstrap, topic_name)[0][2], 30)
    err = send("all")
    assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS
    assert send("1") is None
    for flag in ("--under-replicated-partitions", "--under-min-isr-partitions"):
        assert f"Partition: 0\tLeader: {leader}" in describe(flag), flag
    assert describe("--unavailable-partitions") == ""
    cluster.restart(follower)
    assert wait_for(lambda: partitions(cluster.bootstrap, topic_name)[0][2] == [1, 2, 3], 30)
    assert send("all") is None
    assert describe("--under-min-isr-partitions") == ""


def test_offset_for_leader_epoch_tells_where_each_leader_epoch_ended(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    """OffsetForLeaderEpoch (KIP-101/320) after a failover: the old epoch ends where
    the new leader began; the current one at the log end; unknown epochs and stale
    or future current_leader_epoch get Kafka's answers."""
    from moldau.protocol.errors import ErrorCode
    from tests.integration import requests as rq
    from tests.integration.kafka_wire import WireClient

    cluster = make_cluster(3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 3)])[topic_name].result(timeout=30)
    assert wait_for(lambda: partitions(cluster.bootstrap, topic_name)[0][2] == [1, 2, 3], 20)

    def produce(n: int) -> None:
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(n):
            p.produce(topic_name, b"v%d" % i, partition=0)
        assert p.flush(30) == 0

    produce(5)
    first = partitions(cluster.bootstrap, topic_name)[0][0]
    cluster.kill(first)
    assert wait_for(lambda: partitions(cluster.bootstrap, topic_name)[0][0] not in (first, -1), 30)
    produce(3)
    leader = partitions(cluster.bootstrap, topic_name)[0][0]

    def ask(epoch: int, current: int = -1) -> tuple[int, int, int]:
        request = rq.request(
            23, 4, replica_id=-1,
            topics=[{"topic": topic_name, "partitions": [
                {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}
            ]}],
        )  # fmt: skip
        with WireClient(cluster.brokers[leader].bootstrap) as c:
            [t] = c.request(request).topics
            [p] = t.partitions
            return p.error_code, p.leader_epoch, p.end_offset

    assert ask(0) == (ErrorCode.none, 0, 5)
    assert ask(1) == (ErrorCode.none, 1, 8)
    assert ask(7) == (ErrorCode.none, -1, -1)
    assert ask(1, current=0)[0] == ErrorCode.fenced_leader_epoch
    assert ask(1, current=9)[0] == ErrorCode.unknown_leader_epoch


def test_acks_1_may_lose_what_the_dead_leader_alone_had(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    """acks=1 and a leader killed mid-stream: records the leader acknowledged before
    its followers fetched them may be lost, as in Kafka (the count is printed). What
    was acknowledged once the new leader led is all there, and the replicas agree:
    every offset holds one record, with no gap."""
    # Two fetchers per leader (num.replica.fetchers), each with its own connection.
    cluster = make_cluster(
        3, **{"replica.lag.time.max.ms": str(LAG_MS), "num.replica.fetchers": "2"}
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, PARTITIONS, 3)])[topic_name].result(timeout=30)
    assert wait_for(
        lambda: all(
            len(isr) == 3 for _, _, isr in partitions(cluster.bootstrap, topic_name).values()
        ),
        20,
    )
    with Load(cluster.bootstrap, topic_name, idempotent=False, acks="1") as load:
        assert load.grows(2000)
        leader = partitions(cluster.bootstrap, topic_name)[0][0]
        cluster.kill(leader)
        assert wait_for(
            lambda: partitions(cluster.bootstrap, topic_name)[0][0] not in (leader, -1), 30
        )
        took_over = time.monotonic()
        assert load.grows(2000)
        cluster.restart(leader)
        assert load.grows(2000)
    acked = {o: v for (p, o), v in load.acked.items() if p == 0}
    got = confluent_consume(cluster.bootstrap, topic_name, max(acked) + 1, partition=0)
    stored = {o: v for _, o, _, v, _ in got}
    assert sorted(stored) == list(range(len(stored)))  # one record an offset, no gap
    lost = [o for o, v in acked.items() if stored.get(o) != v]
    late = [o for o in lost if load.acked_at[(0, o)] > took_over]
    print(f"acks=1: acknowledged {len(acked)}, lost {len(lost)} (all before the failover)")
    assert late == []


@dataclass
class StaleReplica:
    """A partition whose only ISR member died after the other replica fell behind:
    no leader, and nothing acknowledged given up, until an unclean election."""

    cluster: Cluster
    topic: str
    follower: int
    survivors: str
    early: list[bytes]
    leader: int

    def produce(self, values: list[bytes]) -> list[int]:
        offsets: list[int] = []
        p = Producer({"bootstrap.servers": self.cluster.bootstrap, "acks": "all",
                      "message.timeout.ms": 20_000})  # fmt: skip

        def done(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                offsets.append(msg.offset())

        for v in values:
            p.produce(self.topic, v, partition=0, on_delivery=done)
        p.flush(30)
        return offsets

    def unclean_leader_came(self) -> None:
        """The stale replica leads; what only the dead one had is lost, as on Kafka."""
        assert wait_for(
            lambda: (
                partitions(self.survivors, self.topic)[0][:3:2] == (self.follower, [self.follower])
            ),
            30,
        )
        assert self.produce([b"after"]) == [10]
        got = confluent_consume(self.survivors, self.topic, 11)
        assert [v for _, _, _, v, _ in got] == [*self.early, b"after"]


def stale_replica(
    make_cluster: MakeCluster, topic_name: str, stop_leader_cleanly: bool = False
) -> StaleReplica:
    """`stop_leader_cleanly`: the leader stops (its files closed, its epochs written)
    rather than being killed -9."""
    overrides = {"replica.lag.time.max.ms": str(LAG_MS)}
    if stop_leader_cleanly:
        # A sole ISR member's controlled shutdown can hand nothing over: it would
        # retry for 10 s.
        overrides["controlled.shutdown.enable"] = "false"
    cluster = make_cluster(3, **overrides)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # Replicas away from the controller, which takes a dead broker out of the ISR
    # at once.
    controller = cluster.wait_for_controller()
    leader, follower = (b for b in (1, 2, 3) if b != controller)
    new = NewTopic(
        topic_name,
        num_partitions=1,
        replica_assignment=[[leader, follower]],
        config={"min.insync.replicas": "1"},
    )
    admin.create_topics([new])[topic_name].result(timeout=30)
    assert wait_for(
        lambda: partitions(cluster.bootstrap, topic_name)[0][2] == sorted([leader, follower]), 20
    )
    survivors = ",".join(cluster.brokers[b].bootstrap for b in (controller, follower))
    early = [b"early-%d" % i for i in range(10)]
    s = StaleReplica(cluster, topic_name, follower, survivors, early, leader)
    assert s.produce(s.early) == list(range(10))
    cluster.kill(follower)
    assert wait_for(lambda: partitions(cluster.bootstrap, topic_name)[0][2] == [leader], 30)
    assert s.produce([b"late-%d" % i for i in range(5)]) == list(range(10, 15))
    if stop_leader_cleanly:
        cluster.stop(leader)
    else:
        cluster.kill(leader)
    assert wait_for(lambda: partitions(survivors, topic_name)[0][0] == -1, 30)
    cluster.restart(follower)
    # Unclean election is off: no leader, however long we wait.
    assert not wait_for(lambda: partitions(survivors, topic_name)[0][0] != -1, 5)
    return s


def test_unclean_election_waits_for_the_topic_config_and_then_elects_a_stale_replica(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    """Switching the topic's unclean.leader.election.enable on at run time makes
    the controller elect the stale replica."""
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    s = stale_replica(make_cluster, topic_name, stop_leader_cleanly=True)
    checkpoint = s.cluster.data_dir(s.leader) / f"{topic_name}-0" / "leader-epoch-checkpoint"
    epochs = LeaderEpochCheckpointFile(checkpoint).read()
    # Records 10-14 came in a leader epoch of their own (the ISR shrank): its entry.
    assert epochs[-1][1] == 10
    entry = ConfigEntry(
        "unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[entry])
    survivors_admin = AdminClient({"bootstrap.servers": s.survivors})
    survivors_admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    s.unclean_leader_came()

    # The old leader comes back as a follower: its records 10-14, of an epoch the new
    # leader never had, are cut (OffsetsForLeaderEpoch), and the epoch goes from its
    # checkpoint, written off the event loop but before the new leader's records are
    # copied past the cut. Killed -9 once it has them, its file names no epoch its
    # log no longer has.
    s.cluster.restart(s.leader)
    assert wait_for(lambda: len(partitions(s.survivors, s.topic)[0][2]) == 2, 30)
    s.cluster.kill(s.leader)
    after = LeaderEpochCheckpointFile(checkpoint).read()
    assert after[: len(epochs) - 1] == epochs[:-1]
    assert all(epoch > epochs[-1][0] for epoch, _ in after[len(epochs) - 1 :]), after


def test_pipelined_acks_all_produces_are_answered_in_order(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    """Produce requests with acks=all sent back to back on one connection (as
    librdkafka pipelines them), a Metadata request among them: the leader goes on
    with the next while one waits for its ISR, and answers them all in order, with
    the offsets in the order they were sent."""
    from moldau.protocol.records import build_batch
    from tests.integration import requests as rq
    from tests.integration.kafka_wire import WireClient

    cluster = make_cluster(3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 3)])[topic_name].result(timeout=30)
    assert wait_for(lambda: partitions(cluster.bootstrap, topic_name)[0][2] == [1, 2, 3], 20)
    leader = partitions(cluster.bootstrap, topic_name)[0][0]
    with WireClient(cluster.brokers[leader].bootstrap) as c:
        sent = []
        for i in range(30):
            request = (
                rq.metadata(topic_name)
                if i == 10
                else rq.produce(topic_name, 0, build_batch([(None, b"%d" % i)]), acks=-1)
            )
            c.send_raw(c.encode(request))
            sent.append((request, c.correlation_id))
        offsets = []
        for request, correlation_id in sent:
            # In the order sent: read_response checks each answer's correlation id.
            answer = c.read_response(request.__api_key__, request.__version__, correlation_id)
            if request.__api_key__ == 0:
                [p] = answer.responses[0].partition_responses
                assert p.error_code == 0
                offsets.append(int(p.base_offset))
    assert offsets == list(range(29))


def zk_states(cluster: Cluster, topic: str, count: int) -> dict[int, z.LeaderAndIsr]:
    """partition -> its leader, leader epoch and ISR as the controller wrote them."""
    paths = [z.partition_state_path(topic, p) for p in range(count)]
    found = read_znodes(cluster.zookeeper_connect, paths)
    out = {}
    for p, path in enumerate(paths):
        data = found[path]
        assert data is not None, path
        out[p] = z.decode_partition_state(data, 0).leader_and_isr
    return out


def settled(cluster: Cluster, topic: str, count: int) -> bool:
    """Every partition has a leader and every replica is in its ISR."""
    states = zk_states(cluster, topic, count).values()
    return all(li.leader != -1 and len(li.isr) == len(cluster.brokers) for li in states)


@pytest.mark.timeout(240)
def test_a_controller_cut_off_past_its_session_comes_back_and_rejoins_every_isr(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    """A leader is cut off the network for 6 s, then the controller (past their
    ZooKeeper sessions of 2 s), under idempotent acks=all load: the others elect a
    controller and leaders. Healed, the broker learns its session expired, resigns
    before anything else, registers again and only then stands for election; the
    controller sees it come back and it rejoins every ISR within seconds. (Its
    registration was retried from a watch whose requests, with a deadline, gave up
    while ZooKeeper was away: it never registered again, no LeaderAndIsr reached it,
    and its fetchers looped on FENCED_LEADER_EPOCH for good. The store's requests now
    wait for ZooKeeper however long, as Kafka's do: tests/unit/test_zookeeper_retry.)"""
    cluster = make_cluster(3, **{"replica.lag.time.max.ms": str(LAG_MS)})
    if cluster.isolation_unavailable is not None:
        pytest.skip(cluster.isolation_unavailable)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic_name, PARTITIONS, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic_name].result(timeout=30)

    def leaders() -> list[int]:
        return [li.leader for li in zk_states(cluster, topic_name, PARTITIONS).values()]

    assert wait_for(lambda: settled(cluster, topic_name, PARTITIONS), 20)
    with Load(cluster.bootstrap, topic_name, idempotent=True) as load:
        assert load.grows()
        controller = cluster.wait_for_controller()
        leader = next((b for b in leaders() if b != controller), None)
        # A cut needs only outlast the session (2 s), which the waits below make
        # sure of before the heal.
        for victim, cut_s in ((leader, 6), (None, 6)):
            cut = cluster.wait_for_controller() if victim is None else victim
            cluster.isolate(cut)
            cut_at = time.monotonic()
            assert wait_for(lambda cut=cut: cut not in cluster.live_broker_ids(), 30)
            assert wait_for(lambda cut=cut: not {cut, -1} & set(leaders()), 30)
            # (The producer's requests to the broker cut off wait for their timeout:
            # the load may not grow meanwhile.)
            time.sleep(max(0.0, cut_at + cut_s - time.monotonic()))
            cluster.heal(cut)
            healed_at = time.monotonic()
            assert wait_for(lambda: settled(cluster, topic_name, PARTITIONS), 60), zk_states(
                cluster, topic_name, PARTITIONS
            )
            took = time.monotonic() - healed_at
            print(f"broker {cut}, cut off {cut_s} s, back in every ISR {took:.1f} s after heal")
            assert load.grows()
    verify(load, cluster.bootstrap, topic_name, idempotent=True)
