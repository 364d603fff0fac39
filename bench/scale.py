"""Partition count (issue 10), on one embedded broker (`moldau serve`):

- CreateTopics of one topic of N partitions until every partition has a leader,
  for N = 1,000 and 10,000;
- with 10,000 partitions and one record in each: SIGTERM (time until the process
  exits), restart, time until the broker accepts connections and until all 10,000
  are readable; idle RSS;
- three broker processes on ZooKeeper: CreateTopics of 10,000 partitions x RF 1
  until every partition has a leader (1,000 x RF 3 is in bench/cluster.py).

Creating a partition creates a directory and a file: on this machine's virtual disk
(ext4, discard) creating files stalls for seconds at a time after a burst of
deletions, so the creation figures are taken on a quiet disk (`settle`) and vary
with its state.

    .venv/bin/python bench/scale.py            # prints a markdown section
    .venv/bin/python bench/scale.py --record   # and appends it to bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import datetime
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from throughput import machine, publish

SIZES = (1000, 10_000)
ZK_PARTITIONS = 10_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    def __init__(self, data: Path) -> None:
        self.data = data
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> float:
        """Seconds until it accepts connections."""
        start = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moldau", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--data-dir", str(self.data), "--log-level", "WARNING"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return time.monotonic() - start
            except OSError:
                if time.monotonic() - start > 120:
                    raise SystemExit("the broker did not start") from None
                time.sleep(0.005)

    def stop(self) -> float:
        """Seconds from SIGTERM until the process exits."""
        assert self.proc is not None
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)
        return time.monotonic() - start

    def rss_mb(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def all_led(client: Any, topic: str, n: int) -> bool:
    md = client.list_topics(topic, timeout=30).topics.get(topic)
    return (
        md is not None
        and len(md.partitions) == n
        and all(p.leader >= 0 for p in md.partitions.values())
    )


def create(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    start = time.monotonic()
    client.create_topics([NewTopic(topic, n, 1)])[topic].result(300)
    while not all_led(client, topic, n):
        time.sleep(0.02)
    return time.monotonic() - start


def settle() -> None:
    """Let the disk finish writing back before a timed creation."""
    subprocess.run(["sync"], check=True)
    time.sleep(10)


def zookeeper_figure(tmp: Path, n: int) -> float:
    from moldau.testing.cluster import Cluster

    with Cluster(tmp / "zk", brokers=3) as cluster:
        settle()
        return create(cluster.bootstrap, "many", n)


def fill(broker: Broker, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for p in range(n):
        producer.produce(topic, b"x", partition=p)
        producer.poll(0)
    if producer.flush(120):
        raise SystemExit("records were not acknowledged")


def readable(broker: Broker, topic: str, n: int, started: float) -> float:
    """Seconds from `started` until every partition answers a ListOffsets with its
    one record (as a consumer seeking to the end sees it)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-scale"})
    try:
        pending = list(range(n))
        while pending:
            tps = [TopicPartition(topic, p) for p in pending[:2000]]
            try:
                got = consumer.offsets_for_times(
                    [TopicPartition(t.topic, t.partition, -1) for t in tps], timeout=30
                )
            except Exception:  # partitions still loading answer retriable errors
                time.sleep(0.05)
                continue
            done = {t.partition for t in got if t.error is None and t.offset == 1}
            pending = [p for p in pending if p not in done]
        return time.monotonic() - started
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n in SIZES:
            broker = Broker(Path(d) / f"b{n}")
            broker.start()
            settle()
            took = create(broker.bootstrap, "many", n)
            rows.append((n, took))
            print(f"{n:,} partitions online in {took:.2f} s", flush=True)
            if n == SIZES[-1]:
                fill(broker, "many", n)
                stopped = broker.stop()
                started = time.monotonic()
                accepting = broker.start()
                all_readable = readable(broker, "many", n, started)
                time.sleep(5)
                rss = broker.rss_mb()
            broker.stop()
        zk = zookeeper_figure(Path(d), ZK_PARTITIONS)
        print(f"{ZK_PARTITIONS:,} partitions x RF 1 on ZooKeeper online in {zk:.2f} s", flush=True)
    lines = [
        f"## {datetime.date.today().isoformat()}: partition count, one embedded broker",
        "",
        f"Machine: {machine()}.",
        "",
        "| figure | measured | aim |",
        "|---|---|---|",
        *(
            f"| CreateTopics of {n:,} partitions to all with a leader | {t:.2f} s "
            f"| {'<= 1 s' if n == 1000 else '<= 5 s'} |"
            for n, t in rows
        ),
        f"| {SIZES[-1]:,} partitions, one record each: SIGTERM to exit | {stopped:.2f} s | |",
        f"| ... after restart: accepting connections | {accepting:.2f} s | <= 1 s |",
        f"| ... all {SIZES[-1]:,} readable | {all_readable:.2f} s | <= 5 s |",
        f"| idle RSS with {SIZES[-1]:,} partitions | {rss:.0f} MB | <= 300 MB |",
        f"| 3 brokers on ZooKeeper: CreateTopics of {ZK_PARTITIONS:,} partitions x RF 1 "
        f"to all with a leader | {zk:.2f} s | <= 10 s |",
    ]
    publish("\n".join(lines) + "\n", args.record)


if __name__ == "__main__":
    main()
