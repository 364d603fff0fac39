"""Running a cluster (issue 9's figures), on this machine:

- `moldau serve --brokers 3`: from the process start until all three ports accept.
- 1,000 partitions x RF 3 on 3 brokers, from CreateTopics until every partition has
  a leader and a full ISR: on `--brokers 3` (embedded store) and on three broker
  processes on ZooKeeper.
- Controlled shutdown (SIGTERM) of a ZooKeeper-mode broker leading a third of those
  partitions: until the process exits, and until the others lead them all.
- Reassignment: one partition of 200 MB moved to another broker, MB/s without a
  throttle and with --throttle 20 MB/s.

    .venv/bin/python bench/cluster.py            # prints a markdown section
    .venv/bin/python bench/cluster.py --record   # and appends it to bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from moldau.testing.cluster import Cluster
from throughput import machine, publish

PARTITIONS = 1000
MOVE_MB = 200
THROTTLE = 20_000_000


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def wait_online(bootstrap: str, topic: str, partitions: int, rf: int, timeout: float = 120) -> None:
    client = admin(bootstrap)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = client.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md is not None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values())
        ):
            return
        time.sleep(0.02)
    raise SystemExit(f"{topic}: not online with a full ISR in {timeout:g} s")


def create_online(bootstrap: str, topic: str) -> float:
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)  # kept: the request dies with its client
    start = time.monotonic()
    client.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(120)
    wait_online(bootstrap, topic, PARTITIONS, 3)
    return time.monotonic() - start


def free_port_block(n: int) -> int:
    """A port p with p..p+n-1 free (best effort)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        ok = True
        for port in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise SystemExit("no block of free ports")


def embedded(tmp: Path) -> tuple[float, float]:
    """(--brokers 3 ready s, 1,000 x RF 3 online s)."""
    port = free_port_block(3)
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moldau", "serve", "--brokers", "3", "--host", "127.0.0.1",
         "--port", str(port), "--data-dir", str(tmp / "embedded"), "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        pending = {port, port + 1, port + 2}
        while pending and time.monotonic() - start < 30:
            for p in sorted(pending):
                try:
                    socket.create_connection(("127.0.0.1", p), timeout=0.1).close()
                    pending.discard(p)
                except OSError:
                    pass
            time.sleep(0.002)
        ready = time.monotonic() - start
        online = create_online(f"127.0.0.1:{port}", "many")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    return ready, online


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = admin(bootstrap).list_topics(topic, timeout=10).topics[topic]
    return {p: m.leader for p, m in md.partitions.items()}


def on_zookeeper(tmp: Path) -> tuple[float, float, float, int]:
    """(1,000 x RF 3 online s, controlled shutdown exit s, leaders moved s, led)."""
    with Cluster(tmp / "zk", brokers=3) as cluster:
        online = create_online(cluster.bootstrap, "many")
        led = leaders(cluster.bootstrap, "many")
        victim = max({1, 2, 3} - {cluster.controller_id() or 0})
        count = sum(1 for b in led.values() if b == victim)
        survivor = cluster.brokers[1 if victim != 1 else 2].bootstrap
        b = cluster.brokers[victim]
        assert b.proc is not None
        start = time.monotonic()
        b.proc.send_signal(signal.SIGTERM)
        b.proc.wait(120)
        exited = time.monotonic() - start
        while any(v == victim or v < 0 for v in leaders(survivor, "many").values()):
            time.sleep(0.02)
        moved = time.monotonic() - start
    return online, exited, moved, count


def reassign(bootstrap: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "moldau", "reassign-partitions", "--bootstrap-server", bootstrap,
         *args], capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return out.stdout


def move(tmp: Path) -> tuple[float, float]:
    """MB/s of a 200 MB partition moved to another broker: unthrottled, throttled."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    rates = []
    with Cluster(tmp / "move", brokers=3) as cluster:
        boot = cluster.bootstrap
        for i, throttle in enumerate([None, THROTTLE]):
            topic = f"move{i}"
            client = admin(boot)
            new = NewTopic(topic, num_partitions=1, replica_assignment=[[1]])
            client.create_topics([new])[topic].result(30)
            producer = Producer({"bootstrap.servers": boot, "linger.ms": 50, "acks": 1,
                                 "batch.size": 1_000_000})  # fmt: skip
            value = b"x" * 1000
            for _ in range(MOVE_MB * 1000):
                while True:
                    try:
                        producer.produce(topic, value, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.flush(120)
            plan = tmp / f"{topic}.json"
            plan.write_text(json.dumps({"version": 1, "partitions": [
                {"topic": topic, "partition": 0, "replicas": [2]}]}))  # fmt: skip
            args = ["--execute", "--reassignment-json-file", str(plan)]
            if throttle is not None:
                args += ["--throttle", str(throttle)]
            start = time.monotonic()
            reassign(boot, *args)
            while "is completed" not in reassign(boot, "--verify", "--reassignment-json-file",
                                                 str(plan)):  # fmt: skip
                time.sleep(0.2)
            rates.append(MOVE_MB / (time.monotonic() - start))
    return rates[0], rates[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ready, embedded_online = embedded(tmp)
        print(f"embedded: ready {ready:.2f} s, online {embedded_online:.2f} s", flush=True)
        zk_online, exited, moved, led = on_zookeeper(tmp)
        print(f"zookeeper: online {zk_online:.2f} s, exited {exited:.2f} s", flush=True)
        fast, slow = move(tmp)
    lines = [
        f"## {datetime.date.today().isoformat()}: running a cluster (3 brokers)",
        "",
        f"Machine: {machine()}.",
        "",
        "| figure | measured | aim |",
        "|---|---|---|",
        f"| `moldau serve --brokers 3`: process start to 3 ports accepting | {ready:.2f} s "
        "| <= 1.5 s |",
        f"| {PARTITIONS:,} partitions x RF 3, CreateTopics to all online with a full ISR, "
        f"`--brokers 3` | {embedded_online:.2f} s | < 2 s |",
        f"| the same on 3 broker processes on ZooKeeper | {zk_online:.2f} s | < 2 s |",
        f"| SIGTERM (controlled shutdown) of a broker leading {led} of them: exited "
        f"| {exited:.2f} s | < 5 s |",
        f"| ... and every partition led by another broker | {moved:.2f} s | |",
        f"| reassignment of a {MOVE_MB} MB partition to another broker, no throttle "
        f"| {fast:.1f} MB/s | |",
        f"| the same with --throttle {THROTTLE:,} B/s | {slow:.1f} MB/s "
        f"| {THROTTLE / 1e6:.0f} MB/s |",
    ]
    publish("\n".join(lines) + "\n", args.record)


if __name__ == "__main__":
    main()
