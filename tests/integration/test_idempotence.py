"""Idempotent producers: retries after lost responses write nothing twice, sequence
gaps and old epochs are refused, and producer ids idle for producer.id.expiration.ms
are forgotten."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from moldau.clock import FakeClock
from moldau.config.broker import BrokerConfig
from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import build_batch
from moldau.server.embedded import METADATA_DIR, EmbeddedCluster
from moldau.storage.partition_name import TopicPartition
from tests.integration import requests as rq
from tests.integration.clients import confluent_consume, create_topic
from tests.integration.kafka_wire import WireClient
from tests.integration.proxy import proxied_broker

pytestmark = pytest.mark.integration


def test_lost_produce_responses_cause_no_duplicates(tmp_path: Path, topic_name: str) -> None:
    with proxied_broker(tmp_path / "data") as (bootstrap, proxy):
        create_topic(bootstrap, topic_name)
        acked: list[int] = []
        errors: list[object] = []
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "retry.backoff.ms": 50,
            }
        )

        def done(err: object, msg: object) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked.append(msg.offset())  # type: ignore[attr-defined]

        for i in range(3000):
            if i in (500, 1500, 2500):
                p.flush(10)
                proxy.drop_next(1)  # the next produce response is lost
            p.produce(topic_name, value=b"%d" % i, partition=0, on_delivery=done)
            p.poll(0)
        assert p.flush(30) == 0
        assert proxy.dropped == 3
        assert not errors
        assert sorted(acked) == list(range(3000))
        got = confluent_consume(bootstrap, topic_name, 3000)
        assert [v for *_, v, _ in got] == [b"%d" % i for i in range(3000)]
        with WireClient(bootstrap) as c:  # nothing extra after them
            latest = c.request(rq.list_offsets(topic_name, 0, -1))
            assert latest.topics[0].partitions[0].offset == 3000


def test_sequence_gaps_duplicates_and_old_epochs_on_the_wire(
    bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name)
    with WireClient(bootstrap) as c:

        def init_producer_id():  # type: ignore[no-untyped-def]
            return c.request(
                rq.request(
                    22, 4, transactional_id=None, transaction_timeout=60000,
                    producer_id=-1, producer_epoch=-1,
                )
            )  # fmt: skip

        init = init_producer_id()
        assert init.error_code == ErrorCode.none
        pid = init.producer_id
        other = init_producer_id()
        assert other.producer_id != pid

        def send(seq: int, epoch: int = 0, n: int = 2) -> tuple[int, int]:
            batch = build_batch(
                [(None, b"x")] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq
            )
            r = c.request(rq.produce(topic_name, 0, batch, acks=-1))
            p = r.responses[0].partition_responses[0]
            return int(p.error_code), int(p.base_offset)

        assert send(0) == (ErrorCode.none, 0)
        assert send(2) == (ErrorCode.none, 2)
        assert send(0) == (ErrorCode.none, 0)  # a retry: acknowledged at its first offset
        assert send(7)[0] == ErrorCode.out_of_order_sequence_number
        assert send(4, epoch=1)[0] == ErrorCode.out_of_order_sequence_number
        assert send(0, epoch=1) == (ErrorCode.none, 4)
        assert send(2, epoch=0)[0] == ErrorCode.invalid_producer_epoch
        latest = c.request(rq.list_offsets(topic_name, 0, -1))
        assert latest.topics[0].partitions[0].offset == 6


def test_the_broker_forgets_producer_ids_idle_for_producer_id_expiration_ms(
    tmp_path: Path, topic_name: str
) -> None:
    """The broker's periodic check (every producer.id.expiration.check.interval.ms)
    expires producers by its own clock: a producer back after a day starts afresh,
    as on Kafka, where before the expiry its sequence gap was refused."""
    day = 86_400_000
    clock = FakeClock(int(time.time() * 1000))
    config = BrokerConfig({
        "broker.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path),
        "producer.id.expiration.ms": str(day), "producer.id.expiration.check.interval.ms": "20",
    })  # fmt: skip

    def send(bootstrap: str, seq: int) -> int:
        with WireClient(bootstrap) as c:
            batch = build_batch(
                [(None, b"x")], timestamp=clock.milliseconds(), producer_id=77,
                producer_epoch=0, base_sequence=seq,
            )  # fmt: skip
            r = c.request(rq.produce(topic_name, 0, batch, acks=-1))
            return int(r.responses[0].partition_responses[0].error_code)

    async def main() -> None:
        cluster = EmbeddedCluster([config], tmp_path / METADATA_DIR, clock)
        await cluster.start()
        broker = cluster.brokers[0]
        bootstrap = f"127.0.0.1:{broker.port}"
        try:
            await asyncio.to_thread(create_topic, bootstrap, topic_name)
            assert await asyncio.to_thread(send, bootstrap, 0) == ErrorCode.none
            gap = await asyncio.to_thread(send, bootstrap, 5)
            assert gap == ErrorCode.out_of_order_sequence_number
            clock.advance(day)
            state = broker.log_manager.logs[TopicPartition(topic_name, 0)].producer_state
            async with asyncio.timeout(10):  # the next check, 20 ms of real time away
                while state.producers:
                    await asyncio.sleep(0.01)
            assert await asyncio.to_thread(send, bootstrap, 5) == ErrorCode.none
        finally:
            await cluster.shutdown()

    asyncio.run(main())
