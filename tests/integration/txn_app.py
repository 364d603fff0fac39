"""A consume-transform-produce application, as tests run it in a process of its own:
reads a topic in a consumer group (read_committed), writes `out-<value>` of each
record to the same partition of another topic, and commits each batch's output and
its input offsets in one transaction.

    python -m tests.integration.txn_app BOOTSTRAP SOURCE SINK GROUP TXN_ID [--die-after N]

With --die-after N it kills itself (SIGKILL) inside its N+1th transaction, after
producing and sending the offsets and before committing; without, it runs until its
positions reach the end of the source, and exits 0."""

from __future__ import annotations

import argparse
import os
import signal
import time

from confluent_kafka import Consumer, Producer, TopicPartition


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "source", "sink", "group", "txn_id"):
        parser.add_argument(name)
    parser.add_argument("--die-after", type=int)
    args = parser.parse_args()
    c = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # A run killed with SIGKILL leaves its member in the group until its session
            # times out; the next run's first rebalance waits for that.
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 500,
        }
    )
    c.subscribe([args.source])
    p = Producer(
        {"bootstrap.servers": args.bootstrap, "transactional.id": args.txn_id, "linger.ms": 5}
    )
    p.init_transactions(30)
    parts = [TopicPartition(args.source, i) for i in range(2)]
    ends = [c.get_watermark_offsets(tp, timeout=10)[1] for tp in parts]
    committed = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        msgs = [m for m in c.consume(20, 0.5) if m.error() is None]
        if msgs:
            p.begin_transaction()
            for m in msgs:
                p.produce(args.sink, b"out-" + m.value(), partition=m.partition())
            p.send_offsets_to_transaction(
                c.position(c.assignment()), c.consumer_group_metadata(), 30
            )
            if args.die_after is not None and committed == args.die_after:
                p.flush(10)
                os.kill(os.getpid(), signal.SIGKILL)
            p.commit_transaction(30)
            committed += 1
        done = c.committed(parts, timeout=10)
        if [tp.offset for tp in done] == ends:
            c.close()
            return
    raise SystemExit("the source was not consumed to its end within 90 s")


if __name__ == "__main__":
    main()
