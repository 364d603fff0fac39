"""The console's pages in a real browser against a real broker process: what a
user sees and does, checked against what Kafka clients see."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from playwright.sync_api import expect

from moldau.testing.browser import PageProblems
from moldau.testing.process import BrokerProcess, wait_for

pytestmark = pytest.mark.ui


@pytest.fixture(scope="module")
def admin(ui_broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": ui_broker.bootstrap})


@pytest.fixture
def topic(admin: AdminClient) -> Iterator[str]:
    """A topic of the test's own with two partitions on both brokers, made by a client."""
    name = f"ui-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, 2, 2, config={"retention.ms": "3600000"})])[name].result(10)
    yield name


def produce(bootstrap: str, topic: str, **record: Any) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, **record)
    assert p.flush(10) == 0


def test_cluster_page_shows_the_broker_and_live_charts(page: Any, ui_broker: BrokerProcess) -> None:
    page.goto("/")
    expect(page.locator("#brokers")).to_contain_text(f"127.0.0.1:{ui_broker.port}")
    expect(page.locator("[data-broker='1']")).to_have_text("online")
    expect(page.locator("[data-broker='2']")).to_have_text("online")
    expect(page.locator(".card", has_text="Brokers online")).to_contain_text("2 / 2")
    expect(page.locator("nav a.active")).to_have_text("Cluster")
    # The broker's own metrics endpoint feeds the charts (serve knows it).
    expect(page.get_by_text("From the brokers' metrics endpoints")).to_be_visible()
    expect(page.locator(".chart svg path").first).to_be_attached()


def test_a_topic_created_in_the_ui_exists_for_a_client(page: Any, admin: AdminClient) -> None:
    name = f"ui-made-{uuid.uuid4().hex[:8]}"
    page.goto("#/topics")
    form = page.locator("#create-topic")
    form.locator("[name=name]").fill(name)
    form.locator("[name=partitions]").fill("3")
    form.locator("[name=configs]").fill("cleanup.policy=compact")
    form.get_by_role("button").click()
    expect(page.locator("#topics")).to_contain_text(name)
    md = admin.list_topics(name, timeout=10).topics[name]
    assert md.error is None and len(md.partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"


def test_add_partitions_and_delete_with_confirmation(
    page: Any, admin: AdminClient, topic: str
) -> None:
    page.goto("#/topics")
    row = page.locator("#topics tr", has_text=topic)
    page.once("dialog", lambda d: d.accept("4"))
    row.get_by_role("button", name="Add partitions").click()
    assert wait_for(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 4)
    expect(row.locator("td").nth(1)).to_have_text("4")
    # Declining the confirmation keeps the topic; accepting deletes it.
    page.once("dialog", lambda d: d.dismiss())
    row.get_by_role("button", name="Delete").click()
    expect(row).to_be_visible()
    assert topic in admin.list_topics(timeout=10).topics
    page.once("dialog", lambda d: d.accept())
    row.get_by_role("button", name="Delete").click()
    expect(row).to_have_count(0)
    assert wait_for(lambda: topic not in admin.list_topics(timeout=10).topics)


def test_topic_page_shows_partitions_and_edits_configs(
    page: Any, admin: AdminClient, topic: str, ui_broker: BrokerProcess
) -> None:
    for i in range(3):
        produce(ui_broker.bootstrap, topic, value=b"x" * 100, partition=1, key=str(i).encode())
    page.goto(f"#/topic/{topic}")
    rows = page.locator("#partitions tbody tr")
    expect(rows).to_have_count(2)
    # As a client sees it: partition, leader, replicas, ISR, log start, high
    # watermark, last stable offset, size.
    p = admin.list_topics(topic, timeout=10).topics[topic].partitions[1]
    shown = [str(p.leader), ", ".join(map(str, p.replicas)), ", ".join(map(str, p.isrs))]
    assert len(p.isrs) == 2
    expect(rows.nth(1).locator("td")).to_have_text(["1", *shown, "0", "3", "3", re.compile("B$")])
    retention = page.locator("#configs").get_by_role("row", name=re.compile(r"^retention\.ms "))
    expect(retention).to_contain_text("3600000")
    expect(retention).to_contain_text("dynamic topic")
    retention.get_by_role("button", name="Edit").click()
    form = page.locator("#alter-config")
    form.locator("[name=value]").fill("7200000")
    form.get_by_role("button", name="Set", exact=True).click()
    expect(retention).to_contain_text("7200000")
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    assert admin.describe_configs([resource])[resource].result(10)["retention.ms"].value == (
        "7200000"
    )
    # Among some forty configs, the one set on the topic, found two ways.
    page.locator("#only-set").check()
    expect(page.locator("#configs tbody tr")).to_have_count(1)
    expect(retention).to_be_visible()
    page.locator("[name=find]").fill("segment")
    expect(page.locator(".empty")).to_have_text("No config matches.")


def test_a_record_from_a_client_shows_in_the_browser(
    page: Any, topic: str, ui_broker: BrokerProcess
) -> None:
    value = json.dumps({"order": 17, "items": ["tea"]}).encode()
    produce(
        ui_broker.bootstrap,
        topic,
        key=b"k-17",
        value=value,
        partition=0,
        headers=[("trace", b"abc")],
    )
    produce(ui_broker.bootstrap, topic, key=b"other", value=b"plain", partition=1)
    page.goto(f"#/messages/{topic}")
    records = page.locator("#records tbody tr")
    expect(records).to_have_count(2)
    row = records.filter(has_text="trace: abc")  # headers stay text in every format
    expect(row).to_contain_text("trace: abc")
    page.locator("#browse [name=format]").select_option("json")
    expect(row.locator("pre").nth(1)).to_have_text(json.dumps(json.loads(value), indent=2))
    page.locator("#browse [name=format]").select_option("hex")
    expect(row.locator("pre").first).to_have_text("6b 2d 31 37")  # k-17
    # Nothing is that late; a filter keeps the matching record only; one partition,
    # from an offset.
    page.locator("#browse [name=from]").select_option("timestamp")
    page.locator("#browse [name=timestamp]").fill("2999-01-01T00:00:00")
    page.locator("#browse").get_by_role("button").click()
    expect(records).to_have_count(0)
    expect(page.locator("#records .empty")).to_have_text("No records in this window.")
    page.locator("#browse [name=from]").select_option("beginning")
    page.locator("#browse [name=format]").select_option("text")
    page.locator("#browse [name=filter]").fill("plain")
    page.locator("#browse").get_by_role("button").click()
    expect(records).to_have_count(1)
    expect(records).to_contain_text("other")
    page.locator("#browse [name=filter]").fill("")
    page.locator("#browse [name=partition]").select_option("0")
    page.locator("#browse [name=from]").select_option("offset")
    page.locator("#browse [name=offset]").fill("1")
    page.locator("#browse").get_by_role("button").click()
    expect(page.locator("#browse-status")).to_contain_text("0 record(s)")


def test_a_record_produced_in_the_ui_is_read_by_a_client(
    page: Any, topic: str, ui_broker: BrokerProcess
) -> None:
    page.goto(f"#/messages/{topic}")
    form = page.locator("#produce")
    form.locator("[name=key]").fill("from-ui")
    form.locator("[name=value]").fill("hello from the console")
    form.locator("[name=headers]").fill("source=ui")
    form.locator("[name=partition]").fill("1")
    form.get_by_role("button").click()
    expect(page.locator("#produced")).to_have_text("written to partition 1 at offset 0")
    consumer = Consumer({"bootstrap.servers": ui_broker.bootstrap, "group.id": "ui-test"})
    try:
        consumer.assign([TopicPartition(topic, 1, 0)])
        m = consumer.consume(1, timeout=10)[0]
    finally:
        consumer.close()
    assert (m.key(), m.value(), m.headers()) == (
        b"from-ui",
        b"hello from the console",
        [("source", b"ui")],
    )


def test_bad_input_gets_a_clear_message(page: Any, problems: PageProblems, topic: str) -> None:
    problems.expect("HTTP 404")
    problems.expect("HTTP 400")
    problems.expect("Failed to load resource")
    problems.expect("no-such-page.js")
    page.goto("#/topic/no-such-topic")
    expect(page.locator("#banner")).to_have_text(
        "UNKNOWN_TOPIC_OR_PARTITION: topic 'no-such-topic' does not exist"
    )
    page.goto(f"#/messages/{topic}")
    expect(page.locator("#browse-status")).to_contain_text("record(s)")
    page.locator("#browse [name=partition]").select_option("0")
    page.locator("#browse [name=from]").select_option("offset")
    page.locator("#browse [name=offset]").fill("99")
    page.locator("#browse").get_by_role("button").click()
    expect(page.locator("#banner")).to_have_text(
        "OFFSET_OUT_OF_RANGE: offset 99 is not in partition 0's range 0..0"
    )
    page.goto("#/no-such-page")
    expect(page.locator("#banner")).to_have_text("no page no-such-page")


def test_topic_page_charts_the_topics_own_throughput(
    page: Any, admin: AdminClient, topic: str, ui_broker: BrokerProcess
) -> None:
    quiet = f"{topic}-quiet"
    admin.create_topics([NewTopic(quiet, 1, 1)])[quiet].result(10)
    page.goto(f"#/topic/{topic}")
    summary = page.locator("#summary")
    expect(summary.locator(".card", has_text="Partitions")).to_contain_text("2")
    expect(summary.locator(".card", has_text="Replication factor")).to_contain_text("2")
    messages_chart = page.locator("#topic-charts .chart").first
    expect(messages_chart).to_contain_text("no records since the console started")

    # A topic's series begins with its traffic: records until the sampler (every
    # 2 s) has seen the count grow; then the page, opened again, draws it.
    def charted() -> bool:
        produce(ui_broker.bootstrap, topic, value=b"tick")
        series = page.request.get(f"api/topics/{topic}").json()["throughput"]["series"]
        return any(s["points"] for s in series if s["name"].endswith(".messages_in"))

    assert wait_for(charted, timeout=20)
    page.reload()
    expect(messages_chart.locator("path")).to_be_attached()
    expect(summary.locator(".card", has_text="Messages in")).to_contain_text("/s")
    # Another topic's page has no line of this one's.
    page.goto(f"#/topic/{quiet}")
    expect(page.locator("#topic-charts .chart").first).to_contain_text("no records")


def test_messages_from_the_end_are_the_newest_of_all_partitions_newest_first(
    page: Any, topic: str, ui_broker: BrokerProcess
) -> None:
    base = int(time.time() * 1000) - 60_000
    p = Producer({"bootstrap.servers": ui_broker.bootstrap})
    for i in range(6):  # r0 r2 r4 in partition 0, r1 r3 r5 in 1, a second apart
        p.produce(topic, value=f"r{i}".encode(), partition=i % 2, timestamp=base + i * 1000)
    assert p.flush(10) == 0
    page.goto(f"#/messages/{topic}")
    values = page.locator("#records tbody tr td:nth-child(5)")
    expect(values).to_have_text(["r5", "r4", "r3", "r2", "r1", "r0"])
    status = page.locator("#browse-status")
    expect(status).to_have_text(
        "6 record(s), newest first; 6 read from partition 0 (offsets 0\u20132), "
        "partition 1 (offsets 0\u20132)"
    )
    page.locator("#browse [name=limit]").fill("3")
    page.locator("#browse").get_by_role("button").click()
    expect(values).to_have_text(["r5", "r4", "r3"])
    # A filter looks back further than the last few records of each partition.
    page.locator("#browse [name=limit]").fill("1")
    page.locator("#browse [name=filter]").fill("r0")
    page.locator("#browse").get_by_role("button").click()
    expect(values).to_have_text(["r0"])
    expect(status).to_contain_text("1 record(s), newest first; 6 read")
