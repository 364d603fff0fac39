"""The Prometheus endpoint, scraped as Prometheus would while the cluster changes:
the names are those the JMX exporter gives Kafka's metrics (so Kafka dashboards
work), and the values follow what clients and brokers do."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from moldau.testing.local import LocalCluster
from moldau.testing.process import wait_for
from tests.cluster.test_replication import LAG_MS

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    overrides = {"metrics.port": "0", "replica.lag.time.max.ms": str(LAG_MS)}
    with LocalCluster(tmp_path / "cluster", 3, overrides) as c:
        yield c


def test_metrics_follow_traffic_and_a_follower_going_down_and_back(
    cluster: LocalCluster, topic_name: str
) -> None:
    def total(name: str, brokers: tuple[int, ...] = (1, 2, 3), **labels: str) -> float:
        return sum(value(scrape(cluster.metrics_url(b)), name, **labels) for b in brokers)

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic_name, num_partitions=2, replica_assignment=[[1, 2, 3], [2, 1, 3]])
    admin.create_topics([new])[topic_name].result(timeout=30)
    rm = "kafka_server_replicamanager_"
    assert wait_for(lambda: total(rm + "leadercount") >= 2, 20)
    assert total("kafka_controller_kafkacontroller_activecontrollercount") == 1

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce(topic_name, b"%03d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    topic_metric = "kafka_server_brokertopicmetrics_"
    assert total(topic_metric + "messagesin_total", topic=topic_name) == 100
    assert total(topic_metric + "bytesin_total", topic=topic_name) > 100 * 3
    assert total(topic_metric + "replicationbytesin_total") > 0
    produces = "kafka_network_requestmetrics_requests_total"
    assert (
        sum(
            value(scrape(cluster.metrics_url(b)), produces, request="Produce", version=str(v))
            for b in (1, 2)
            for v in range(3, 12)
        )
        >= 1
    )
    assert total("kafka_network_requestmetrics_totaltimems_count", request="Produce") >= 1

    # A group that read 30 of partition 0's 50 records lags 20 there.
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "readers",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([CTP(topic_name, 0, 0)])
    read = 0
    for _ in range(200):
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            read += 1
            if read == 30:
                consumer.commit(m, asynchronous=False)
                break
    consumer.close()
    assert read == 30
    lag = {"consumergroup": "readers", "topic": topic_name, "partition": "0"}
    assert wait_for(lambda: total("kafka_consumergroup_lag", **lag) == 20, 10)
    assert total(topic_metric + "bytesout_total", topic=topic_name) > 0

    # Broker 3 follows both partitions: down, they are under-replicated on their
    # leaders once the controller takes it out of the ISRs (leaders count no shrink
    # of theirs, as in Kafka); back, the leaders take it in again.
    assert total(rm + "underreplicatedpartitions") == 0
    expands = total(rm + "isrexpands_total", (1, 2))
    cluster.kill(3)
    assert wait_for(lambda: total(rm + "underreplicatedpartitions", (1, 2)) >= 2, 20)
    assert total("kafka_controller_kafkacontroller_offlinepartitionscount", (1, 2)) == 0
    cluster.restart(3)
    assert wait_for(lambda: total(rm + "underreplicatedpartitions") == 0, 30)
    assert total(rm + "isrexpands_total", (1, 2)) >= expands + 2


def test_the_endpoint_survives_bad_requests(cluster: LocalCluster) -> None:
    url = cluster.metrics_url(1)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("/metrics", "/nope"), timeout=10)
    e.value.close()
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"), timeout=10)
    e.value.close()
    assert e.value.code == 405
    host, port = url.split("//")[1].split("/")[0].split(":")
    for junk in [b"\x00\xff" * 10_000, b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 5000, b""]:
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            assert s.recv(100) == b""  # closed without an answer
    assert value(scrape(url), "kafka_server_kafkaserver_brokerstate") == 3
