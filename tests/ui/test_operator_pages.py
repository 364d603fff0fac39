"""The consumer-group and security pages in a real browser, against one broker with
an authorizer (refusing nothing without an ACL) and a SASL_PLAINTEXT listener next
to the PLAINTEXT one the console and the consumers use (User:ANONYMOUS is a super
user). Groups: lag that falls as a consumer catches up, a reset done in the page
that the next consumer reads from, deleting offsets and the group. Security: a
SCRAM user added in the page logs in; an ACL added in the page refuses that user's
client, and deleting it lets the client in again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from playwright.sync_api import expect

from moldau.testing.browser import PageProblems
from moldau.testing.process import BrokerProcess, wait_for
from moldau.testing.sasl import SaslUsers
from tests.ui.conftest import serving_console

pytestmark = pytest.mark.ui

RECORDS = 200
MECHANISM = "SCRAM-SHA-256"


@pytest.fixture(scope="module")
def ui_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Replaces the conftest's broker for this module (its `page` opens this one's
    console)."""
    users = SaslUsers({"admin": "admin-secret"}, mechanisms=(MECHANISM,),
                      inter_broker_mechanism=MECHANISM)  # fmt: skip
    overrides = {
        "group.initial.rebalance.delay.ms": "0",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
        # A topic without ACLs is open to all: the ACL the page adds is what refuses.
        "allow.everyone.if.no.acl.found": "true",
    }
    data = tmp_path_factory.mktemp("ui-operator") / "data"
    with serving_console(
        BrokerProcess(data, overrides, sasl=users, serve_args=["--ui-port", "0"])
    ) as b:
        yield b


@pytest.fixture(scope="module", autouse=True)
def broker_before_browser(ui_broker: BrokerProcess) -> None:
    """Autouse, so first: the broker writes its SCRAM users with asyncio, which it
    cannot once Playwright's loop (the browser) runs in this thread."""


@pytest.fixture(scope="module")
def topic(ui_broker: BrokerProcess) -> str:
    """A one-partition topic of RECORDS records."""
    admin = AdminClient({"bootstrap.servers": ui_broker.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic("lagged", 1, 1)])["lagged"].result(10)
    producer = Producer({"bootstrap.servers": ui_broker.bootstrap, "log_level": 0})
    for i in range(RECORDS):
        producer.produce("lagged", f"record-{i}".encode())
    assert producer.flush(10) == 0
    return "lagged"


def consumer(broker: BrokerProcess, group: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": f"{group}-client",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })  # fmt: skip


def consume(c: Consumer, count: int) -> list[Any]:
    """`count` records (waiting up to 10 s), then their offsets committed."""
    got: list[Any] = []
    assert wait_for(lambda: _poll_into(c, got, count), timeout=10), f"only {len(got)} records"
    c.commit(asynchronous=False)
    return got


def _poll_into(c: Consumer, got: list[Any], count: int) -> bool:
    for m in c.consume(count - len(got), 0.2):
        if m.error() is None:
            got.append(m)
    return len(got) >= count


@pytest.fixture
def reader(ui_broker: BrokerProcess, topic: str, request: Any) -> Iterator[Consumer]:
    c = consumer(ui_broker, request.param)
    c.subscribe([topic])
    try:
        yield c
    finally:
        c.close()


@pytest.mark.parametrize("reader", ["ui-lag"], indirect=True)
def test_a_groups_lag_shows_and_falls_as_its_consumer_catches_up(
    page: Any, reader: Consumer
) -> None:
    consume(reader, 50)
    page.goto("/#/groups")
    row = page.locator("#groups tr", has_text="ui-lag")
    expect(row).to_contain_text("Stable")
    expect(row.locator("td").last).to_have_text("150")
    row.get_by_role("link", name="ui-lag").click()
    expect(page.locator("#total-lag .value")).to_have_text("150")
    expect(page.locator("#members")).to_contain_text("ui-lag-client")
    expect(page.locator("#partitions")).to_contain_text("50")
    # The chart draws what the server samples every 2 s: the lag, then its fall.
    assert wait_for(lambda: 150 in lag_history(page), timeout=10, interval=0.2)
    consume(reader, RECORDS - 50)
    expect(page.locator("#total-lag .value")).to_have_text("0", timeout=15_000)
    assert wait_for(lambda: lag_history(page)[-1] == 0, timeout=10, interval=0.2)
    expect(page.locator("#lag-chart svg path")).to_be_attached()


def lag_history(page: Any) -> list[float]:
    """The lags the server sampled for ui-lag, oldest first (the chart's points)."""
    points: list[list[float]] = page.evaluate(
        "async () => (await (await fetch('/api/groups/ui-lag')).json()).lagHistory[0].points"
    )
    return [value for _, value in points]


@pytest.mark.parametrize("reader", ["ui-reset"], indirect=True)
def test_a_reset_done_in_the_page_is_where_the_consumer_reads_from(
    page: Any, reader: Consumer, ui_broker: BrokerProcess, topic: str, problems: PageProblems
) -> None:
    consume(reader, 100)
    page.goto("/#/group/ui-reset")
    expect(page.locator("#members")).to_contain_text("ui-reset-client")
    page.select_option("#reset select[name=scenario]", "to-offset")
    page.fill("#reset input[name=value]", "42")
    problems.expect("/reset-offsets")  # the refusal is an HTTP 400 the page shows
    page.click("#dry-run")
    expect(page.locator("#group-status")).to_have_text(
        "Assignments can only be reset if the group 'ui-reset' is inactive, "
        "but the current state is Stable."
    )
    reader.close()
    expect(page.locator("main")).to_contain_text("No active members.", timeout=15_000)
    page.click("#dry-run")
    expect(page.locator("#plan tbody td")).to_have_text(["lagged", "0", "100", "42"])
    page.click("#execute")
    expect(page.locator("#group-status")).to_have_text("Offsets reset for 1 partition(s).")
    again = consumer(ui_broker, "ui-reset")
    try:
        again.subscribe([topic])
        first = consume(again, 1)[0]
    finally:
        again.close()
    assert (first.offset(), first.value()) == (42, b"record-42")
    # Its committed offset (43 now) deleted, then the group itself.
    page.locator("#partitions button", has_text="Delete offset").click()
    expect(page.locator("#group-status")).to_have_text("Offset of lagged-0 deleted.")
    expect(page.locator("#partitions")).not_to_contain_text("43")
    page.click("#delete-group")
    page.click("#delete-group")
    page.wait_for_url("**/#/groups")
    expect(page.locator("main")).not_to_contain_text("ui-reset")


def produce_as(broker: BrokerProcess, user: str, password: str, topic: str) -> KafkaError | None:
    """One record to `topic` as `user` over SASL; the error that refused it, if any."""
    producer = Producer({
        "bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM, "sasl.username": user, "sasl.password": password,
        "message.timeout.ms": 5000, "log_level": 0,
    })  # fmt: skip
    outcome: list[KafkaError | None] = []
    try:
        producer.produce(topic, b"hello", on_delivery=lambda err, _: outcome.append(err))
        producer.flush(10)
    except KafkaException as e:
        return e.args[0]  # type: ignore[no-any-return]
    assert outcome, "no delivery report"
    return outcome[0]


def test_a_user_and_an_acl_added_in_the_page_take_effect(
    page: Any, ui_broker: BrokerProcess
) -> None:
    page.goto("/#/security")
    expect(page.locator("#acl-note")).to_have_text("")
    expect(page.locator("#users")).to_contain_text("admin")
    form = page.locator("#user-add")
    form.locator("[name=user]").fill("alice")
    form.locator("[name=mechanism]").select_option(MECHANISM)
    form.locator("[name=iterations]").fill("8192")
    form.locator("[name=password]").fill("alice-secret")
    form.get_by_role("button", name="Add / update").click()
    expect(page.locator("#users tr", has_text="alice")).to_contain_text(
        f"{MECHANISM} (8192 iterations)"
    )
    assert produce_as(ui_broker, "alice", "alice-secret", "open") is None

    acl = page.locator("#acl-add")
    acl.locator("[name=resourceType]").select_option("topic")
    acl.locator("[name=name]").fill("secret")
    acl.locator("[name=permission]").select_option("deny")
    acl.locator("[name=principal]").fill("User:alice")
    acl.locator("[name=operation]").select_option("Write")
    acl.get_by_role("button", name="Add ACL").click()
    row = page.locator("#acls tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator("td")).to_have_text(
        ["TOPIC:secret", "LITERAL", "User:alice", "*", "WRITE", "DENY", "Delete"]
    )
    refused = produce_as(ui_broker, "alice", "alice-secret", "secret")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    row.get_by_role("button", name="Delete").click()
    expect(page.locator("#acls tbody tr")).to_have_count(0)
    assert produce_as(ui_broker, "alice", "alice-secret", "secret") is None
