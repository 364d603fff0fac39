"""The reassignments page against three brokers (LocalCluster, in this process) and
`moldau ui` as a process: a throttled move shows a progress bar a partition and
disappears once done; one cancelled in the page goes back where it was. And, as
these brokers have no authorizer, the security page's note that says so."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from playwright.sync_api import expect

from moldau.testing.browser import ConsoleProcess
from moldau.testing.local import LocalCluster
from moldau.testing.process import wait_for

pytestmark = pytest.mark.ui

TOPIC = "moving"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # Small replica fetches: a throttled follower gets its bytes a little at a time.
    small = {"replica.fetch.max.bytes": "32768", "replica.fetch.response.max.bytes": "65536"}
    with LocalCluster(tmp_path_factory.mktemp("ui-reassign"), brokers=3, overrides=small) as c:
        yield c


@pytest.fixture(scope="module")
def console(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`moldau ui` on the three brokers (the conftest's `page` opens it)."""
    log = tmp_path_factory.mktemp("ui-console") / "console.log"
    with ConsoleProcess(cluster.bootstrap, log) as c:
        yield c.url


def replicas(bootstrap: str) -> dict[int, list[int]]:
    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(
        TOPIC, timeout=10
    )
    return {p: list(pm.replicas) for p, pm in md.topics[TOPIC].partitions.items()}


def test_no_reassignment_and_no_authorizer_are_said_plainly(page: Any) -> None:
    page.goto("/#/reassignments")
    expect(page.locator("#no-reassignments")).to_be_visible()
    page.goto("/#/security")
    expect(page.locator("#acl-note")).to_contain_text("This cluster has no authorizer")
    expect(page.locator("#acl-add")).to_be_hidden()
    expect(page.locator("main")).to_contain_text("No SCRAM users.")


def test_a_throttled_move_shows_its_progress_and_one_is_cancelled(
    page: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(TOPIC, num_partitions=2, replica_assignment=[[1], [1]])])[
        TOPIC
    ].result(10)
    # Quiet: it outlives the test and would log the brokers going away.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "log_level": 0})
    for i in range(6_000):
        producer.produce(TOPIC, b"x" * 1000, partition=i % 2)
    assert producer.flush(10) == 0
    # 3 MB a partition at 10 kB/s: held back (after the few hundred kB the quota's
    # first window lets through) until the throttle is lifted.
    reassign(cluster, tmp_path, (0, 1), "--throttle", "10000")

    page.goto("/#/reassignments")
    moving, cancelled = (page.locator(f"#reassignments tr:has([data-partition='{TOPIC}-{p}'])")
                         for p in (0, 1))  # fmt: skip
    expect(cancelled.locator("[role=progressbar]")).to_be_visible()
    expect(moving).to_contain_text("2, 1")  # replicas: the new one, then the leaving one
    for row in (moving, cancelled):
        assert (
            0 <= int(row.locator("[role=progressbar]").get_attribute("aria-valuenow") or "") < 100
        )
    cancelled.get_by_role("button", name="Cancel").click()
    expect(page.locator("#reassignment-status")).to_have_text(
        f"Cancelled the reassignment of {TOPIC}-1."
    )
    expect(cancelled).to_have_count(0)
    reassign(cluster, tmp_path, (0,), "--additional", "--throttle", "1000000000")
    expect(page.locator("#no-reassignments")).to_be_visible(timeout=30_000)
    assert wait_for(lambda: replicas(cluster.bootstrap) == {0: [2], 1: [1]}, timeout=10)


def reassign(
    cluster: LocalCluster, tmp_path: Path, partitions: tuple[int, ...], *flags: str
) -> None:
    """`moldau reassign-partitions --execute`: `partitions` of TOPIC to broker 2. A
    process: Playwright's sync API keeps an event loop running in this thread."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": p, "replicas": [2]} for p in partitions
    ]}))  # fmt: skip
    started = subprocess.run(
        [sys.executable, "-m", "moldau", "reassign-partitions", "--bootstrap-server",
         cluster.bootstrap, "--execute", "--reassignment-json-file", str(plan), *flags],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
