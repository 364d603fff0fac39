"""Thousands of partitions on one broker: creating them costs work in proportion
to their number (the metadata store appends to its journal), not to its square,
and a restart brings them all back. Work is counted in the bytes the broker process
writes (/proc/<pid>/io), not in seconds (speed is bench/'s business)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.testing.process import BrokerProcess, wait_for

pytestmark = pytest.mark.integration


def written(pid: int) -> int:
    """Bytes the process has written through write calls so far."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/<pid>/io")


def online(admin: AdminClient, topic: str, partitions: int) -> bool:
    md = admin.list_topics(topic, timeout=20).topics.get(topic)
    return (
        md is not None
        and len(md.partitions) == partitions
        and all(p.leader >= 0 for p in md.partitions.values())
    )


def test_creating_partitions_costs_the_store_linear_work(fresh_broker: BrokerProcess) -> None:
    broker = fresh_broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    sizes = []
    for topic, n in (("small", 200), ("large", 2000)):
        before = written(broker.pid)
        admin.create_topics([NewTopic(topic, n, 1)])[topic].result(60)
        assert wait_for(lambda: online(admin, topic, n), 60)  # noqa: B023
        sizes.append(written(broker.pid) - before)
    # Ten times the partitions: about ten times the bytes (the store rewriting its
    # whole tree on each write, as it once did, made it about a hundred).
    assert sizes[1] < 20 * sizes[0], sizes

    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert wait_for(lambda: online(admin, "large", 2000) and online(admin, "small", 200), 60)
