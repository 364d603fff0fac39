"""Kafka's kafka-configs tool (kafka.admin.ConfigCommand) sets the topic configs Kafka 3.9
deprecates but accepts, and describes them as Kafka does: on one broker and on three."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.testing import kafka_java

pytestmark = pytest.mark.java


def configs(bootstrap: str, *args: str) -> str:
    done = kafka_java.run(
        "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, *args, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout


def test_kafka_configs_sets_and_describes_deprecated_topic_configs(
    bootstrap: str, kafka_java: Path
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    rf = min(3, len(admin.list_topics(timeout=10).brokers))
    topic = f"deprecated-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, rf)])[topic].result(30)
    where = ("--entity-type", "topics", "--entity-name", topic)
    changes = "message.format.version=2.8,message.timestamp.difference.max.ms=60000"
    assert "Completed updating config" in configs(
        bootstrap, "--alter", *where, "--add-config", changes
    )
    described = configs(bootstrap, "--describe", "--all", *where)
    assert (
        "message.format.version=2.8 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "message.format.version=2.8, DEFAULT_CONFIG:log.message.format.version=3.0-IV1}"
    ) in described
    assert (
        "message.timestamp.difference.max.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "message.timestamp.difference.max.ms=60000, DEFAULT_CONFIG:"
        "log.message.timestamp.difference.max.ms=9223372036854775807}"
    ) in described
    only_overrides = configs(bootstrap, "--describe", *where)
    assert "message.format.version=2.8" in only_overrides
    configs(bootstrap, "--alter", *where, "--delete-config", "message.format.version")
    assert "message.format.version" not in configs(bootstrap, "--describe", *where)
