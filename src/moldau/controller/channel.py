"""How the controller reaches brokers: one ordered queue per broker
(ControllerChannelManager), and the batch of requests one state change produces
(ControllerBrokerRequestBatch, as Kafka builds it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from moldau.controller.context import ControllerContext
from moldau.metadata.znodes import LeaderAndIsr, LeaderIsrAndControllerEpoch
from moldau.protocol.control import (
    ControlRequest,
    ControlResponse,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LiveLeader,
    StopReplicaPartitionState,
    StopReplicaRequest,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from moldau.storage.partition_name import TopicPartition
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
MAX_RETRY_BACKOFF_S = 1.0

# Called with (broker id, response) on the controller's side.
Callback = Callable[[int, ControlResponse], None]


class BrokerTransport(Protocol):
    """Delivers a control request to a broker and returns its response."""

    async def send(self, broker_id: int, request: ControlRequest) -> ControlResponse: ...


class ControlRequestHandler(Protocol):
    async def handle_control_request(self, request: ControlRequest) -> ControlResponse: ...


class InProcessTransport:
    """Delivers control requests to brokers living in this process (embedded mode).
    `for_broker` gives one broker's view, which fails like a network when the
    other end is unreachable (LocalCluster.isolate)."""

    def __init__(
        self,
        brokers: dict[int, ControlRequestHandler] | None = None,
        reachable: Callable[[int], bool] | None = None,
    ) -> None:
        self.brokers: dict[int, ControlRequestHandler] = {} if brokers is None else brokers
        self._reachable = reachable

    def for_broker(self, reachable: Callable[[int], bool]) -> InProcessTransport:
        return InProcessTransport(self.brokers, reachable)

    async def send(self, broker_id: int, request: ControlRequest) -> ControlResponse:
        if self._reachable is not None and not self._reachable(broker_id):
            raise ConnectionError(f"broker {broker_id} is unreachable")
        handler = self.brokers.get(broker_id)
        if handler is None:
            raise ConnectionError(f"broker {broker_id} is not running in this process")
        return await handler.handle_control_request(request)


class ControllerChannelManager:
    def __init__(self, transport: BrokerTransport) -> None:
        self._transport = transport
        self._queues: dict[int, asyncio.Queue[tuple[ControlRequest, Callback | None]]] = {}
        self._tasks = TaskOwner("controller-channel")

    def add_broker(self, broker_id: int) -> None:
        if broker_id in self._queues:
            return
        queue: asyncio.Queue[tuple[ControlRequest, Callback | None]] = asyncio.Queue()
        self._queues[broker_id] = queue
        self._tasks.spawn(self._send_loop(broker_id, queue), f"send-{broker_id}")

    def remove_broker(self, broker_id: int) -> None:
        """Stop sending to `broker_id`: what waits in its queue is dropped (Kafka's
        removeExistingBroker clears it), being meant for a registration that is gone
        or from a controller that resigned."""
        queue = self._queues.pop(broker_id, None)
        if queue is not None:
            while not queue.empty():
                queue.get_nowait()
            queue.put_nowait((None, None))  # type: ignore[arg-type]  # stop marker

    def remove_all_brokers(self) -> None:
        for broker_id in list(self._queues):
            self.remove_broker(broker_id)

    def send(
        self, broker_id: int, request: ControlRequest, callback: Callback | None = None
    ) -> None:
        queue = self._queues.get(broker_id)
        if queue is None:
            log.warning(
                "not sending %s to broker %d: it is not live", type(request).__name__, broker_id
            )
            return
        queue.put_nowait((request, callback))

    async def _send_loop(
        self, broker_id: int, queue: asyncio.Queue[tuple[ControlRequest, Callback | None]]
    ) -> None:
        while True:
            request, callback = await queue.get()
            if request is None:
                return
            try:
                response = await self._send_until_done(broker_id, queue, request)
            except Exception:
                # A broker's handler failed in a way it should not have: log it and
                # go on with the next request rather than go silent for this broker.
                log.exception("%s to broker %d failed", type(request).__name__, broker_id)
                continue
            if response is not None and callback is not None:
                callback(broker_id, response)

    async def _send_until_done(
        self,
        broker_id: int,
        queue: asyncio.Queue[tuple[ControlRequest, Callback | None]],
        request: ControlRequest,
    ) -> ControlResponse | None:
        """Send, retrying with a backoff while the broker is live (as Kafka's
        RequestSendThread does); a broker that failed is removed from the channel
        and its failure handled through its registration znode vanishing."""
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                return await self._transport.send(broker_id, request)
            except (TimeoutError, OSError, ConnectionError) as e:
                if self._queues.get(broker_id) is not queue:
                    log.info("dropping %s to broker %d: it left", type(request).__name__, broker_id)
                    return None
                log.warning("request to broker %d failed (%s); retrying", broker_id, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_RETRY_BACKOFF_S)

    async def close(self) -> None:
        self._queues.clear()
        await self._tasks.close()


@dataclass
class ControllerBrokerRequestBatch:
    """Requests accumulated during one controller event, sent together at its end."""

    controller_id: int
    context: ControllerContext
    channel: ControllerChannelManager
    leader_and_isr: dict[int, dict[TopicPartition, LeaderAndIsrPartitionState]] = field(
        default_factory=dict
    )
    stop_replica: dict[int, dict[TopicPartition, StopReplicaPartitionState]] = field(
        default_factory=dict
    )
    stop_replica_callbacks: dict[int, Callback] = field(default_factory=dict)
    # Hears every LeaderAndIsr response (the controller learns of offline log dirs).
    leader_and_isr_callback: Callback | None = None
    update_metadata_brokers: set[int] = field(default_factory=set)
    update_metadata_partitions: dict[TopicPartition, UpdateMetadataPartitionState] = field(
        default_factory=dict
    )

    def add_leader_and_isr(
        self,
        broker_ids: set[int],
        tp: TopicPartition,
        state: LeaderIsrAndControllerEpoch,
        replicas: list[int],
        is_new: bool,
    ) -> None:
        li = state.leader_and_isr
        reassignment = self.context.reassignments.get(tp)
        adding = reassignment.adding if reassignment else ()
        removing = reassignment.removing if reassignment else ()
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            self.leader_and_isr.setdefault(broker_id, {})[tp] = LeaderAndIsrPartitionState(
                tp.topic,
                tp.partition,
                state.controller_epoch,
                li.leader,
                li.leader_epoch,
                li.isr,
                li.partition_epoch,
                tuple(replicas),
                adding,
                removing,
                is_new=is_new,
            )
        self.add_update_metadata(self.context.live_or_shutting_down_broker_ids, [tp])

    def add_stop_replica(
        self,
        broker_ids: set[int],
        tp: TopicPartition,
        delete_partition: bool,
        callback: Callback | None = None,
    ) -> None:
        leadership = self.context.leadership.get(tp)
        epoch = leadership.leader_and_isr.leader_epoch if leadership else -1
        if delete_partition:
            epoch = -2  # Kafka's EpochDuringDelete: delete whatever the epoch
        for broker_id in broker_ids:
            self.stop_replica.setdefault(broker_id, {})[tp] = StopReplicaPartitionState(
                tp.topic, tp.partition, epoch, delete_partition
            )
            if callback is not None:
                self.stop_replica_callbacks[broker_id] = callback

    def add_update_metadata(self, broker_ids: set[int], partitions: list[TopicPartition]) -> None:
        self.update_metadata_brokers |= {b for b in broker_ids if b >= 0}
        ctx = self.context
        for tp in partitions:
            leadership = ctx.leadership.get(tp)
            if leadership is None:
                continue
            li = leadership.leader_and_isr
            leader = li.leader
            if ctx.is_topic_queued_for_deletion(tp.topic):
                leader = LeaderAndIsr.LEADER_DURING_DELETE
            replicas = ctx.assignments.get(tp, [])
            self.update_metadata_partitions[tp] = UpdateMetadataPartitionState(
                tp.topic,
                tp.partition,
                leadership.controller_epoch,
                leader,
                li.leader_epoch,
                li.isr,
                li.partition_epoch,
                tuple(replicas),
                tuple(r for r in replicas if not ctx.is_replica_online(r, tp, True)),
            )

    def clear(self) -> None:
        """Forget what was added (an event failed half way, or the controller
        resigned): none of it may go out later, under another epoch."""
        self.leader_and_isr = {}
        self.stop_replica = {}
        self.stop_replica_callbacks = {}
        self.update_metadata_brokers = set()
        self.update_metadata_partitions = {}

    def send(self) -> None:
        """Send what was added, to brokers registered now (as Kafka's batch, which
        leaves out the others), each request carrying the broker's epoch."""
        ctx = self.context
        live_leaders = tuple(
            LiveLeader(b.id, b.endpoints[0].host, b.endpoints[0].port)
            for b in ctx.live_brokers.values()
        )
        for broker_id, states in self.leader_and_isr.items():
            if broker_id not in ctx.live_brokers:
                continue
            topics = {tp.topic for tp in states}
            self.channel.send(
                broker_id,
                LeaderAndIsrRequest(
                    self.controller_id,
                    ctx.epoch,
                    ctx.live_brokers[broker_id].epoch,
                    tuple(states.values()),
                    {t: ctx.topic_ids[t] for t in topics if t in ctx.topic_ids},
                    live_leaders,
                ),
                self.leader_and_isr_callback,
            )
        if self.update_metadata_brokers:
            brokers = tuple(
                UpdateMetadataBroker(
                    b.id,
                    tuple(
                        UpdateMetadataEndpoint(ep.port, ep.host, ep.listener) for ep in b.endpoints
                    ),
                    b.rack,
                )
                for b in ctx.live_brokers.values()
            )
            partitions = tuple(self.update_metadata_partitions.values())
            topics = {p.topic for p in partitions}
            for broker_id in sorted(self.update_metadata_brokers):
                if broker_id not in ctx.live_brokers:
                    continue
                self.channel.send(
                    broker_id,
                    UpdateMetadataRequest(
                        self.controller_id,
                        ctx.epoch,
                        ctx.live_brokers[broker_id].epoch,
                        partitions,
                        brokers,
                        {t: ctx.topic_ids[t] for t in topics if t in ctx.topic_ids},
                    ),
                )
        for broker_id, stops in self.stop_replica.items():
            if broker_id not in ctx.live_brokers:
                continue
            self.channel.send(
                broker_id,
                StopReplicaRequest(
                    self.controller_id,
                    ctx.epoch,
                    ctx.live_brokers[broker_id].epoch,
                    tuple(stops.values()),
                ),
                self.stop_replica_callbacks.get(broker_id),
            )
        self.clear()
