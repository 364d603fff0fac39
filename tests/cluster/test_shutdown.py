"""Shutting down a broker of a cluster: a controlled shutdown moves its leaderships
first, and the whole shutdown is bounded whatever ZooKeeper does."""

from __future__ import annotations

import contextlib
import itertools
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from moldau.testing.zookeeper import ZooKeeperServer
from tests.cluster.test_replication import partitions
from tests.integration.clients import confluent_consume

#: controlled.shutdown.max.retries and .retry.backoff.ms in the test, and the bound
#: the issue asks for: tries x backoff, plus a few seconds.
RETRIES, BACKOFF_MS = 3, 2000
BOUND_S = RETRIES * BACKOFF_MS / 1000 + 4.0


def test_sigterm_stops_every_broker_in_bounded_time_with_zookeeper_gone(
    tmp_path: Path, topic_name: str
) -> None:
    overrides = {
        "controlled.shutdown.max.retries": str(RETRIES),
        "controlled.shutdown.retry.backoff.ms": str(BACKOFF_MS),
    }
    with Cluster(tmp_path, brokers=3, overrides=overrides) as cluster:
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
            # All three at once, as when a whole cluster is shut down; each one's time
            # runs from its own SIGTERM. (One after another, the test waited out three
            # bounded shutdowns in a row for nothing.)
            took: dict[int, float] = {}
            codes: dict[int, int] = {}

            def stop_one(broker_id: int) -> None:
                start = time.monotonic()
                codes[broker_id] = cluster.brokers[broker_id].stop(timeout=BOUND_S + 30)
                took[broker_id] = time.monotonic() - start

            stoppers = [threading.Thread(target=stop_one, args=(i,)) for i in cluster.brokers]
            for t in stoppers:
                t.start()
            for t in stoppers:
                t.join()
            assert codes == {i: 0 for i in cluster.brokers}, f"exit codes {codes}"
        finally:
            stop.set()
            writer.join(10)
        print("seconds to exit after SIGTERM:", took)
        assert all(t < BOUND_S for t in took.values()), took


def test_controlled_shutdown_moves_leaders_before_the_broker_stops(
    tmp_path: Path, topic_name: str
) -> None:
    """SIGTERM on a leader under acks=all load: the controller moves its leaderships
    first, so the producer's longest wait for an acknowledgement is a metadata
    refresh or two, not a session timeout; nothing acknowledged is lost."""
    with Cluster(tmp_path, brokers=3) as cluster:
        # A broker that is not the controller: its request goes over the wire.
        controller = cluster.wait_for_controller()
        victim = next(b for b in (1, 2, 3) if b != controller)
        others = [b for b in (1, 2, 3) if b != victim]
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        new = NewTopic(
            topic_name,
            num_partitions=3,
            replica_assignment=[
                [victim, *others],
                [*others, victim],
                [others[1], victim, others[0]],
            ],
            config={"min.insync.replicas": "2"},
        )
        admin.create_topics([new])[topic_name].result(timeout=30)
        assert wait_for(
            lambda: all(
                len(isr) == 3 for _, _, isr in partitions(cluster.bootstrap, topic_name).values()
            ),
            30,
        )
        acked: list[tuple[float, int, int]] = []  # (when, partition, offset)
        stop = threading.Event()

        def write() -> None:
            p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 1})

            def done(err: object, msg: object) -> None:
                if err is None:
                    acked.append((time.monotonic(), msg.partition(), msg.offset()))  # type: ignore[attr-defined]

            deadline = time.monotonic() + 120
            while not stop.is_set() and time.monotonic() < deadline:
                with contextlib.suppress(BufferError):
                    p.produce(topic_name, b"v", partition=0, on_delivery=done)
                p.poll(0.002)
            p.flush(10)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        try:
            assert wait_for(lambda: len(acked) > 200, 30)
            sigterm = time.monotonic()
            assert cluster.stop(victim) == 0  # the leader of partition 0
            exited = time.monotonic() - sigterm
            assert wait_for(lambda: any(t > sigterm + 2 for t, _, _ in acked), 30)
        finally:
            stop.set()
            writer.join(15)
        times = sorted(t for t, _, _ in acked if t > sigterm - 1)
        longest = max(b - a for a, b in itertools.pairwise(times))
        print(
            f"broker exited {exited:.2f} s after SIGTERM; longest wait between acks {longest:.3f} s"
        )
        assert exited < 5
        # A failover by session expiry would take zookeeper.session.timeout.ms (18 s).
        # librdkafka re-queries a leader at most once a second, and may drop a fresh
        # one when it decommissions the departed broker ("Reverting from preferred
        # replica" in its debug log), which costs one more re-query: up to 2 s.
        assert longest < 3.0
        # Its leaderships had moved before it stopped serving (with the setting off,
        # the failover comes from its ZooKeeper session closing instead).
        log = cluster.brokers[victim].log_path.read_text()
        assert f"broker {victim}: controlled shutdown done" in log
        assert partitions(cluster.bootstrap, topic_name)[0][0] in others
        offsets = sorted(o for _, p, o in acked if p == 0)
        assert offsets == sorted(set(offsets))
        got = confluent_consume(cluster.bootstrap, topic_name, offsets[-1] + 1, partition=0)
        assert {o for _, o, _, _, _ in got} >= set(offsets)


def test_sigterm_stops_a_broker_still_waiting_for_zookeeper_at_start(
    tmp_path: Path, zookeeper: ZooKeeperServer, zk_connect: str
) -> None:
    """A broker starting while ZooKeeper does not answer (paused: its port accepts,
    nothing replies) waits for it as long as zookeeper.connection.timeout.ms; SIGTERM
    meanwhile stops it at once, exit 0, with no traceback."""
    zookeeper.pause()
    proc = None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moldau", "serve", "--port", "0",
             "--data-dir", str(tmp_path / "data"),
             f"--override=zookeeper.connect={zk_connect}",
             "--override=zookeeper.connection.timeout.ms=60000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

        def connected_to_zookeeper() -> bool:
            conns = psutil.Process(proc.pid).net_connections("tcp")
            return any(c.raddr and c.raddr.port == zookeeper.port for c in conns)

        assert wait_for(connected_to_zookeeper, timeout=30)
        time.sleep(0.5)  # into kazoo's handshake wait, past the signal handlers' set-up
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - started
    finally:
        zookeeper.resume()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert took < 5, f"{took:.1f} s from SIGTERM to exit"
