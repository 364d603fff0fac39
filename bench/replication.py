"""Replication cost: three Moldau broker processes on one ZooKeeper (all on this
machine), topics with replication factor 1 and 3, produced to with acks=1 and
acks=all, side by side in one run; then how long partitions led by a killed broker
take to accept acks=all writes again.

    .venv/bin/python bench/replication.py            # prints a markdown table
    .venv/bin/python bench/replication.py --quick

Each phase starts once the brokers are idle (followers have copied what the phase
before left) and the page cache is written back (`sync`). Throughput: two
confluent-kafka producer processes, each on its own partition of a 3-partition
topic (leaders spread over the brokers). Latency: the same two producers at a
steady rate, half of what the RF 3 acks=all run reached, p50/p99 from produce() to
the delivery report (some 2,000 records a second timed).
The brokers, ZooKeeper and the clients share the machine's cores: read the ratios,
not the absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from moldau.testing.cluster import Cluster
from throughput import Phase, latency_worker, machine, produce_worker

PRODUCERS = 2


def create(bootstrap: str, topic: str, rf: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2"} if rf == 3 else {}
    admin.create_topics([NewTopic(topic, 3, rf, config=config)])[topic].result(30)
    wait_in_sync(bootstrap, topic, rf)


def wait_in_sync(bootstrap: str, topic: str, rf: int) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        if all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise SystemExit(f"{topic}: not all replicas in sync")


def settle(cluster: Cluster, timeout: float = 180) -> None:
    """Wait until the brokers are idle and the disk has what earlier phases wrote:
    followers still copying what an acks=1 phase left behind, or the kernel writing
    back gigabytes of dirty pages, would otherwise slow the next phase down."""
    ticks = os.sysconf("SC_CLK_TCK")
    os.sync()

    def cpu_seconds() -> float:
        total = 0
        for b in cluster.brokers.values():
            fields = Path(f"/proc/{b.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / ticks

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_seconds()
        time.sleep(1)
        if cpu_seconds() - before < 0.15:
            return
    raise SystemExit("the brokers did not settle")


def run_producers(
    target: Callable[..., None],
    args_for: Callable[[int, Any], tuple[Any, ...]],
    size: int,
    wait_s: float,
) -> Phase:
    """PRODUCERS processes running target(*args_for(w, queue)); their results as one
    phase."""  # fmt: skip
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=target, args=args_for(w, queue)) for w in range(PRODUCERS)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=wait_s) for _ in procs]
    for proc in procs:
        proc.join(30)
    phase = Phase()
    phase.records = sum(r[0] for r in results)
    phase.bytes = phase.records * size
    phase.seconds = max(r[1] for r in results)
    for r in results:
        phase.latencies_ms += r[2]
    if sum(r[3] for r in results):
        raise SystemExit("records not delivered")
    return phase


def produce(bootstrap: str, topic: str, n: int, size: int, acks: str) -> Phase:
    return run_producers(
        produce_worker, lambda w, q: (bootstrap, topic, w, n, size, q, acks), size, 600
    )


def latency(bootstrap: str, topic: str, size: int, rate: int, acks: str, seconds: float) -> Phase:
    """PRODUCERS paced producers, one partition each, at `rate` records/s in all."""
    each = max(rate // PRODUCERS, 1)
    sample_every = max(each // 2000, 1)  # some 2,000 timed records a second
    return run_producers(
        latency_worker,
        lambda w, q: (bootstrap, topic, size, each, seconds, q, acks, w, sample_every),
        size,
        seconds + 60,
    )


def failover_seconds(cluster: Cluster, topic: str) -> tuple[float, float]:
    """Kill -9 the leader of partition 0, twice: seconds until a surviving broker
    accepts an acks=all write to it again (asked on the wire every 5 ms: the
    brokers' part), and until a new confluent-kafka producer with librdkafka's
    defaults has one acknowledged (which adds the client's metadata timers)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def kill_leader() -> tuple[int, float]:
        wait_in_sync(cluster.bootstrap, topic, 3)
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        cluster.kill(leader)
        return leader, time.monotonic()

    leader, begin = kill_leader()
    endpoints = {i: ("127.0.0.1", b.port) for i, b in cluster.brokers.items() if i != leader}
    accepted = asyncio.run(_first_acks_all_write(endpoints, topic)) - begin
    cluster.restart(leader)

    leader, begin = kill_leader()
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
         "message.timeout.ms": 60_000}
    )  # fmt: skip
    acked: list[float] = []
    while not acked and time.monotonic() - begin < 60:
        producer.produce(
            topic, b"x", partition=0,
            on_delivery=lambda err, _m: err is None and acked.append(time.monotonic()),
        )  # fmt: skip
        producer.flush(60)
    cluster.restart(leader)
    return accepted, acked[0] - begin if acked else float("nan")


async def _first_acks_all_write(endpoints: dict[int, tuple[str, int]], topic: str) -> float:
    """When one of the brokers first acknowledges an acks=all Produce to partition 0."""
    from moldau.protocol.apis import ApiKey
    from moldau.protocol.codec import build_entity, decode_response, encode_body, request_class
    from moldau.protocol.records import build_batch
    from moldau.server.control_client import NetworkTransport

    cls = request_class(ApiKey.PRODUCE, 9)
    assert cls is not None
    batch = build_batch([(None, b"x")])
    body = encode_body(
        build_entity(cls, {
            "acks": -1, "timeout": datetime.timedelta(seconds=2), "transactional_id": None,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        })
    )  # fmt: skip
    transport = NetworkTransport(-1, endpoints.get, 5000)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            for broker_id in endpoints:
                raw = await transport.request(broker_id, ApiKey.PRODUCE, 9, body)
                response: Any = decode_response(ApiKey.PRODUCE, 9, raw)
                if response.responses[0].partition_responses[0].error_code == 0:
                    return time.monotonic()
            await asyncio.sleep(0.005)
    finally:
        await transport.close()
    return float("nan")


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
                        settle(cluster)
                        results[(rf, acks)] = produce(cluster.bootstrap, topic, n, size, acks)
                peak = results[(3, "all")].rate
                settle(cluster)
                steady = latency(
                    cluster.bootstrap, f"bench-{size}-rf3-acksall", size,
                    max(int(peak / 2), 100), "all", 5 if args.quick else 10,
                )  # fmt: skip
                rows.append((size, results, steady))
            settle(cluster)
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
    accepted, acked = failover
    print(
        f"\nFailover (zookeeper.session.timeout.ms={session_ms}): a surviving broker accepts "
        f"acks=all writes to a killed leader's partition {accepted:.2f} s after the kill; "
        f"a new librdkafka producer has one acknowledged after {acked:.2f} s."
    )


if __name__ == "__main__":
    sys.exit(main())
