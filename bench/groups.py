"""Consumer group benchmarks: rebalance time and offset commit latency.

- Rebalance: 4 confluent-kafka consumer processes subscribe to a 12-partition topic
  at once; measured from their start to the moment every member has consumed from
  its partitions, and again when a 5th member joins the stable group (the others
  learn of it through their next heartbeat). Run with the broker's
  group.initial.rebalance.delay.ms at Kafka's default (3000 ms) and at 0.
- Commits: one consumer commits synchronously, one partition at a time; latency of
  each commit (p50/p99) and commits per second.

    .venv/bin/python bench/groups.py [--record]
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from throughput import create_topic, machine, publish, started, warm_memory

PARTITIONS = 12
MEMBERS = 4
HEARTBEAT_MS = 3000  # librdkafka's default heartbeat.interval.ms
COMMITS = 2000


def member(
    bootstrap: str, group: str, topic: str, name: int, out: mp.Queue, stop: mp.Event
) -> None:  # type: ignore[type-arg]
    """Reports (wall time, member, partitions assigned) once it has consumed from
    every partition of its current assignment."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "latest",
            "heartbeat.interval.ms": HEARTBEAT_MS,
        }
    )
    assigned: set[int] = set()
    consumed: set[int] = set()
    reported = [False]

    def on_assign(_: object, partitions: list[object]) -> None:
        assigned.clear()
        assigned.update(p.partition for p in partitions)  # type: ignore[attr-defined]
        consumed.clear()
        reported[0] = False

    c.subscribe([topic], on_assign=on_assign)
    deadline = time.monotonic() + 120
    while not stop.is_set() and time.monotonic() < deadline:
        m = c.poll(0.01)
        if m is not None and m.error() is None:
            consumed.add(m.partition())
        if assigned and consumed >= assigned and not reported[0]:
            out.put((time.time(), name, len(assigned)))
            reported[0] = True
    c.close()


def feed(bootstrap: str, topic: str, stop: threading.Event) -> None:
    """A record to every partition every 20 ms, so members always have something to read."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    while not stop.is_set():
        for part in range(PARTITIONS):
            p.produce(topic, b"x", partition=part)
        p.poll(0)
        time.sleep(0.02)
    p.flush(10)


def rebalance_times(bootstrap: str, topic: str) -> tuple[float, float]:
    """(seconds from start until 4 new members all consume, seconds from a 5th
    member's start until all 5 consume)."""
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    stop = ctx.Event()
    feeding = threading.Event()
    feeder = threading.Thread(target=feed, args=(bootstrap, topic, feeding))
    feeder.start()
    group = f"bench-{time.time_ns()}"
    try:
        start = time.time()
        procs = [
            ctx.Process(target=member, args=(bootstrap, group, topic, i, out, stop))
            for i in range(MEMBERS)
        ]
        for p in procs:
            p.start()
        first = _settled(out, MEMBERS, start) - start
        joined = time.time()
        fifth = ctx.Process(target=member, args=(bootstrap, group, topic, MEMBERS, out, stop))
        fifth.start()
        second = _settled(out, MEMBERS + 1, joined) - joined
        stop.set()
        for p in [*procs, fifth]:
            p.join(30)
    finally:
        feeding.set()
        feeder.join(30)
    return first, second


def _settled(out: mp.Queue, members: int, since: float) -> float:  # type: ignore[type-arg]
    """Wall time when `members` members, each reporting after `since`, cover all
    partitions."""
    latest: dict[int, tuple[float, int]] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        when, name, n = out.get(timeout=120)
        if when < since:
            continue
        latest[name] = (when, n)
        if len(latest) == members and sum(n for _, n in latest.values()) == PARTITIONS:
            return max(w for w, _ in latest.values())
    raise SystemExit("the group did not settle")


def commit_latencies(bootstrap: str, topic: str) -> list[float]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"commit-{time.time_ns()}",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)  # coordinator lookup
    out = []
    for i in range(COMMITS):
        t = time.perf_counter()
        c.commit(offsets=[TopicPartition(topic, i % PARTITIONS, i)], asynchronous=False)
        out.append((time.perf_counter() - t) * 1000)
    c.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--warm-memory", type=int, default=2, metavar="GIB")
    args = parser.parse_args()
    warm_memory(args.warm_memory)
    rows = []
    commits: list[float] = []
    for delay in (3000, 0):
        workdir = Path(tempfile.mkdtemp(prefix="bench-groups-"))
        try:
            with started(
                "moldau", workdir, {"group.initial.rebalance.delay.ms": str(delay)}
            ) as broker:
                topic = f"groups-{time.time_ns()}"
                create_topic(broker.bootstrap, topic, PARTITIONS)
                first, second = rebalance_times(broker.bootstrap, topic)
                rows.append((delay, first, second))
                if delay == 0:
                    commits = commit_latencies(broker.bootstrap, topic)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    commits.sort()
    p50 = commits[len(commits) // 2]
    p99 = commits[int(len(commits) * 0.99)]
    rate = 1000 / statistics.mean(commits)
    lines = [
        f"## {datetime.date.today().isoformat()}: consumer groups "
        f"({MEMBERS} members, {PARTITIONS} partitions)",
        "",
        f"Machine: {machine()}.",
        "",
        "| group.initial.rebalance.delay.ms | 4 members start: all consuming after | "
        "5th member joins: all consuming after |",
        "|---|---|---|",
    ]
    for delay, first, second in rows:
        lines.append(f"| {delay} | {first * 1000:,.0f} ms | {second * 1000:,.0f} ms |")
    lines += [
        "",
        f"The clients' own minimum: a new group waits group.initial.rebalance.delay.ms; a stable "
        f"group learns of a new member at its next heartbeat (heartbeat.interval.ms = "
        f"{HEARTBEAT_MS} ms), so a join costs up to that much before members rejoin.",
        "",
        f"Offset commits (synchronous, one partition each, {COMMITS} of them): "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, {rate:,.0f} commits/s.",
    ]
    publish("\n".join(lines) + "\n", args.record)


if __name__ == "__main__":
    main()
