"""Replication cost: three Moldau broker processes on one ZooKeeper (all on this
machine), topics with replication factor 1 and 3, produced to with acks=1 and
acks=all, side by side in one run; then how long partitions led by a killed broker
take to accept acks=all writes again.

    .venv/bin/python bench/replication.py            # prints a markdown table
    .venv/bin/python bench/replication.py --quick

Throughput: two confluent-kafka producer processes, each on its own partition of a
3-partition topic (leaders spread over the brokers). Latency: one producer at a
steady rate, half of what the RF 3 acks=all run reached (at most 10,000 rec/s),
p50/p99 from produce() to the delivery report. The brokers, ZooKeeper and the
clients share the machine's cores: read the ratios, not the absolute figures.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

from moldau.testing.cluster import Cluster
from throughput import Phase, latency_worker, machine, produce_worker

PRODUCERS = 2
# One Python producer with a callback per record paces the steady phase; above this
# it would measure itself.
STEADY_MAX_RATE = 10_000


def create(bootstrap: str, topic: str, rf: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2"} if rf == 3 else {}
    admin.create_topics([NewTopic(topic, 3, rf, config=config)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        if all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise SystemExit(f"{topic}: not all replicas in sync")


def produce(bootstrap: str, topic: str, n: int, size: int, acks: str) -> Phase:
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [
        ctx.Process(target=produce_worker, args=(bootstrap, topic, w, n, size, queue, acks))
        for w in range(PRODUCERS)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(30)
    phase = Phase()
    phase.records = sum(r[0] for r in results)
    phase.bytes = phase.records * size
    phase.seconds = max(r[1] for r in results)
    for r in results:
        phase.latencies_ms += r[2]
    if sum(r[3] for r in results):
        raise SystemExit(f"{topic}: records not delivered")
    return phase


def latency(bootstrap: str, topic: str, size: int, rate: int, acks: str, seconds: float) -> Phase:
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    proc = ctx.Process(
        target=latency_worker, args=(bootstrap, topic, size, rate, seconds, queue, acks)
    )
    proc.start()
    sent, elapsed, latencies, _ = queue.get(timeout=seconds + 60)
    proc.join(30)
    return Phase(records=sent, bytes=sent * size, seconds=elapsed, latencies_ms=latencies)


def failover_seconds(cluster: Cluster, topic: str) -> float:
    """Kill -9 the leader of partition 0; seconds until an acks=all write to it is
    acknowledged again."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    cluster.kill(leader)
    begin = time.monotonic()
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
         "retry.backoff.ms": 20, "message.timeout.ms": 60_000}
    )  # fmt: skip
    acked: list[float] = []
    while not acked and time.monotonic() - begin < 60:
        producer.produce(
            topic, b"x", partition=0,
            on_delivery=lambda err, _m: err is None and acked.append(time.monotonic()),
        )  # fmt: skip
        producer.flush(60)
    cluster.restart(leader)
    return acked[0] - begin if acked else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = {100: 100_000, 1024: 40_000} if args.quick else {100: 400_000, 1024: 150_000}
    session_ms = 2000
    rows = []
    with tempfile.TemporaryDirectory() as d:
        overrides = {"zookeeper.session.timeout.ms": str(session_ms)}
        with Cluster(Path(d), brokers=3, overrides=overrides) as cluster:
            for size, n in sizes.items():
                results = {}
                for rf in (1, 3):
                    for acks in ("1", "all"):
                        topic = f"bench-{size}-rf{rf}-acks{acks}"
                        create(cluster.bootstrap, topic, rf)
                        results[(rf, acks)] = produce(cluster.bootstrap, topic, n, size, acks)
                peak = results[(3, "all")].rate
                steady = latency(
                    cluster.bootstrap, f"bench-{size}-rf3-acksall", size,
                    max(min(int(peak / 2), STEADY_MAX_RATE), 100), "all", 5 if args.quick else 10,
                )  # fmt: skip
                rows.append((size, results, steady))
            failover = failover_seconds(cluster, "bench-100-rf3-acksall")
    print(f"Machine: {machine()}; 3 brokers, ZooKeeper and the clients share it.\n")
    print("| record | RF | acks | rec/s | MB/s | vs RF 1 acks=1 | p50 / p99 ms at full load |")
    print("|---|---|---|---|---|---|---|")
    for size, results, _ in rows:
        base = results[(1, "1")].rate
        for (rf, acks), ph in results.items():
            print(
                f"| {size} B | {rf} | {acks} | {ph.rate:,.0f} | {ph.mb_s:,.1f} | "
                f"{ph.rate / base:.2f}x | {ph.percentile(0.5):.1f} / {ph.percentile(0.99):.1f} |"
            )
    print("\n| record | RF 3 acks=all at | p50 ms | p99 ms |")
    print("|---|---|---|---|")
    for size, _, steady in rows:
        print(
            f"| {size} B | {steady.rate:,.0f} rec/s | {steady.percentile(0.5):.2f} | "
            f"{steady.percentile(0.99):.2f} |"
        )
    print(
        f"\nFailover: acks=all writes to a killed leader's partition acknowledged again "
        f"after {failover:.2f} s (zookeeper.session.timeout.ms={session_ms})."
    )


if __name__ == "__main__":
    sys.exit(main())
