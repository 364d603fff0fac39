"""The data source against a secured broker: `kafka.security.protocol`,
`kafka.sasl.*` and `kafka.ssl.*` reach every client it makes (the driver's offset
lookups and the marker topic's creation, the tasks' readers, writers and the
exactly-once sink's transactions and bookkeeping), as with Spark's connector. The
broker serves SASL_SSL with SCRAM and allows nothing without an ACL; the user
holds only the ACLs its reads and writes need."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclOperation,
    AdminClient,
    NewTopic,
    ResourceType,
)

from moldau.spark import pipeline
from moldau.testing.process import BrokerProcess
from tests.integration.secured import allow, secured_broker

pytestmark = pytest.mark.spark

USER, PASSWORD = "spark", "spark-secret"
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
PREFIX = "sec-"


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, dict[str, str]]]:
    """The broker (its PLAINTEXT listener is the operator's) and the data source's
    kafka.* options for its SASL_SSL listener."""
    user = f"User:{USER}"
    grants = [
        *(allow(user, ResourceType.TOPIC, PREFIX, op) for op in
          (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE)),
        # The exactly-once sink: its tasks' transactional ids and bookkeeping groups.
        allow(user, ResourceType.TRANSACTIONAL_ID, "moldau-spark-", AclOperation.WRITE),
        allow(user, ResourceType.GROUP, "moldau-spark-", AclOperation.READ),
    ]  # fmt: skip
    users = {USER: ("SCRAM-SHA-512", PASSWORD), ADMIN: ("SCRAM-SHA-512", ADMIN_PASSWORD)}
    directory = tmp_path_factory.mktemp("spark-secured")
    with secured_broker(directory, users, admin=ADMIN, grants=grants) as b:
        options = {f"kafka.{k}": v for k, v in b.client_settings(USER).items()}
        yield b.broker, options | {"kafka.bootstrap.servers": b.sasl_ssl}


def test_batch_write_and_read_over_sasl_ssl_with_scram_and_acls(
    spark: Any, secured: tuple[BrokerProcess, dict[str, str]], topic_name: str
) -> None:
    broker, options = secured
    topic = PREFIX + topic_name
    operator = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    operator.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    plain = spark.createDataFrame(
        [(f"k{i}", f"v{i}") for i in range(20)], "key string, value string"
    )
    plain.write.format("moldau").options(**options).option("topic", topic).mode("append").save()
    # The exactly-once sink: transactions, its marker topic (created by the driver)
    # and the bookkeeping groups' offsets.
    once = spark.createDataFrame(
        [(f"e{i}", f"once{i}") for i in range(10)], "key string, value string"
    )
    (
        once.write.format("moldau")
        .options(**options)
        .option("topic", topic)
        .option("exactlyOnce", "true")
        .option("exactlyOnce.markerTopic", f"{topic}-m")
        .mode("append")
        .save()
    )
    read = (
        spark.read.format("moldau")
        .options(**options)
        .option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed")
        .load()
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v")
        .collect()
    )
    assert sorted((r.k, r.v) for r in read) == sorted(
        [(f"k{i}", f"v{i}") for i in range(20)] + [(f"e{i}", f"once{i}") for i in range(10)]
    )


def test_a_wrong_password_fails_the_read_with_the_brokers_reason(
    spark: Any, secured: tuple[BrokerProcess, dict[str, str]], topic_name: str
) -> None:
    _, options = secured
    with pytest.raises(Exception) as e:
        (
            spark.read.format("moldau")
            .options(**(options | {"kafka.sasl.password": "not-it"}))
            .option("subscribe", PREFIX + topic_name)
            .load()
            .collect()
        )
    assert "SASL authentication error: Authentication failed during authentication" in str(e.value)


def admin_settings(options: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The bootstrap and the client settings (librdkafka names) of the super user."""
    settings = {k.removeprefix("kafka."): v for k, v in options.items()}
    settings |= {"sasl.username": ADMIN, "sasl.password": ADMIN_PASSWORD}
    return settings.pop("bootstrap.servers"), settings


def test_the_pipeline_job_runs_over_sasl_ssl_given_client_settings(
    spark: Any, secured: tuple[BrokerProcess, dict[str, str]], tmp_path: Path
) -> None:
    """The demo pipeline's pieces as `moldau pipeline demo --command-config` runs
    them, in this session's Spark: the orders' producer, the streaming job's reads,
    its exactly-once sink and the totals' read back all log in."""
    from moldau.cli.pipeline import DemoRun, _create_topics, _remove_from_broker

    _, options = secured
    bootstrap, settings = admin_settings(options)
    run = DemoRun.new(300, bootstrap, made_work_dir=False)
    _create_topics(bootstrap, run, settings)
    orders = pipeline.make_orders(run.events, run.seed, now_ms=run.now_ms)
    pipeline.send_orders(bootstrap, run.orders_topic, orders, settings)
    parquet = str(tmp_path / "totals.parquet")
    sink = pipeline.TotalsWriter(bootstrap, run.totals_topic, parquet, settings)
    query = pipeline.start_job(
        spark, bootstrap, run.orders_topic, str(tmp_path / "checkpoint"),
        max_per_trigger=1000, sink=sink, client=settings,
    )  # fmt: skip
    pipeline.watch(query, sink, lambda _: None)
    totals = pipeline.totals_from_topic(spark, bootstrap, run.totals_topic, settings)
    assert totals and pipeline.differences(pipeline.expected_totals(orders), totals) == []
    _remove_from_broker(bootstrap, run, settings)


def test_the_pipeline_demo_takes_a_command_config(
    secured: tuple[BrokerProcess, dict[str, str]], tmp_path: Path
) -> None:
    """`moldau pipeline demo --command-config F`: its clients take the file's
    settings (a wrong password stops it at its first request, in one line, before
    Spark starts), and without --bootstrap-server it is refused."""
    _, options = secured
    bootstrap, settings = admin_settings(options)
    config = tmp_path / "client.properties"
    config.write_text(
        "".join(f"{k}={v}\n" for k, v in (settings | {"sasl.password": "not-it"}).items())
    )

    def demo(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "moldau", "pipeline", "demo", "--command-config",
             str(config), "--events", "10", *args],
            capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )  # fmt: skip

    refused = demo("--bootstrap-server", bootstrap)
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"moldau pipeline: authentication failed at {bootstrap}: "
        "SASL authentication error: Authentication failed during authentication due to "
        "invalid credentials with SASL mechanism SCRAM-SHA-512"
    ]
    own = demo()
    assert own.returncode == 1
    assert own.stderr.splitlines() == [
        "moldau pipeline: --command-config is for a secured cluster given with "
        "--bootstrap-server; the demo's own broker listens on PLAINTEXT"
    ]
    assert list(tmp_path.iterdir()) == [config]  # no work dir left behind
