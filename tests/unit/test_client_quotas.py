"""Client quota arithmetic and entity resolution (moldau.quota), on a fake clock:
the rates Kafka's sensors measure, the throttle time they give, which quota a
client falls under, and what AlterClientQuotas accepts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from moldau.clock import FakeClock
from moldau.config.broker import BrokerConfig
from moldau.metadata.client import MetadataClient
from moldau.metadata.embedded import EmbeddedTree
from moldau.quota.entities import (
    DEFAULT,
    InvalidQuotaError,
    QuotaEntity,
    check_value,
    entity_of_path,
    entity_of_request,
    metric_tags,
    quota_limit,
    quota_values,
)
from moldau.quota.manager import ClientQuotaManager, ControllerMutationQuotaManager, QuotaType
from moldau.quota.rate import Rate, TokenBucket
from moldau.server.dynamic_config_manager import DynamicConfigManager
from moldau.server.quotas import BrokerQuotas
from moldau.storage.log_manager import LogManager


def test_a_rate_is_taken_over_at_least_samples_minus_one_windows() -> None:
    rate = Rate(samples=11, window_ms=1000)
    rate.record(10_000, 0)
    # A first burst counts over 10 s, not over the instant it took.
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(1000.0)
    rate.record(10_000, 10_500)
    assert rate.window_size_ms(10_500) == 10_500
    assert rate.measure(10_500) == pytest.approx(20_000 / 10.5)
    # Samples older than samples x window no longer count: 500 ms of the one left,
    # plus 10 windows.
    assert rate.measure(11_000) == pytest.approx(10_000 / 10.5)
    assert rate.measure(30_000) == 0.0


def test_a_client_over_its_quota_waits_until_its_rate_is_back_at_the_bound() -> None:
    clock = FakeClock()
    produce = ClientQuotaManager(QuotaType.PRODUCE, clock, samples=11, window_ms=1000)
    assert produce.record("alice", "app", 1e9) == 0  # no quota: nothing measured
    assert produce.sensors == {}
    produce.update_quota(QuotaEntity(client_id="app"), 1000.0)
    # 10 s x 1000 B/s fit in the window; beyond that the client is throttled.
    assert produce.record("alice", "app", 10_000) == 0
    ms = produce.record("alice", "app", 5_000)
    # 15,000 B over 10 s is 1,500 B/s: half as much again as the bound, so half of
    # the window: 5 s.
    assert ms == 5000
    # Another client is not counted against it.
    assert produce.record("alice", "other", 1e9) == 0


def test_a_request_quota_throttles_at_most_one_window() -> None:
    clock = FakeClock()
    request = ClientQuotaManager(QuotaType.REQUEST, clock, samples=11, window_ms=1000)
    request.max_throttle_ms = 1000
    request.update_quota(QuotaEntity(client_id=DEFAULT), 10.0)
    assert request.record("", "app", 1e6) == 1000


def test_a_throttled_fetch_is_taken_back() -> None:
    clock = FakeClock()
    fetch = ClientQuotaManager(QuotaType.FETCH, clock, samples=2, window_ms=1000)
    fetch.update_quota(QuotaEntity(client_id="c"), 100.0)
    assert fetch.max_value_in_window("", "c") == 100.0
    assert fetch.record("", "c", 50) == 0
    assert fetch.record("", "c", 200) > 0
    fetch.unrecord("", "c", 200)
    assert fetch.record("", "c", 40) == 0


@pytest.mark.parametrize(
    ("set_", "tags", "bound"),
    [
        # Kafka's order, most specific first.
        ([QuotaEntity("u", "c"), QuotaEntity("u")], ("u", "c"), 1.0),
        ([QuotaEntity("u", DEFAULT), QuotaEntity("u")], ("u", "c"), 1.0),
        ([QuotaEntity("u"), QuotaEntity(DEFAULT, "c")], ("u", ""), 1.0),
        ([QuotaEntity(DEFAULT, "c"), QuotaEntity(DEFAULT, DEFAULT)], ("u", "c"), 1.0),
        ([QuotaEntity(DEFAULT, DEFAULT), QuotaEntity(DEFAULT)], ("u", "c"), 1.0),
        ([QuotaEntity(DEFAULT), QuotaEntity(client_id="c")], ("u", ""), 1.0),
        ([QuotaEntity(client_id="c"), QuotaEntity(client_id=DEFAULT)], ("", "c"), 1.0),
        ([QuotaEntity(client_id=DEFAULT)], ("", "c"), 1.0),
        ([QuotaEntity("v"), QuotaEntity(client_id="d")], ("", "c"), None),
    ],
)
def test_which_quota_a_client_falls_under(
    set_: list[QuotaEntity], tags: tuple[str, str], bound: float | None
) -> None:
    overrides = {e: float(i + 1) for i, e in enumerate(set_)}
    assert metric_tags(overrides, "u", "c") == tags
    assert quota_limit(overrides, tags) == bound


def test_a_users_clients_share_a_user_quota() -> None:
    clock = FakeClock()
    produce = ClientQuotaManager(QuotaType.PRODUCE, clock, samples=2, window_ms=1000)
    produce.update_quota(QuotaEntity("u"), 100.0)
    assert produce.record("u", "a", 100) == 0
    assert produce.record("u", "b", 100) > 0
    assert list(produce.sensors) == [("u", "")]
    # Removing the quota lifts it.
    produce.update_quota(QuotaEntity("u"), None)
    assert produce.record("u", "b", 1e9) == 0


def test_controller_mutations_strict_refuse_and_permissive_throttle() -> None:
    clock = FakeClock()
    m = ControllerMutationQuotaManager(QuotaType.CONTROLLER_MUTATION, clock, 11, 1000)
    m.update_quota(QuotaEntity(client_id="c"), 2.0)  # burst: 2 x 11 x 1 s = 22
    assert m.record_mutation("", "c", 30, strict=True) == 0  # allowed below zero once
    assert m.record_mutation("", "c", 1, strict=True) == 4000  # -8 tokens at 2/s
    clock.advance(4000)
    assert m.record_mutation("", "c", 1, strict=True) == 0
    assert m.record_mutation("", "c", 10, strict=False) == 5500  # -11 tokens
    bucket = TokenBucket(1.0, 2, 1000, 0)
    bucket.record(5, 0)
    assert bucket.measure(10_000) == 2.0  # refilled up to the burst only


def test_entity_paths_are_kafkas() -> None:
    assert QuotaEntity("a%40b", "c/1").path == "users/a%40b/clients/c%2F1"
    assert QuotaEntity(DEFAULT).path == "users/<default>"
    assert QuotaEntity(client_id=DEFAULT).path == "clients/<default>"
    for e in (QuotaEntity("a%40b", "c/1"), QuotaEntity(DEFAULT, DEFAULT), QuotaEntity(None, "x")):
        assert entity_of_path(e.path) == e
    assert entity_of_path("topics/t") is None
    assert QuotaEntity("a%40b", DEFAULT).described() == [("user", "a@b"), ("client-id", None)]


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([], "Invalid empty client quota entity"),
        ([("user", "a"), ("user", "b")], "duplicate entity entry user"),
        ([("group", "a")], "Unhandled client quota entity type: group"),
        ([("client-id", "")], "Empty client-id not supported"),
        ([("ip", "1.2.3.4"), ("user", "a")], "IP entity should not be used"),
    ],
)
def test_bad_entities_are_refused(parts: list[tuple[str, str | None]], message: str) -> None:
    with pytest.raises(InvalidQuotaError, match=message):
        entity_of_request(parts)


def test_values_are_checked_as_kafka_does() -> None:
    assert entity_of_request([("user", "a@b"), ("client-id", None)]) == QuotaEntity(
        "a%40b", DEFAULT
    )
    assert check_value("producer_byte_rate", 1024.0) == "1024"
    assert check_value("request_percentage", 50.0) == "50.0"
    for key, value, message in [
        ("bogus", 1.0, "Invalid configuration key bogus"),
        ("consumer_byte_rate", 0.0, "must be greater than 0"),
        ("consumer_byte_rate", -5.0, "must be greater than 0"),
        ("producer_byte_rate", 1.5, "cannot be a fractional value"),
        ("producer_byte_rate", 1e20, "too large for a LONG"),
    ]:
        with pytest.raises(InvalidQuotaError, match=message):
            check_value(key, value)
    assert quota_values({"SCRAM-SHA-256": "x", "producer_byte_rate": "10"}) == {
        "producer_byte_rate": 10.0
    }


def test_quotas_are_read_from_the_store_and_follow_its_change_notifications(
    tmp_path: Path,
) -> None:
    """Kafka's znodes (a user's next to its SCRAM credentials, whose entry keeps
    them), loaded at start; a change reaches the quota listeners, a user's client-id
    change not the SCRAM users' listeners."""

    async def run() -> None:
        store = EmbeddedTree(None).session()
        await store.start()
        client = MetadataClient(store)
        await client.create_top_level_paths()
        await client.set_user_config("alice", {"SCRAM-SHA-256": "salt=..."})
        alice = {**(await client.get_entity_config("users/alice")), "producer_byte_rate": "100"}
        await client.set_entity_config("users/alice", alice)
        await client.set_entity_config("users/bob/clients/<default>", {"request_percentage": "5.0"})
        await client.set_entity_config("clients/c%2F1", {"consumer_byte_rate": "7"})
        assert sorted(await client.get_quota_entity_paths()) == [
            "clients/c%2F1", "users/alice", "users/bob", "users/bob/clients/<default>",
        ]  # fmt: skip
        assert (await client.get_user_config("alice"))["SCRAM-SHA-256"] == "salt=..."
        quotas = BrokerQuotas(BrokerConfig(), FakeClock())
        assert not quotas.enabled
        await quotas.load(client)
        assert quotas.enabled
        assert quotas.produce.overrides == {QuotaEntity("alice"): 100.0}
        assert quotas.request.overrides == {QuotaEntity("bob", DEFAULT): 5.0}
        assert quotas.fetch.overrides == {QuotaEntity(client_id="c/1"): 7.0}

        manager = DynamicConfigManager(
            client, BrokerConfig(), LogManager([tmp_path], FakeClock(), 1)
        )
        users: list[str] = []
        paths: list[str] = []

        async def on_user(user: str) -> None:
            users.append(user)

        async def on_quota(path: str) -> None:
            paths.append(path)
            await quotas.on_change(client, path)

        manager.user_listeners.append(on_user)
        manager.quota_listeners.append(on_quota)
        await manager.start()
        try:
            await client.set_entity_config("users/bob/clients/<default>", {})
            await client.set_entity_config("users/alice", {"SCRAM-SHA-256": "salt=..."})
            assert await wait_until(lambda: len(paths) == 2)
            assert paths == ["users/bob/clients/<default>", "users/alice"]
            assert users == ["alice"]
            assert quotas.produce.overrides == {} and quotas.request.overrides == {}
            assert quotas.enabled  # the client's consumer quota is left
        finally:
            await manager.close()
            await store.close()

    asyncio.run(run())


async def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)
    return True
