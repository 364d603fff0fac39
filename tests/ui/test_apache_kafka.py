"""`moldau ui` against Apache Kafka 4.1's own broker: the console reads it through
the Kafka protocol alone, so its cluster, topics and messages answer there too."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from moldau.testing.apache_kafka import KafkaBroker
from moldau.testing.browser import ConsoleProcess
from moldau.testing.process import wait_for

pytestmark = [pytest.mark.ui, pytest.mark.java]


def call(url: str, method: str = "GET", body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{method} {url}: {e.code} {e.read().decode()}") from None


@pytest.fixture
def kafka(tmp_path: Path, kafka_java: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker.kraft(tmp_path / "kafka") as broker:
        yield broker


def test_the_console_answers_for_apache_kafka(kafka: KafkaBroker, tmp_path: Path) -> None:
    with ConsoleProcess(kafka.bootstrap, tmp_path / "ui.log") as console:
        api = console.url + "api/"
        assert wait_for(lambda: call(api + "cluster")["brokers"], timeout=20)
        cluster = call(api + "cluster")
        assert cluster["error"] is None
        assert [(b["id"], b["port"], b["online"]) for b in cluster["brokers"]] == [
            (1, kafka.port, True)
        ]
        assert call(api + "topics", "POST", {"name": "ui-on-kafka", "partitions": 2}) == {
            "name": "ui-on-kafka"
        }
        assert wait_for(
            lambda: any(t["name"] == "ui-on-kafka" for t in call(api + "topics")), timeout=20
        )
        written = call(api + "topics/ui-on-kafka/messages", "POST", {"value": "v", "partition": 1})
        assert written == {"partition": 1, "offset": 0}
        topic = call(api + "topics/ui-on-kafka")
        p1 = topic["partitions"][1]
        assert (p1["leader"], p1["highWatermark"], p1["lastStable"]) == (1, 1, 1)
        assert p1["size"] > 0
        assert any(c["name"] == "retention.ms" for c in topic["configs"])
        records = call(api + "topics/ui-on-kafka/messages?from=beginning")["records"]
        assert [(r["partition"], r["offset"], r["value"]) for r in records] == [(1, 0, "dg==")]
        groups_reassignments_and_security(api)
        assert console.stop() == 0


def groups_reassignments_and_security(api: str) -> None:
    """The pages of groups, reassignments and security on Kafka: a group made by a
    reset done in the console, its offsets and lag, OffsetDelete (a version with no
    flexible form) and DeleteGroups; none in progress; no authorizer."""
    reset = {"scenario": "to-earliest", "topics": ["ui-on-kafka"], "execute": True}
    plan = call(api + "groups/on-kafka/reset-offsets", "POST", reset)["plan"]
    assert [(p["partition"], p["new"]) for p in plan] == [(0, 0), (1, 0)]
    group = call(api + "groups/on-kafka")
    assert (group["state"], group["lag"]) == ("Empty", 1)
    assert [(p["partition"], p["offset"], p["logEndOffset"]) for p in group["partitions"]] == [
        (0, 0, 0), (1, 0, 1)
    ]  # fmt: skip
    assert [(g["group"], g["lag"]) for g in call(api + "groups")["groups"]] == [("on-kafka", 1)]
    gone = {"partitions": [{"topic": "ui-on-kafka", "partition": 1}]}
    assert call(api + "groups/on-kafka/delete-offsets", "POST", gone)["refused"] == {}
    assert [p["partition"] for p in call(api + "groups/on-kafka")["partitions"]] == [0]
    assert call(api + "groups/on-kafka", "DELETE") == {"deleted": "on-kafka"}
    assert call(api + "reassignments") == {"reassignments": []}
    acls = call(api + "security/acls")
    assert (acls["authorizer"], acls["acls"]) == (False, [])
    assert call(api + "security/users") == {"users": []}
