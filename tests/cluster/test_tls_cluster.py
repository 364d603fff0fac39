"""Three brokers whose links to each other (the controller's requests, followers'
fetches) go over their SSL listener, with client certificates required:
replication and a failover work, and each broker's peers are seen by their
certificates."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.testing.certs import Certificates
from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from moldau.testing.zookeeper import ZooKeeperServer


def test_brokers_replicate_over_ssl_and_fail_over(
    tmp_path: Path, zookeeper: ZooKeeperServer, topic_name: str
) -> None:
    certs = Certificates.create(tmp_path / "certs")
    client = certs.client("app")
    cluster = Cluster(
        tmp_path / "cluster", 3, {"replica.lag.time.max.ms": "5000"},
        zookeeper=zookeeper, chroot=f"/moldau-{uuid.uuid4().hex[:10]}",
        tls=certs, client_auth="required", inter_broker_listener="SSL",
    )  # fmt: skip
    with cluster:
        conf: dict[str, Any] = {
            "bootstrap.servers": cluster.ssl_bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca),
            "ssl.certificate.location": str(client.cert),
            "ssl.key.location": str(client.key),
        }
        # Registered as Kafka registers listeners, each with its protocol.
        registration = json.loads(cluster.znode("/brokers/ids/1") or b"{}")
        assert registration["listener_security_protocol_map"] == {
            "PLAINTEXT": "PLAINTEXT", "SSL": "SSL",
        }  # fmt: skip
        admin = AdminClient(conf)
        admin.create_topics([NewTopic(topic_name, 1, 3)])[topic_name].result(timeout=30)

        def isr() -> list[int]:
            md = admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions[0]
            return sorted(md.isrs)

        p = Producer(conf | {"acks": "all"})
        for i in range(100):
            p.produce(topic_name, f"a{i}".encode())
        assert p.flush(30) == 0
        assert wait_for(lambda: isr() == [1, 2, 3], 30)
        leader = admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions[0].leader
        # The followers fetched with the brokers' own certificate.
        log = cluster.brokers[leader].log_path.read_text()
        assert "on listener SSL is User:CN=broker,O=Moldau Test" in log

        cluster.kill(leader)
        for i in range(100):
            p.produce(topic_name, f"b{i}".encode())
        assert p.flush(60) == 0
        c = Consumer(conf | {
            "bootstrap.servers": cluster.ssl_bootstrap, "group.id": "g",
            "enable.auto.commit": False,
        })  # fmt: skip
        c.assign([TopicPartition(topic_name, 0, 0)])
        got: list[bytes] = []
        wait_for(lambda: got.extend(m.value() for m in c.consume(200, 1) if not m.error())
                 or len(got) >= 200, 30)  # fmt: skip
        c.close()
        assert got == [f"a{i}".encode() for i in range(100)] + [
            f"b{i}".encode() for i in range(100)
        ]
