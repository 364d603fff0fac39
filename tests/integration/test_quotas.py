"""Client quotas (issue 28 item 3) on a LocalCluster of two brokers: quotas set
with AlterClientQuotas and read with DescribeClientQuotas, Kafka's answers to bad
ones, producers and consumers held to their byte rates with the throttle in their
own statistics, a SASL user's quota, default entities, controller mutations, the
metrics, and quotas that reach every broker and outlive a restart.

The brokers measure over quota.window.num=2 windows of 1 s, so a rate settles
within a second or two (Kafka's 11 let a client burst for 10 s first)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode
from moldau.testing.local import LocalCluster
from moldau.testing.process import wait_for
from moldau.testing.sasl import SaslUsers
from tests.integration import requests as rq
from tests.integration.kafka_wire import WireClient

MB = 1024 * 1024
VALUE = b"q" * 10_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    users = SaslUsers({"admin": "admin-pw", "alice": "alice-pw"})
    overrides = {"quota.window.num": "2", "controller.quota.window.num": "2", "metrics.port": "0"}
    with LocalCluster(tmp_path_factory.mktemp("quotas"), 2, overrides, sasl=users) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        # One partition led by each broker.
        topics = [NewTopic("on-1", 1, replica_assignment=[[1]]),
                  NewTopic("on-2", 1, replica_assignment=[[2]]),
                  NewTopic("to-consume", 1, replica_assignment=[[1]])]  # fmt: skip
        for f in admin.create_topics(topics).values():
            f.result(30)
        yield c


def entity(**parts: str | None) -> list[dict[str, Any]]:
    return [{"entity_type": k.replace("_", "-"), "entity_name": v} for k, v in parts.items()]


def alter(bootstrap: str, ent: list[dict[str, Any]], validate_only: bool = False,
          **quotas: float | None) -> Any:  # fmt: skip
    """Set (or, with None, remove) quotas of one entity; the entry's answer."""
    ops = [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in quotas.items()]
    with WireClient(bootstrap) as w:
        r = w.request(rq.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, validate_only=validate_only,
                                 entries=[{"entity": ent, "ops": ops}]))  # fmt: skip
    (entry,) = r.entries
    return entry


def describe(bootstrap: str, components: list[tuple[str, int, str | None]],
             strict: bool = False) -> Any:  # fmt: skip
    comps = [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components]
    with WireClient(bootstrap) as w:
        return w.request(rq.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, strict=strict,
                                    components=comps))  # fmt: skip


def found(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == ErrorCode.none, response.error_message
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


class Measured:
    """A librdkafka client's delivered bytes over time and its broker throttle
    statistics (stats_cb: brokers -> throttle, in ms)."""

    def __init__(self) -> None:
        self.delivered: list[tuple[float, int]] = []
        self.max_throttle_ms = 0

    def stats(self, data: str) -> None:
        for broker in json.loads(data)["brokers"].values():
            self.max_throttle_ms = max(self.max_throttle_ms, broker["throttle"]["max"])

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered.append((time.monotonic(), len(msg.value())))

    def rate(self, start: float, since: float, until: float) -> float:
        """Bytes/s delivered between `since` and `until` seconds after `start`."""
        n = sum(size for t, size in self.delivered if start + since <= t < start + until)
        return n / (until - since)


def producer(bootstrap: str, client_id: str, measured: Measured, **conf: str) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
        # Requests small beside a quota of 1 MB/s measured over 2 s: one of a whole
        # window's worth makes the rate jump by that much at once.
        "batch.size": 65536, "queue.buffering.max.kbytes": 1024, "statistics.interval.ms": 200,
        "stats_cb": measured.stats, **conf,
    })  # fmt: skip


def produce_for(
    seconds: float,
    topic: str,
    *clients: tuple[Producer, Measured],
    then: Any = None,
    drain: bool = True,
) -> float:
    """Keep every producer's queue full for `seconds` (and call `then` while they
    still produce); when they started. Without `drain` what is still queued is
    dropped rather than sent (a throttled client's queue takes seconds)."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for p, m in clients:
            try:
                while True:
                    p.produce(topic, VALUE, on_delivery=m.on_delivery)
            except BufferError:
                p.poll(0.005)
    if then is not None:
        then()
    for p, _ in clients:
        if not drain:
            p.purge()
        p.flush(30)
        p.poll(0.3)  # a last statistics report
    return start


def test_alter_and_describe_client_quotas(cluster: LocalCluster) -> None:
    b = cluster.bootstrap_of(1)
    assert alter(b, entity(client_id="reporting"), producer_byte_rate=2 * MB).error_code == 0
    assert alter(b, entity(user="bob@corp", client_id=None), request_percentage=25.5,
                 consumer_byte_rate=MB).error_code == 0  # fmt: skip
    assert alter(b, entity(user=None), controller_mutation_rate=10).error_code == 0
    # Stored where Kafka stores them (a user sanitized, a default as <default>).
    assert json.loads(cluster.znode("/config/clients/reporting") or b"")["config"] == {
        "producer_byte_rate": str(2 * MB)
    }
    assert json.loads(cluster.znode("/config/users/bob%40corp/clients/<default>") or b"")[
        "config"
    ] == {"consumer_byte_rate": str(MB), "request_percentage": "25.5"}
    everything = found(describe(b, []))
    assert everything[(("client-id", "reporting"),)] == {"producer_byte_rate": 2 * MB}
    assert everything[(("user", "bob@corp"), ("client-id", None))] == {
        "consumer_byte_rate": MB, "request_percentage": 25.5,
    }  # fmt: skip
    assert everything[(("user", None),)] == {"controller_mutation_rate": 10.0}
    # Match types: exact (0), default (1), any named (2); strict leaves out entities
    # with other parts.
    assert list(found(describe(b, [("user", 0, "bob@corp")]))) == [
        (("user", "bob@corp"), ("client-id", None))
    ]
    assert list(found(describe(b, [("user", 0, "bob@corp")], strict=True))) == []
    assert list(found(describe(b, [("user", 1, None)], strict=True))) == [(("user", None),)]
    assert (("client-id", "reporting"),) in found(describe(b, [("client-id", 2, None)], True))
    assert (("user", None),) not in found(describe(b, [("client-id", 2, None)]))
    # Removing a key leaves the others; validate_only changes nothing.
    assert (
        alter(b, entity(user="bob@corp", client_id=None), request_percentage=None).error_code == 0
    )
    assert alter(b, entity(client_id="reporting"), True, producer_byte_rate=None).error_code == 0
    everything = found(describe(b, []))
    assert everything[(("user", "bob@corp"), ("client-id", None))] == {"consumer_byte_rate": MB}
    assert (("client-id", "reporting"),) in everything
    for ent in (entity(client_id="reporting"), entity(user="bob@corp", client_id=None),
                entity(user=None)):  # fmt: skip
        for key in ("producer_byte_rate", "consumer_byte_rate", "controller_mutation_rate"):
            alter(b, ent, **{key: None})
    assert found(describe(b, [])) == {}


@pytest.mark.parametrize(
    ("ent", "quotas", "message"),
    [
        (entity(client_id="x"), {"bogus_rate": 1.0}, "Invalid configuration key bogus_rate"),
        (entity(client_id="x"), {"producer_byte_rate": -1.0}, "must be greater than 0"),
        (entity(client_id="x"), {"producer_byte_rate": 10.5}, "cannot be a fractional value"),
        ([], {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
        (entity(client_id=""), {"producer_byte_rate": 1.0}, "Empty client-id not supported"),
        (entity(group="g"), {"producer_byte_rate": 1.0}, "Unhandled client quota entity type"),
    ],
)
def test_bad_alterations_get_invalid_request(
    cluster: LocalCluster, ent: list[dict[str, Any]], quotas: dict[str, float], message: str
) -> None:
    answer = alter(cluster.bootstrap_of(1), ent, **quotas)
    assert answer.error_code == ErrorCode.invalid_request
    assert message in answer.error_message
    assert cluster.znode("/config/clients/x") is None


def test_bad_filters_are_refused(cluster: LocalCluster) -> None:
    b = cluster.bootstrap_of(1)
    assert describe(b, [("user", 2, None), ("user", 0, "a")]).error_code == (
        ErrorCode.invalid_request
    )
    assert describe(b, [("group", 2, None)]).error_code == ErrorCode.unsupported_version


def test_a_producer_over_its_quota_is_throttled_and_another_is_not(cluster: LocalCluster) -> None:
    b = cluster.bootstrap_of(1)
    assert alter(b, entity(client_id="slow-producer"), producer_byte_rate=MB).error_code == 0
    slow, fast = Measured(), Measured()
    pairs = [(producer(b, "slow-producer", slow), slow), (producer(b, "fast-producer", fast), fast)]
    scraped: list[str] = []

    def scrape() -> None:
        with urllib.request.urlopen(cluster.metrics_url(1), timeout=10) as r:
            scraped.append(r.read().decode())

    start = produce_for(3.0, "on-1", *pairs, then=scrape)
    # The first second may go in one burst (a window's worth); after it, the rate
    # is the quota's.
    assert 0.5 * MB < slow.rate(start, 1.0, 3.0) < 1.5 * MB
    assert slow.max_throttle_ms > 0
    assert fast.rate(start, 1.0, 3.0) > 2 * MB
    assert fast.max_throttle_ms == 0
    # The broker's metrics show the quota'd client's rate and throttle time (the
    # mean over the quota window), while it produces.
    lines = [x for x in scraped[0].splitlines() if 'client_id="slow-producer"' in x]
    values = {x.split("{")[0]: float(x.rsplit(" ", 1)[1]) for x in lines}
    assert values["kafka_server_produce_throttle_time"] > 0
    # (over two 1 s samples a few 1 MB batches are a bumpy rate: only its presence)
    assert values["kafka_server_produce_byte_rate"] > 0
    alter(b, entity(client_id="slow-producer"), producer_byte_rate=None)


def test_a_consumer_over_its_quota_is_throttled(cluster: LocalCluster) -> None:
    b = cluster.bootstrap_of(1)
    fill = Measured()
    p = producer(b, "filler", fill)  # small batches: a fetch returns whole ones
    for _ in range(400):  # 4 MB
        while True:
            try:
                p.produce("to-consume", VALUE)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(30) == 0
    assert alter(b, entity(client_id="slow-consumer"), consumer_byte_rate=MB).error_code == 0
    measured = Measured()
    c = Consumer({
        "bootstrap.servers": b, "client.id": "slow-consumer", "group.id": "quota-test",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "statistics.interval.ms": 200, "stats_cb": measured.stats,
        # Fetches small beside the quota: one of a whole window's worth, refused
        # (throttled fetches answer with nothing), would halve the rate measured.
        "max.partition.fetch.bytes": 128 * 1024,
    })  # fmt: skip
    try:
        # Assigned, not subscribed: no group to join first.
        c.assign([TopicPartition("to-consume", 0, OFFSET_BEGINNING)])
        start = time.monotonic()
        first: float | None = None
        while time.monotonic() - start < 8 and (first is None or time.monotonic() - first < 3.0):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                first = first or time.monotonic()
                measured.delivered.append((time.monotonic(), len(m.value())))
    finally:
        c.close()
    assert first is not None
    assert 0.4 * MB < measured.rate(first, 1.0, 3.0) < 1.6 * MB
    assert measured.max_throttle_ms > 0
    alter(b, entity(client_id="slow-consumer"), consumer_byte_rate=None)


def test_a_sasl_users_quota_and_the_default_client_quota(cluster: LocalCluster) -> None:
    b = cluster.bootstrap_of(1)
    assert alter(b, entity(user="alice"), producer_byte_rate=MB // 2).error_code == 0
    alice = Measured()
    conf = cluster.sasl_client_config("alice", "SCRAM-SHA-256")
    p = producer(conf.pop("bootstrap.servers"), "any-client", alice, **conf)
    produce_for(1.0, "on-1", (p, alice), drain=False)
    assert alice.max_throttle_ms > 0
    alter(b, entity(user="alice"), producer_byte_rate=None)
    # The default client-id quota holds any client without one of its own.
    assert alter(b, entity(client_id=None), producer_byte_rate=MB // 2).error_code == 0
    try:
        someone = Measured()
        produce_for(1.0, "on-1", (producer(b, "someone", someone), someone), drain=False)
        assert someone.max_throttle_ms > 0
    finally:
        alter(b, entity(client_id=None), producer_byte_rate=None)


def test_controller_mutations_over_the_quota_are_refused(cluster: LocalCluster) -> None:
    b = cluster.bootstrap_of(1)
    # 1 partition/s: a burst of 2 (two windows of 1 s).
    assert alter(b, entity(client_id="mutator"), controller_mutation_rate=1.0).error_code == 0
    # Brokers learn of it from the change notification, a moment later (as in Kafka).
    assert wait_for(lambda: cluster.cluster.broker(1).quotas.controller_mutation.enabled, 10)
    try:
        with WireClient(b, client_id="mutator") as w:

            def create(name: str) -> Any:
                topic = {"name": name, "num_partitions": 4, "replication_factor": 1}
                return w.request(rq.request(ApiKey.CREATE_TOPICS, 7, timeout=10_000,
                                            topics=[topic]))  # fmt: skip

            first = create("mutated-1")
            assert first.topics[0].error_code == ErrorCode.none
            second = create("mutated-2")
            assert second.topics[0].error_code == ErrorCode.throttling_quota_exceeded
            assert second.throttle_time.total_seconds() > 0
    finally:
        alter(b, entity(client_id="mutator"), controller_mutation_rate=None)


def test_quotas_reach_every_broker_and_outlive_a_restart(cluster: LocalCluster) -> None:
    """Set through broker 1, a quota holds a producer of broker 2's partition,
    before and after broker 2 restarts."""
    assert alter(cluster.bootstrap_of(1), entity(client_id="everywhere"),
                 producer_byte_rate=MB // 2).error_code == 0  # fmt: skip
    try:
        broker2 = cluster.cluster.broker(2)
        assert wait_for(lambda: broker2.quotas.produce.enabled, 10)
        cluster.kill(2)
        cluster.restart(2)
        m = Measured()
        produce_for(1.0, "on-2", (producer(cluster.bootstrap, "everywhere", m), m), drain=False)
        assert m.max_throttle_ms > 0
    finally:
        alter(cluster.bootstrap_of(1), entity(client_id="everywhere"), producer_byte_rate=None)


def test_a_request_quota_throttles_and_mutes_the_connection(cluster: LocalCluster) -> None:
    """KIP-219: the answer carries the throttle time and goes out at once; the
    broker then reads nothing more from that client until the time has passed."""
    b = cluster.bootstrap_of(1)
    # A thousandth of a percent of the broker's time: any request is over it, and
    # a request quota throttles for at most one window (1 s).
    assert alter(b, entity(client_id="busy"), request_percentage=0.001).error_code == 0
    assert wait_for(lambda: cluster.cluster.broker(1).quotas.request.enabled, 10)
    try:
        with WireClient(b, client_id="busy") as w:
            w.send_raw(w.encode(rq.metadata("on-1")) + w.encode(rq.metadata("on-1")))
            first_id = w.correlation_id - 1
            first = w.read_response(ApiKey.METADATA, 12, first_id)
            answered = time.monotonic()
            assert first.throttle_time.total_seconds() == 1.0
            second = w.read_response(ApiKey.METADATA, 12)
            assert time.monotonic() - answered > 0.8
            assert second.throttle_time.total_seconds() > 0
        # Another client is not held up.
        with WireClient(b, client_id="idle") as w:
            assert w.request(rq.metadata("on-1")).throttle_time.total_seconds() == 0
    finally:
        alter(b, entity(client_id="busy"), request_percentage=None)
