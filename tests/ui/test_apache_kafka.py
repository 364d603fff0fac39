"""`moldau ui` against Apache Kafka 4.1's own broker: the console reads it through
the Kafka protocol alone, so its cluster, topics and messages answer there too."""

from __future__ import annotations

import json
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
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.loads(response.read())


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
        assert console.stop() == 0
