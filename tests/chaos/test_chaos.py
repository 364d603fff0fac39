"""A randomised fault test: three brokers on ZooKeeper, a plain and a compacted
topic (replication factor 3, min.insync.replicas 2) and a topic deleted and created
again, idempotent acks=all writers, raw-Fetch readers, a consumer group committing
offsets, and a nemesis that picks kill -9 (the broker started again at once, or
after a while), kill -9 of the group coordinator right after a commit, SIGSTOP, a
network cut, a clean restart, a leader election and a topic re-creation at random.
After each fault every partition has a leader again within a bound and every
acknowledged commit reads back; at the end the checker asserts: every acknowledged
record is read once at its offset; no reader ever received a record at or above the
high watermark it was given, nor a record that is not there at the end; the latest
acknowledged value of every compacted key survives; every partition is led and in
sync.

It is seeded: a failing run prints its seed. CI runs a short form with a new seed
each time; by hand, longer and with a chosen seed:

    MOLDAU_CHAOS_SECONDS=600 MOLDAU_CHAOS_SEED=1234 .venv/bin/pytest tests/chaos -s
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient

from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from tests.chaos.workload import (
    COMPACTED,
    PLAIN,
    RECREATED,
    TOPICS,
    Committer,
    Nemesis,
    Reader,
    Writer,
    check,
    create_topic,
    partition_states,
    read_to_end,
)

MakeCluster = Callable[..., Cluster]
SECONDS = float(os.environ.get("MOLDAU_CHAOS_SECONDS", "40"))
FAULTS = ("kill", "kill_coordinator", "pause", "isolate", "restart", "elect", "recreate")
# After a fault is undone, every partition has a leader again within this.
LEADER_BOUND_S = 20


# Each fault takes its own while, and the checks after it up to LEADER_BOUND_S more.
@pytest.mark.timeout(int(SECONDS * 3 + 300))
def test_acknowledged_records_survive_random_faults(make_cluster: MakeCluster) -> None:
    seed = int(os.environ.get("MOLDAU_CHAOS_SEED") or random.randrange(1 << 32))
    seconds = SECONDS
    print(f"chaos seed {seed}, {seconds:.0f} s (MOLDAU_CHAOS_SEED={seed} to repeat)")
    cluster = make_cluster(
        3,
        **{
            "zookeeper.session.timeout.ms": "4000",
            "replica.lag.time.max.ms": "3000",
            "log.cleaner.backoff.ms": "200",
            "controlled.shutdown.max.retries": "2",
            # Writers must not bring a deleted topic back as a default one.
            "auto.create.topics.enable": "false",
        },
    )
    faults = (
        FAULTS
        if cluster.isolation_unavailable is None
        else tuple(f for f in FAULTS if f != "isolate")
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for topic in TOPICS:
        create_topic(admin, topic)
    writers = {
        PLAIN: Writer(cluster.bootstrap, PLAIN, idempotent=True).start(),
        COMPACTED: Writer(cluster.bootstrap, COMPACTED, idempotent=True).start(),
        RECREATED: Writer(cluster.bootstrap, RECREATED, idempotent=False).start(),
    }
    reader = Reader(cluster, [PLAIN, COMPACTED]).start()
    recreated_reader = Reader(cluster, [RECREATED], restartable=True).start()
    committer = Committer(cluster.bootstrap).start()
    nemesis = Nemesis(cluster, seed, writers[RECREATED].next_generation, committer, faults)
    try:
        nemesis.run(seconds, LEADER_BOUND_S)
    finally:
        nemesis.heal_all()
        for w in writers.values():
            w.stop()
        reader.stop()
        recreated_reader.stop()
        committer.stop()
    problems = nemesis.problems + committer.check("at the end")

    # Every partition has a leader again, and all three replicas in sync.
    def settled() -> bool:
        states = partition_states(cluster.bootstrap)
        return len(states) == sum(TOPICS.values()) and all(
            leader >= 0 and isr == replicas == [1, 2, 3]
            for leader, replicas, isr in states.values()
        )

    if not wait_for(settled, 60, interval=0.5):
        states = partition_states(cluster.bootstrap)
        problems.append(f"not every partition led and in sync: {states}")
    else:
        final = Reader(cluster, list(TOPICS))
        final.refresh_leaders()
        for tp in final.next_offset:
            read_to_end(final, tp)
        final.stop()
        during = reader.reads
        during.violations += recreated_reader.reads.violations
        recreated = writers[RECREATED]
        problems += check(
            writers[PLAIN].acked[0], writers[COMPACTED].acked[0],
            recreated.acked[recreated.generation], during, final.reads,
        )  # fmt: skip
    acked = sum(len(w.acked[w.generation].records) for w in writers.values())
    print(
        f"chaos seed {seed}: {len(nemesis.history)} faults, {acked} records acknowledged,"
        f" {len(reader.reads.records)} read during the faults in {reader.reads.fetches} fetches"
    )
    if problems:
        history = "\n".join(f"  {f}" for f in nemesis.history)
        shown = "\n".join(problems[:30])
        raise AssertionError(
            f"chaos seed {seed} (repeat with MOLDAU_CHAOS_SEED={seed}): {len(problems)} problems"
            f"\n{shown}\nfaults:\n{history}"
        )
