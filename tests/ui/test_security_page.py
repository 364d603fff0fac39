"""The security page against a broker with an authorizer and a SASL_PLAINTEXT
listener (the console on the PLAINTEXT one, whose User:ANONYMOUS is a super user):
a SCRAM user added in the page logs in; an ACL added in the page refuses that
user's client, and deleting it lets the client in again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from playwright.sync_api import expect

from moldau.testing.process import BrokerProcess
from moldau.testing.sasl import SaslUsers
from tests.ui.conftest import serving_console

pytestmark = pytest.mark.ui

MECHANISM = "SCRAM-SHA-256"


@pytest.fixture(scope="module")
def ui_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Replaces the conftest's broker for this module (its `page` opens this one's
    console)."""
    users = SaslUsers({"admin": "admin-secret"}, mechanisms=(MECHANISM,),
                      inter_broker_mechanism=MECHANISM)  # fmt: skip
    overrides = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
        # A topic without ACLs is open to all: the ACL the page adds is what refuses.
        "allow.everyone.if.no.acl.found": "true",
    }
    data = tmp_path_factory.mktemp("ui-security") / "data"
    with serving_console(
        BrokerProcess(data, overrides, sasl=users, serve_args=["--ui-port", "0"])
    ) as b:
        yield b


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
    ui_broker: BrokerProcess, page: Any
) -> None:
    # ui_broker first: it writes its SCRAM users with asyncio before Playwright's
    # loop (the browser) runs in this thread.
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
