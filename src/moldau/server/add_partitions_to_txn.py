"""How a partition leader asks a transaction coordinator on another broker whether
partitions are in a producer's transaction (KIP-890 part 1; Kafka's
AddPartitionsToTxnManager): the questions for one coordinator are batched into one
AddPartitionsToTxn (verify only) request, with at most one request in flight per
coordinator; what is asked while one is in flight goes in the next.

The answers are the coordinator's error codes per partition (a partition absent
from them is verified, as Kafka reads them); failures of the request itself become
errors of every partition it asked about: NETWORK_EXCEPTION when the coordinator
cannot be reached or does not answer in time, its top-level error otherwise."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_entity, decode_response, encode_body, request_class
from moldau.protocol.errors import ErrorCode
from moldau.protocol.wire import DecodeError
from moldau.server.control_client import NetworkTransport
from moldau.storage.partition_name import TopicPartition, by_topic
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

# v4 batches transactions and has VerifyOnly; v5 lets the coordinator answer
# TRANSACTION_ABORTABLE. Kafka's brokers send the newest both sides know.
VERIFY_VERSION = 5

Errors = dict[TopicPartition, ErrorCode]


@dataclass(frozen=True, slots=True)
class TxnToVerify:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]

    def failed(self, error: ErrorCode) -> Errors:
        return dict.fromkeys(self.partitions, error)


# The coordinator's answer to one request: each transaction's partition errors, or
# the request's own error. Raises ConnectionError/TimeoutError if none came.
Answer = dict[str, Errors] | ErrorCode
Send = Callable[[int, list[TxnToVerify]], Awaitable[Answer]]


class _Waiting:
    __slots__ = ("future", "txn")

    def __init__(self, txn: TxnToVerify, future: asyncio.Future[Errors]) -> None:
        self.txn = txn
        self.future = future

    def answer(self, errors: Errors) -> None:
        if not self.future.done():
            self.future.set_result(errors)


class AddPartitionsToTxnManager:
    def __init__(self, send: Send) -> None:
        self._send = send
        # Per coordinator broker: what the next request asks, by transactional id.
        self._pending: dict[int, dict[str, _Waiting]] = {}
        self._inflight: dict[int, dict[str, _Waiting]] = {}
        # The brokers a task is sending to: never two requests in flight to one.
        self._draining: set[int] = set()
        self._tasks = TaskOwner("add-partitions-to-txn")
        self._closed = False

    def verify(self, broker_id: int, txn: TxnToVerify) -> asyncio.Future[Errors]:
        """Ask `broker_id`, the coordinator of `txn`, which of its partitions are not
        in the transaction: the future gets their errors (empty: all verified)."""
        future: asyncio.Future[Errors] = asyncio.get_running_loop().create_future()
        waiting = _Waiting(txn, future)
        if self._closed:
            waiting.answer(txn.failed(ErrorCode.network_exception))
            return future
        pending = self._pending.setdefault(broker_id, {})
        queued = pending.get(txn.transactional_id)
        if queued is not None:
            # One question per transactional id and request (Kafka's addTxnData): a
            # newer epoch fences the queued one; the same epoch is a retry, and the
            # queued one is told to retry too; an older epoch is itself fenced.
            if txn.producer_epoch < queued.txn.producer_epoch:
                waiting.answer(txn.failed(ErrorCode.invalid_producer_epoch))
                return future
            error = (
                ErrorCode.invalid_producer_epoch
                if queued.txn.producer_epoch < txn.producer_epoch
                else ErrorCode.network_exception
            )
            queued.answer(queued.txn.failed(error))
        pending[txn.transactional_id] = waiting
        if broker_id not in self._draining:
            self._draining.add(broker_id)
            self._tasks.spawn(self._drain(broker_id), f"verify-{broker_id}")
        return future

    async def _drain(self, broker_id: int) -> None:
        """Send what is pending for `broker_id`, one request at a time, until none is."""
        try:
            while batch := self._pending.pop(broker_id, None):
                self._inflight[broker_id] = batch
                try:
                    answer = await self._ask(broker_id, [w.txn for w in batch.values()])
                except Exception:
                    log.exception("AddPartitionsToTxn to broker %d failed", broker_id)
                    answer = ErrorCode.unknown_server_error
                # (Cancelled: `close` answers the batch.)
                del self._inflight[broker_id]
                self._answer(batch, answer)
        finally:
            self._draining.discard(broker_id)

    @staticmethod
    def _answer(batch: dict[str, _Waiting], answer: Answer) -> None:
        for txn_id, waiting in batch.items():
            if isinstance(answer, ErrorCode):
                waiting.answer(waiting.txn.failed(answer))
            else:
                # A transaction the answer leaves out was not verified: retried.
                errors = answer.get(txn_id)
                if errors is None:
                    errors = waiting.txn.failed(ErrorCode.network_exception)
                waiting.answer(errors)

    async def _ask(self, broker_id: int, txns: list[TxnToVerify]) -> Answer:
        try:
            answer = await self._send(broker_id, txns)
        except (OSError, TimeoutError, DecodeError) as e:
            log.warning("AddPartitionsToTxn to broker %d failed: %s", broker_id, e)
            return ErrorCode.network_exception
        if answer == ErrorCode.unsupported_version:
            # A coordinator that cannot verify: the writes go ahead unverified (Kafka).
            return {t.transactional_id: {} for t in txns}
        if answer == ErrorCode.cluster_authorization_failed:
            # Not the producer's business: its write is simply not verified.
            return ErrorCode.invalid_txn_state
        return answer

    async def close(self) -> None:
        """Stop sending; whoever still waits, or asks later, is told to retry."""
        self._closed = True
        await self._tasks.close()
        for batches in (self._pending, self._inflight):
            for batch in batches.values():
                for waiting in batch.values():
                    waiting.answer(waiting.txn.failed(ErrorCode.network_exception))
            batches.clear()


class NetworkVerifySender:
    """`Send` over the inter-broker listener: one AddPartitionsToTxn, verify only."""

    def __init__(self, transport: NetworkTransport) -> None:
        self._transport = transport

    async def __call__(self, broker_id: int, txns: list[TxnToVerify]) -> Answer:
        cls = request_class(ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION)
        assert cls is not None
        request = build_entity(cls, {"transactions": [_txn_data(t) for t in txns]})
        body = await self._transport.request(
            broker_id, ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, encode_body(request)
        )
        response: Any = decode_response(ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, body)
        if response.error_code != ErrorCode.none:
            return ErrorCode(response.error_code)
        return {
            r.transactional_id: {
                TopicPartition(t.name, p.partition_index): ErrorCode(p.partition_error_code)
                for t in r.topic_results
                for p in t.results_by_partition
                if p.partition_error_code != ErrorCode.none
            }
            for r in response.results_by_transaction
        }


def _txn_data(txn: TxnToVerify) -> dict[str, object]:
    topics = by_topic(txn.partitions)
    return {
        "transactional_id": txn.transactional_id,
        "producer_id": txn.producer_id,
        "producer_epoch": txn.producer_epoch,
        "verify_only": True,
        "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
    }
