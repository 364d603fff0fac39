"""A consumer group member as a process of its own, so a test can kill it with a
real signal. Prints `assigned p1,p2,...` on every assignment."""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer


def main() -> None:
    bootstrap, group, topic, session_ms = sys.argv[1:5]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "session.timeout.ms": int(session_ms),
            "heartbeat.interval.ms": 300,
        }
    )

    def assigned(_: object, partitions: list[object]) -> None:
        print("assigned " + ",".join(str(p.partition) for p in partitions), flush=True)  # type: ignore[attr-defined]

    consumer.subscribe([topic], on_assign=assigned)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        consumer.poll(0.2)


if __name__ == "__main__":
    main()
