"""KIP-890 part 1 on the wire, against a broker process: a transactional batch for a
partition its producer never added to the transaction is refused with the error of
the Produce version, appended once the partition is added; with
transaction.partition.verification.enable=false it is appended as before."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import build_batch
from moldau.testing.process import BrokerProcess
from tests.integration import requests as rq
from tests.integration.clients import create_topic
from tests.integration.kafka_wire import WireClient

pytestmark = pytest.mark.integration

NOT_YET = (
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
)


def find_coordinator(client: WireClient, txn_id: str) -> int:
    """The broker id of the transaction coordinator of `txn_id` (FindCoordinator, as
    clients ask it: the first time it creates __transaction_state)."""
    deadline = time.monotonic() + 30
    while True:
        found = client.request(rq.request(10, 3, key=txn_id, key_type=1))
        if found.error_code not in NOT_YET or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert found.error_code == ErrorCode.none, found
    return int(found.node_id)


class TxnProducer:
    """A transactional producer spelled out request by request; `client` is
    connected to its transaction coordinator."""

    def __init__(self, client: WireClient, txn_id: str) -> None:
        self.c = client
        self.txn_id = txn_id
        deadline = time.monotonic() + 30
        while True:
            r = self.c.request(
                rq.request(
                    22, 4, transactional_id=txn_id, transaction_timeout=60_000,
                    producer_id=-1, producer_epoch=-1,
                )
            )  # fmt: skip
            if r.error_code not in NOT_YET or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # the coordinator is still loading its partition
        assert r.error_code == ErrorCode.none, r
        self.pid, self.epoch = r.producer_id, r.producer_epoch
        self.seq = 0

    def produce(
        self, topic: str, version: int = 11, partition: int = 0, leader: WireClient | None = None
    ) -> Any:
        """Send one batch to the partition's `leader` (default: the coordinator's
        broker); its partition response."""
        batch = build_batch(
            [(None, b"v%d" % self.seq)],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            transactional=True,
        )
        r = (leader or self.c).request(
            rq.request(
                0, version, transactional_id=self.txn_id, acks=-1, timeout=5000,
                topic_data=[
                    {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
                ],
            )
        )  # fmt: skip
        p = r.responses[0].partition_responses[0]
        if p.error_code == ErrorCode.none:
            self.seq += 1
        return p

    def add_partition(self, topic: str, partition: int = 0) -> None:
        r = self.c.request(
            rq.request(
                24, 3, v3_and_below_transactional_id=self.txn_id,
                v3_and_below_producer_id=self.pid, v3_and_below_producer_epoch=self.epoch,
                v3_and_below_topics=[{"name": topic, "partitions": [partition]}],
            )
        )  # fmt: skip
        [result] = r.results_by_topic_v3_and_below
        assert result.results_by_partition[0].partition_error_code == ErrorCode.none

    def end(self, commit: bool) -> None:
        r = self.c.request(
            rq.request(
                26, 3, transactional_id=self.txn_id, producer_id=self.pid,
                producer_epoch=self.epoch, committed=commit,
            )
        )  # fmt: skip
        assert r.error_code == ErrorCode.none


def end_offset(c: WireClient, topic: str) -> int:
    r = c.request(rq.list_offsets(topic, 0, -1))
    return int(r.topics[0].partitions[0].offset)


def test_a_write_to_a_partition_not_in_the_transaction_is_refused(
    bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name)
    with WireClient(bootstrap) as c:
        find_coordinator(c, f"tx-{topic_name}")
        p = TxnProducer(c, f"tx-{topic_name}")
        refused = p.produce(topic_name, version=9)
        assert refused.error_code == ErrorCode.invalid_txn_state
        assert refused.error_message
        # Clients of Produce v11 (KIP-890) are told the transaction must abort.
        assert p.produce(topic_name, version=11).error_code == ErrorCode.transaction_abortable
        assert end_offset(c, topic_name) == 0

        p.add_partition(topic_name)
        first, second = p.produce(topic_name), p.produce(topic_name)
        assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
        assert (second.error_code, second.base_offset) == (ErrorCode.none, 1)
        p.end(commit=True)
        # Ended (its marker written at 2): the next transaction must add it again. Until
        # the commit completes, the coordinator answers CONCURRENT_TRANSACTIONS, which
        # the producer is told as the retriable NOT_ENOUGH_REPLICAS.
        deadline = time.monotonic() + 10
        while (code := p.produce(topic_name).error_code) == ErrorCode.not_enough_replicas:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert code == ErrorCode.transaction_abortable
        assert end_offset(c, topic_name) == 3


@pytest.fixture
def unverified_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", {"transaction.partition.verification.enable": "false"})
    try:
        with b:
            yield b
    finally:
        b.kill()


def test_with_verification_off_the_write_is_appended_unasked(
    unverified_broker: BrokerProcess, topic_name: str
) -> None:
    bootstrap = unverified_broker.bootstrap
    create_topic(bootstrap, topic_name)
    with WireClient(bootstrap) as c:
        find_coordinator(c, f"tx-{topic_name}")
        p = TxnProducer(c, f"tx-{topic_name}")
        written = p.produce(topic_name, version=9)
        assert (written.error_code, written.base_offset) == (ErrorCode.none, 0)
