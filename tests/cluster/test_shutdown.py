"""A broker's shutdown is bounded whatever ZooKeeper does: with ZooKeeper gone past
every session's timeout while producers still write, SIGTERM stops each broker of
the cluster within seconds, cleanly."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from tests.cluster.test_replication import partitions

#: The bound: controlled.shutdown.max.retries (3) x controlled.shutdown.retry.backoff.ms
#: (5 s), as Kafka allows, plus a few seconds.
BOUND_S = 20.0


def test_sigterm_stops_every_broker_in_bounded_time_with_zookeeper_gone(
    tmp_path: Path, topic_name: str
) -> None:
    with Cluster(tmp_path, brokers=3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        new = NewTopic(topic_name, 3, 3, config={"min.insync.replicas": "2"})
        admin.create_topics([new])[topic_name].result(timeout=30)
        assert wait_for(
            lambda: all(
                len(isr) == 3 for _, _, isr in partitions(cluster.bootstrap, topic_name).values()
            ),
            30,
        )
        stop = threading.Event()

        def write() -> None:  # work in flight: acks=all produces, bounded in time
            p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
            deadline = time.monotonic() + 120
            while not stop.is_set() and time.monotonic() < deadline:
                with contextlib.suppress(BufferError):  # the queue is full: poll drains it
                    p.produce(topic_name, b"v")
                p.poll(0.001)
            p.flush(1)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        try:
            time.sleep(1)
            cluster.zookeeper.kill()
            time.sleep(2.0 * 2 + 1)  # past every session's timeout (2 s)
            took = {}
            for broker_id, broker in cluster.brokers.items():
                start = time.monotonic()
                code = broker.stop(timeout=BOUND_S + 30)
                took[broker_id] = time.monotonic() - start
                assert code == 0, f"broker {broker_id} exited with {code}"
        finally:
            stop.set()
            writer.join(10)
        print("seconds to exit after SIGTERM:", took)
        assert all(t < BOUND_S for t in took.values()), took
