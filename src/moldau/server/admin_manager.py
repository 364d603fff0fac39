"""Admin requests on a broker (Kafka's ZkAdminManager): validate and write through
TopicAdmin, then wait, in a purgatory, until this broker's metadata shows the
result (leaders elected, or the topic gone), or the request's timeout passes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from moldau.config.broker import BrokerConfig
from moldau.controller.admin import NewTopic, TopicAdmin
from moldau.controller.assignment import BrokerMetadata
from moldau.metadata.znodes import TopicAssignment
from moldau.protocol.errors import ErrorCode
from moldau.replication.purgatory import DelayedOperation, DelayedOperationPurgatory, Timer
from moldau.server.metadata_cache import MetadataCache

_KEY = "metadata"


class DelayedMetadataCondition(DelayedOperation):
    """Waits until a condition on the metadata cache holds."""

    def __init__(self, delay_ms: int, condition: Callable[[], bool]) -> None:
        super().__init__(delay_ms)
        self.condition = condition
        self.future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def try_complete(self) -> bool:
        if self.condition():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.condition())


class AdminManager:
    def __init__(
        self, config: BrokerConfig, admin: TopicAdmin, cache: MetadataCache, timer: Timer
    ) -> None:
        self.config = config
        self.admin = admin
        self.cache = cache
        self.purgatory: DelayedOperationPurgatory[str, DelayedMetadataCondition] = (
            DelayedOperationPurgatory("admin", timer)
        )
        cache.listeners.append(self._on_metadata_update)

    def _on_metadata_update(self) -> None:
        self.purgatory.check_and_complete(_KEY)

    def live_brokers(self) -> list[BrokerMetadata]:
        return [BrokerMetadata(b.id, b.rack) for b in self.cache.brokers.values()]

    async def wait_until(self, condition: Callable[[], bool], timeout_ms: int) -> bool:
        """True once `condition` holds on this broker's metadata; False on timeout."""
        if condition():
            return True
        if timeout_ms <= 0:
            return False
        op = DelayedMetadataCondition(timeout_ms, condition)
        self.purgatory.try_complete_else_watch(op, [_KEY])
        return await op.future

    async def create_topic(
        self, topic: NewTopic, timeout_ms: int, validate_only: bool = False
    ) -> tuple[TopicAssignment, ErrorCode]:
        """Create; the error is REQUEST_TIMED_OUT if leaders are not known in time
        (the topic still gets created, as with Kafka)."""
        assignment = await self.admin.create_topic(
            topic,
            self.live_brokers(),
            self.config["num.partitions"],
            self.config["default.replication.factor"],
            validate_only,
        )
        if validate_only or timeout_ms <= 0:
            return assignment, ErrorCode.none
        n = len(assignment.partitions)
        done = await self.wait_until(lambda: self.cache.has_leaders(topic.name, n), timeout_ms)
        return assignment, ErrorCode.none if done else ErrorCode.request_timed_out

    async def create_partitions(
        self,
        topic: str,
        count: int,
        assignments: list[list[int]] | None,
        timeout_ms: int,
        validate_only: bool,
    ) -> ErrorCode:
        await self.admin.create_partitions(
            topic, count, assignments, self.live_brokers(), validate_only
        )
        if validate_only or timeout_ms <= 0:
            return ErrorCode.none
        done = await self.wait_until(lambda: self.cache.has_leaders(topic, count), timeout_ms)
        return ErrorCode.none if done else ErrorCode.request_timed_out

    async def delete_topic(self, topic: str, timeout_ms: int) -> ErrorCode:
        await self.admin.delete_topic(topic)
        done = await self.wait_until(lambda: not self.cache.contains_topic(topic), timeout_ms)
        return ErrorCode.none if done else ErrorCode.request_timed_out
