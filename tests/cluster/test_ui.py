"""`moldau ui` against a Moldau cluster on ZooKeeper: it reads the brokers and the
controller through the Kafka protocol alone, and shows a killed broker offline."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from moldau.testing.browser import ConsoleProcess
from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=20) as response:
        return json.loads(response.read())


def test_the_console_shows_the_brokers_the_controller_and_a_killed_broker_offline(
    make_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    cluster = make_cluster(2)
    controller = cluster.wait_for_controller()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("watched", 2, 2)])["watched"].result(30)
    with ConsoleProcess(cluster.bootstrap, tmp_path / "ui.log") as console:
        url = console.url + "api/cluster"

        def brokers() -> list[tuple[int, int, bool]]:
            return [(b["id"], b["port"], b["online"]) for b in get(url)["brokers"]]

        ports = {i: b.port for i, b in cluster.brokers.items()}
        assert wait_for(
            lambda: brokers() == [(1, ports[1], True), (2, ports[2], True)], timeout=20
        ), brokers()
        assert wait_for(lambda: get(url)["partitions"] == 2, timeout=20)
        shown = get(url)
        assert (shown["controller"], shown["underReplicated"], shown["error"]) == (
            controller,
            0,
            None,
        )
        victim = 2 if controller == 1 else 1  # the controller stays: it says so
        killed = time.monotonic()
        cluster.kill(victim)
        survivor = 3 - victim
        assert wait_for(
            lambda: brokers() == sorted([(survivor, ports[survivor], True),
                                         (victim, ports[victim], False)]),
            timeout=15,
        ), brokers()  # fmt: skip
        noticed_s = time.monotonic() - killed
        # Its replicas leave the ISR: every partition is under-replicated.
        assert wait_for(lambda: get(url)["underReplicated"] == 2, timeout=15)
        assert get(url)["controller"] == controller
        assert noticed_s < 10
        # Killed on leaving: a clean stop waits out the group sampler's request to
        # the dead broker (tests/ui checks the clean stop).
