"""Three brokers on ZooKeeper whose only listener is SASL_SSL, logging in to each
other with SCRAM-SHA-512 as a super user, with ACLs on (issue 26): replication and
the controller's requests work, a failover under an acks=all producer loses
nothing, and a broker with the wrong inter-broker password cannot join.

One cluster for the module: the tests run in this order, each leaving it whole
(the third adds a fourth broker and kills it at its end). Its SASL sessions last
two seconds (connections.max.reauth.ms): the last test checks that no link
between brokers was cut for an expired session all along."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient

from moldau.testing.certs import Certificates
from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from moldau.testing.sasl import SaslUsers
from moldau.testing.zookeeper import ZooKeeperServer

USERS = SaslUsers({"admin": "admin-secret", "app": "app-secret"})
PREFIX = "secure-"  # the topics and groups the app user may use
REAUTH_MS = 2000
STARTED: list[float] = []  # when the module's cluster started (time.monotonic)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer
) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("sasl-cluster")
    certs = Certificates.create(directory / "certs")
    overrides = {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "replica.lag.time.max.ms": "5000",
        # Short sessions: every link logs in again many times during the module.
        "connections.max.reauth.ms": str(REAUTH_MS),
    }
    with Cluster(
        directory / "cluster", 3, overrides, zookeeper=zookeeper,
        chroot=f"/moldau-{uuid.uuid4().hex[:10]}", tls=certs, sasl=USERS,
        inter_broker_listener="SASL_SSL",
    ) as c:  # fmt: skip
        admin = AdminClient(c.sasl_client_config())
        grants = [
            AclBinding(rtype, PREFIX, ResourcePatternType.PREFIXED, "User:app", "*", op,
                       AclPermissionType.ALLOW)
            for rtype, op in [(ResourceType.TOPIC, AclOperation.ALL),
                              (ResourceType.GROUP, AclOperation.READ)]
        ]  # fmt: skip
        for f in admin.create_acls(grants).values():
            f.result(30)
        STARTED.append(time.monotonic())
        yield c


def moldau(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moldau", *args], check=False,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def app_config(cluster: Cluster, mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
    return cluster.sasl_client_config("app", mechanism)


def state(bootstrap: str, conf: dict[str, Any], topic: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, sorted ISR), as the broker(s) at `bootstrap` answer."""
    admin = AdminClient(conf | {"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic, timeout=10).topics[topic]
    if md.error is not None:
        return {}
    return {p.id: (p.leader, sorted(p.isrs)) for p in md.partitions.values()}


def every_broker_says(cluster: Cluster, topic: str) -> list[dict[int, tuple[int, list[int]]]]:
    """Each running broker's own Metadata answer for `topic`, asked of it alone."""
    conf = cluster.sasl_client_config()
    return [
        state(b.sasl_bootstrap, conf, topic)
        for b in cluster.brokers.values()
        if cluster.is_running(b)
    ]


def read_all(conf: dict[str, Any], topic: str, partitions: int, expected: int) -> list[bytes]:
    """Every record of the topic's partitions from the start (stops at `expected`,
    or when nothing more comes)."""
    c = Consumer(conf | {"group.id": f"{PREFIX}reader", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    try:

        def more() -> bool:
            got.extend(m.value() for m in c.consume(500, 1) if m.error() is None)
            return len(got) >= expected

        wait_for(more, 30)
        # Anything beyond what was expected would show up now.
        got.extend(m.value() for m in c.consume(500, 1) if m.error() is None)
    finally:
        c.close()
    return got


def test_replication_and_controller_requests_over_sasl_ssl(cluster: Cluster) -> None:
    # Registered with its only listener, SASL_SSL, as Kafka registers it.
    registration = json.loads(cluster.znode("/brokers/ids/1") or b"{}")
    assert registration["listener_security_protocol_map"] == {"SASL_SSL": "SASL_SSL"}
    assert [e.split(":")[0] for e in registration["endpoints"]] == ["SASL_SSL"]

    topic = f"{PREFIX}replicated"
    admin = AdminClient(cluster.sasl_client_config())
    new = NewTopic(topic, 3, replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    admin.create_topics([new])[topic].result(30)
    # The controller's LeaderAndIsr and UpdateMetadata reached every broker (over
    # SASL_SSL, logged in with SCRAM): each leads one partition, and each answers
    # the same leaders and ISRs.
    expected = {0: (1, [1, 2, 3]), 1: (2, [1, 2, 3]), 2: (3, [1, 2, 3])}
    assert wait_for(lambda: every_broker_says(cluster, topic) == [expected] * 3, 30)

    app = app_config(cluster)
    p = Producer(app | {"acks": "all"})
    sent = [f"r{i}".encode() for i in range(300)]
    for i, v in enumerate(sent):
        p.produce(topic, v, partition=i % 3)
    assert p.flush(30) == 0
    # acks=all with every ISR whole: the followers fetched it all, over SASL_SSL,
    # logged in as User:admin (without ACLs, only a super user may fetch as one).
    assert every_broker_says(cluster, topic) == [expected] * 3
    assert sorted(read_all(app, topic, 3, len(sent))) == sorted(sent)


def test_a_failover_under_an_acks_all_producer(cluster: Cluster) -> None:
    topic = f"{PREFIX}failover"
    admin = AdminClient(cluster.sasl_client_config())
    controller = cluster.wait_for_controller()
    others = [b for b in cluster.brokers if b != controller]
    # The partition's leader is the controller: one SIGKILL takes both.
    new = NewTopic(topic, 1, replica_assignment=[[controller, *others]],
                   config={"min.insync.replicas": "2"})  # fmt: skip
    admin.create_topics([new])[topic].result(30)
    whole = (controller, [1, 2, 3])
    assert wait_for(lambda: state(cluster.sasl_bootstrap, cluster.sasl_client_config(),
                                  topic) == {0: whole}, 30)  # fmt: skip

    acked: list[bytes] = []
    failed: list[tuple[bytes, KafkaError]] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        value = msg.value()
        assert value is not None
        (acked.append(value) if err is None else failed.append((value, err)))

    p = Producer(app_config(cluster, "SCRAM-SHA-512") | {
        "acks": "all", "enable.idempotence": True, "linger.ms": 5,
        "message.timeout.ms": 60_000,
    })  # fmt: skip
    sent = [f"v{i}".encode() for i in range(600)]
    killed = threading.Event()

    def produce() -> None:
        for i, v in enumerate(sent):
            if i == len(sent) // 2:
                killed.wait(30)
            p.produce(topic, v, on_delivery=delivered)
            p.poll(0.002)
        p.flush(60)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert wait_for(lambda: len(acked) >= 100, 30)
        cluster.kill(controller)
    finally:
        killed.set()
        producer.join(90)
    survivors = cluster.sasl_client_config()
    # A new controller, and every partition of every topic led by a live broker.
    assert cluster.wait_for_controller(other_than=controller) in others

    def all_led() -> bool:
        md = AdminClient(survivors).list_topics(timeout=10)
        return all(p.leader in others for t in md.topics.values() for p in t.partitions.values())

    assert wait_for(all_led, 30)
    assert failed == [] and len(acked) == len(sent)
    cluster.restart(controller)
    # Back in the ISR: it logged in to the new leader (SCRAM) and caught up.
    assert wait_for(lambda: state(cluster.sasl_bootstrap, survivors, topic)[0][1] == [1, 2, 3], 30)
    # Every acknowledged record, once, in order; nothing else.
    assert read_all(app_config(cluster), topic, 1, len(acked)) == acked


def test_a_broker_with_the_wrong_inter_broker_password_cannot_join(cluster: Cluster) -> None:
    topic = f"{PREFIX}reassigned"
    admin = AdminClient(cluster.sasl_client_config())
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]])])[topic].result(30)
    assert wait_for(
        lambda: (
            state(cluster.sasl_bootstrap, cluster.sasl_client_config(), topic)
            == {0: (1, [1, 2, 3])}
        ),
        30,
    )
    intruder = cluster.add_broker(4, sasl=USERS.with_inter_broker_password("not-the-password"))
    try:
        # Registered in ZooKeeper (which SASL does not guard here) and told about
        # the cluster by the controller, whose own login it accepts.
        assert wait_for(lambda: 4 in cluster.live_broker_ids(), 10)
        conf = cluster.sasl_client_config()
        reassign = KafkaAdminClient(
            bootstrap_servers=cluster.sasl_bootstrap.split(","),
            security_protocol="SASL_SSL", sasl_mechanism=conf["sasl.mechanism"],
            sasl_plain_username=conf["sasl.username"],
            sasl_plain_password=conf["sasl.password"], ssl_cafile=conf["ssl.ca.location"],
        )  # fmt: skip
        try:
            tp = KTP(topic, 0)
            assert reassign.alter_partition_reassignments({tp: [1, 2, 3, 4]}) == {tp: None}
            # Its fetches from leader 1 are refused, again and again.
            log = intruder.log_path

            def refused(times: int) -> bool:
                return log.read_text().count("SASL_AUTHENTICATION_FAILED") >= times

            assert wait_for(lambda: refused(3), 30), log.read_text()[-3000:]
            assert "failed SCRAM-SHA-512 authentication" in cluster.brokers[1].log_path.read_text()
            # ... so it never enters the ISR, and the reassignment waits for it.
            assert state(cluster.sasl_bootstrap, conf, topic) == {0: (1, [1, 2, 3])}
            assert tp in reassign.list_partition_reassignments()
        finally:
            reassign.close()
        # Meanwhile the cluster serves as before.
        app = app_config(cluster)
        p = Producer(app | {"acks": "all"})
        for i in range(50):
            p.produce(topic, f"m{i}".encode())
        assert p.flush(30) == 0
        assert read_all(app, topic, 1, 50) == [f"m{i}".encode() for i in range(50)]
        assert state(cluster.sasl_bootstrap, conf, topic) == {0: (1, [1, 2, 3])}
    finally:
        cluster.kill(4)


def test_moldau_configs_writes_a_user_to_zookeeper_and_running_brokers_learn_it(
    cluster: Cluster,
) -> None:
    """kafka-configs.sh --zookeeper's way (how users exist before brokers start),
    here while they run: each broker learns the user from the change notification."""
    base = ["configs", "--zookeeper", cluster.zookeeper_connect]
    user = ["--entity-type", "users", "--entity-name", "carol"]
    added = moldau(*base, "--alter", *user, "--add-config", "SCRAM-SHA-512=[password=carol-pw]")
    assert added.returncode == 0, added.stderr
    assert added.stdout.splitlines()[-1] == (
        "Completed updating config for entity: user-principal 'carol'."
    )
    shown = moldau(*base, "--describe", *user)
    assert shown.stdout.splitlines()[-1].startswith(
        "Configs for user-principal 'carol' are SCRAM-SHA-512=salt="
    )
    carol = cluster.sasl_client_config() | {"sasl.username": "carol", "sasl.password": "carol-pw"}

    def logs_in(bootstrap: str) -> bool:
        try:
            AdminClient(carol | {"bootstrap.servers": bootstrap}).list_topics(timeout=3)
        except KafkaException:
            return False
        return True

    for b in cluster.brokers.values():
        if cluster.is_running(b):
            assert wait_for(lambda b=b: logs_in(b.sasl_bootstrap), 15)  # type: ignore[misc]


def test_links_log_in_again_before_their_sessions_end(cluster: Cluster) -> None:
    """KIP-368: the brokers' links (the controller's, the followers') log in again
    on their connections in time, as librdkafka's do; a session that ended would
    close its connection under a request."""
    assert time.monotonic() - STARTED[0] > 3 * REAUTH_MS / 1000  # many sessions long
    for b in cluster.brokers.values():
        assert "SASL session expired" not in b.log_path.read_text()
