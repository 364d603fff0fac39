"""The controller (Kafka's KafkaController, ZooKeeper mode).

Every broker runs one; the one that creates the ephemeral /controller node is
active. It is one task draining an event queue: store watches and broker responses
only enqueue events. Every store write it makes is conditional on the controller
epoch; a conflict means another controller exists, and this one resigns.

When the store's session expires, the queue is cleared and Expire handled first
(the event in progress is abandoned): the controller resigns; on the new session
the broker registers again and only then takes part in the election, as Kafka's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from moldau.clock import Clock
from moldau.controller.channel import (
    BrokerTransport,
    ControllerBrokerRequestBatch,
    ControllerChannelManager,
)
from moldau.controller.context import ControllerContext, PartitionReplica
from moldau.controller.events import (
    AlterPartitionReceived,
    ApiPartitionReassignment,
    AutoPreferredReplicaLeaderElection,
    BrokerChange,
    ControlledShutdownRequested,
    ControllerChange,
    ControllerEvent,
    ElectLeadersRequested,
    Expire,
    LeaderAndIsrResponseReceived,
    LogDirEventNotification,
    PartitionModifications,
    RegisterBrokerAndReelect,
    Startup,
    TopicChange,
    TopicDeletion,
    TopicDeletionStopReplicaResponseReceived,
    TopicUncleanLeaderElectionEnable,
    ZkPartitionReassignment,
)
from moldau.controller.partition_state_machine import (
    ElectionStrategy,
    PartitionStateMachine,
    refresh_leadership,
)
from moldau.controller.reassigner import PartitionReassigner
from moldau.controller.reassignment import ReplicaAssignment, invalid_target
from moldau.controller.rebalance import partitions_to_rebalance
from moldau.controller.replica_state_machine import ReplicaStateMachine
from moldau.controller.states import PartitionState, ReplicaState
from moldau.metadata.client import ControllerMovedError, MetadataClient
from moldau.metadata.store import BadVersionError, SessionState, StoreError, WatchedEvent
from moldau.metadata.znodes import LeaderAndIsr, LeaderIsrAndControllerEpoch
from moldau.protocol.control import (
    AlterPartitionItem,
    AlterPartitionResult,
    ControlResponse,
    LeaderAndIsrResponse,
    StopReplicaResponse,
)
from moldau.protocol.errors import ErrorCode
from moldau.storage.partition_name import TopicPartition
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

# How long a broker that could not register again on a new session waits to retry.
REGISTER_RETRY_S = 1.0


class NotControllerError(Exception):
    """This broker is not the active controller."""


@dataclass(frozen=True)
class LeaderRebalance:
    """auto.leader.rebalance.enable's two settings."""

    imbalance_percentage: int = 10
    check_interval_s: float = 300.0


class Controller:
    def __init__(
        self,
        broker_id: int,
        client: MetadataClient,
        transport: BrokerTransport,
        clock: Clock,
        unclean_election_enabled: Callable[[str], Awaitable[bool]],
        delete_topic_enable: bool = True,
        leader_rebalance: LeaderRebalance | None = None,
        register_broker: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`register_broker` registers the broker again on a new store session (the
        broker registers itself before it starts the controller)."""
        self.broker_id = broker_id
        self.leader_rebalance = leader_rebalance
        self.client = client
        self.clock = clock
        self.delete_topic_enable = delete_topic_enable
        self.ctx = ControllerContext()
        self.channel = ControllerChannelManager(transport)
        self.batch = ControllerBrokerRequestBatch(broker_id, self.ctx, self.channel)
        self.partition_sm = PartitionStateMachine(
            self.ctx, client, self.batch, unclean_election_enabled
        )
        self.replica_sm = ReplicaStateMachine(self.ctx, client, self.batch)
        self.reassigner = PartitionReassigner(
            self.ctx, client, self.batch, self.partition_sm, self.replica_sm
        )
        self.batch.leader_and_isr_callback = self._on_leader_and_isr_response
        self.active_controller_id: int | None = None
        self._queue: asyncio.Queue[ControllerEvent] = asyncio.Queue()
        self._tasks = TaskOwner("controller")
        self._topic_watches: dict[str, Callable[[WatchedEvent], None]] = {}
        self._register_broker = register_broker
        # Whether the broker is registered on the store's current session: only then
        # may it become controller (it would not count itself live otherwise).
        self._registered = True
        # The event being handled, in a task of its own that a session expiry cancels.
        self._processing: tuple[ControllerEvent, asyncio.Task[None]] | None = None
        self._handling: ControllerEvent | None = None
        # Set whenever the event queue is drained (for tests and orderly shutdown).
        self.idle = asyncio.Event()

    @property
    def is_active(self) -> bool:
        return self.active_controller_id == self.broker_id

    @property
    def processing(self) -> ControllerEvent | None:
        """The event being handled, once its handling has begun (for tests and
        diagnostics)."""
        return self._handling

    async def start(self) -> None:
        self.client.store.add_session_listener(self._on_session_state)
        self._tasks.spawn(self._run(), "events")
        if self.leader_rebalance is not None:
            self._tasks.spawn(self._leader_imbalance_timer(), "leader-imbalance-check")
        self.enqueue(Startup())

    async def _leader_imbalance_timer(self) -> None:
        assert self.leader_rebalance is not None
        while True:
            await asyncio.sleep(self.leader_rebalance.check_interval_s)
            if self.is_active:
                self.enqueue(AutoPreferredReplicaLeaderElection())

    async def close(self) -> None:
        """Stop processing; the /controller node goes away with the store session."""
        await self._tasks.close()
        await self.channel.close()
        self._resign()

    def enable_topic_unclean_leader_election(self, topic: str) -> None:
        if self.is_active:
            self.enqueue(TopicUncleanLeaderElectionEnable(topic))

    def enqueue(self, event: ControllerEvent) -> None:
        self.idle.clear()
        self._queue.put_nowait(event)

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            task = self._tasks.spawn(self._handle(event), type(event).__name__)
            self._processing = event, task
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # the controller is closing
                log.info("controller %d: %s abandoned: the session expired", self.broker_id,
                         event)  # fmt: skip
            finally:
                self._processing = None
            if self._queue.empty():
                self.idle.set()

    async def _handle(self, event: ControllerEvent) -> None:
        self._handling = event
        try:
            await self._process(event)
        except ControllerMovedError:
            log.info("controller %d: the controller epoch moved on; resigning", self.broker_id)
            await self._trigger_controller_move()
        except Exception:
            # Like Kafka's event manager: log the failure with its traceback and go
            # on with the next event rather than leave the cluster without one. What
            # the event added to the batch goes: the next event must not send it.
            log.exception("controller %d failed to process %s", self.broker_id, event)
            self.batch.clear()
        finally:
            self._handling = None

    async def _process(self, event: ControllerEvent) -> None:
        if isinstance(event, Expire):
            self.active_controller_id = None
            self._resign()
            return
        if isinstance(event, RegisterBrokerAndReelect):
            await self._register_and_reelect()
            return
        if isinstance(event, Startup | ControllerChange):
            await self._elect()
            return
        if not self.is_active:
            self._preempt(event)
            return
        if isinstance(event, BrokerChange):
            await self._process_broker_change()
        elif isinstance(event, TopicChange):
            await self._process_topic_change()
        elif isinstance(event, PartitionModifications):
            await self._process_partition_modifications(event.topic)
        elif isinstance(event, TopicDeletion):
            await self._process_topic_deletion()
        elif isinstance(event, TopicDeletionStopReplicaResponseReceived):
            await self._process_stop_replica_response(event.broker_id, event.response)
        elif isinstance(event, LogDirEventNotification):
            await self._process_log_dir_events()
        elif isinstance(event, LeaderAndIsrResponseReceived):
            await self._process_leader_and_isr_response(event.broker_id, event.response)
        elif isinstance(event, AlterPartitionReceived):
            await self._process_alter_partition(event)
        elif isinstance(event, ElectLeadersRequested):
            await self._process_elect_leaders(event)
        elif isinstance(event, AutoPreferredReplicaLeaderElection):
            await self._process_auto_preferred_election()
        elif isinstance(event, ControlledShutdownRequested):
            await self._process_controlled_shutdown(event)
        elif isinstance(event, ApiPartitionReassignment):
            await self._process_api_partition_reassignment(event)
        elif isinstance(event, ZkPartitionReassignment):
            await self._process_zk_partition_reassignment()
        elif isinstance(event, TopicUncleanLeaderElectionEnable):
            # Partitions left without a leader may now take any live replica.
            log.info("controller %d: unclean leader election enabled for %s", self.broker_id,
                     event.topic)  # fmt: skip
            await self.partition_sm.trigger_online_partition_state_change(event.topic)
            self.batch.send()

    @staticmethod
    def _preempt(event: ControllerEvent) -> None:
        """Answer whoever waits on `event`: this broker is not the controller."""
        if isinstance(event, AlterPartitionReceived) and not event.answer.done():
            event.answer.set_result((ErrorCode.not_controller, ()))
        if (
            isinstance(
                event,
                ElectLeadersRequested | ControlledShutdownRequested | ApiPartitionReassignment,
            )
            and not event.answer.done()
        ):
            event.answer.set_exception(NotControllerError())

    # -- the store's session -------------------------------------------------------------

    def _on_session_state(self, state: SessionState) -> None:
        if state == SessionState.EXPIRED:
            self._on_session_expired()
        else:
            self.enqueue(RegisterBrokerAndReelect())

    def _on_session_expired(self) -> None:
        """Kafka's beforeInitializingSession: clearAndPut(Expire), and the new session
        waits until it is handled. Here the store's requests go on in the new session,
        so the event in progress is cancelled instead (in Kafka its requests fail at
        once with SESSIONEXPIRED), and nothing more goes to the brokers: its watches
        (a BrokerChange before the ControllerChange) would be handled by a controller
        that is not one, from stale state."""
        log.warning("broker %d: the store session expired; resigning first", self.broker_id)
        self._registered = False
        self.active_controller_id = None
        self.channel.remove_all_brokers()
        while not self._queue.empty():
            self._preempt(self._queue.get_nowait())
        self.enqueue(Expire())
        if self._processing is not None:
            event, task = self._processing
            self._preempt(event)
            task.cancel()

    async def _register_and_reelect(self) -> None:
        """Kafka's processRegisterBrokerAndReelect: the broker registers on the new
        session before it takes part in the election, so that as controller it
        counts itself live and sends itself what it must lead or follow."""
        if self._register_broker is not None:
            try:
                await self._register_broker()
            except StoreError as e:
                log.error(
                    "broker %d could not register again (%s); trying again in %.0f s",
                    self.broker_id, e, REGISTER_RETRY_S,
                )  # fmt: skip
                self._tasks.spawn(self._register_again_later(), "register-again")
                return
        self._registered = True
        await self._elect()

    async def _register_again_later(self) -> None:
        await asyncio.sleep(REGISTER_RETRY_S)
        self.enqueue(RegisterBrokerAndReelect())

    # -- watches (they only enqueue) -----------------------------------------------------

    def _on_controller_node(self, _: WatchedEvent) -> None:
        self.enqueue(ControllerChange())

    def _on_brokers(self, _: WatchedEvent) -> None:
        self.enqueue(BrokerChange())

    def _on_topics(self, _: WatchedEvent) -> None:
        self.enqueue(TopicChange())

    def _on_delete_topics(self, _: WatchedEvent) -> None:
        self.enqueue(TopicDeletion())

    def _on_reassign_partitions(self, _: WatchedEvent) -> None:
        self.enqueue(ZkPartitionReassignment())

    def _on_log_dir_events(self, _: WatchedEvent) -> None:
        self.enqueue(LogDirEventNotification())

    def _on_leader_and_isr_response(self, broker_id: int, response: ControlResponse) -> None:
        assert isinstance(response, LeaderAndIsrResponse)
        self.enqueue(LeaderAndIsrResponseReceived(broker_id, response))

    def _topic_watch(self, topic: str) -> Callable[[WatchedEvent], None]:
        watch = self._topic_watches.get(topic)
        if watch is None:

            def watch(_: WatchedEvent) -> None:
                self.enqueue(PartitionModifications(topic))

            self._topic_watches[topic] = watch
        return watch

    # -- election ------------------------------------------------------------------------

    async def _elect(self) -> None:
        was_active = self.is_active
        self.active_controller_id = await self.client.get_controller_id(self._on_controller_node)
        if was_active and not self.is_active:
            self._resign()
        if self.active_controller_id is not None or not self._registered:
            return
        won = await self.client.try_become_controller(self.broker_id, self.clock.milliseconds())
        if won is None:
            self.active_controller_id = await self.client.get_controller_id(
                self._on_controller_node
            )
            return
        self.active_controller_id = self.broker_id
        self.ctx.epoch, self.ctx.epoch_zk_version = won
        # Watch our own node too: if it vanishes we must notice.
        await self.client.get_controller_id(self._on_controller_node)
        log.info("broker %d is the controller, epoch %d", self.broker_id, self.ctx.epoch)
        await self._on_controller_failover()

    async def _trigger_controller_move(self) -> None:
        """Our epoch is stale: resign, give up /controller if it still names us (a
        fresh election then bumps the epoch again), and take part in that election."""
        self._resign()
        if await self.client.get_controller_id() == self.broker_id:
            await self.client.delete_controller_node()
        await self._elect()

    def _resign(self) -> None:
        if self.ctx.epoch:
            log.info("broker %d resigns as controller", self.broker_id)
        # Nothing built under this epoch may go out, now or under a later one.
        self.channel.remove_all_brokers()
        self.batch.clear()
        self.ctx.reset()
        self._topic_watches.clear()
        if self.active_controller_id == self.broker_id:
            self.active_controller_id = None

    async def _on_controller_failover(self) -> None:
        ctx = self.ctx
        brokers = await self.client.get_all_brokers(self._on_brokers)
        ctx.live_brokers = brokers
        for broker_id in brokers:
            self.channel.add_broker(broker_id)
        for topic in await self.client.get_all_topics(self._on_topics):
            await self._load_topic(topic)
        ctx.leadership = await self.client.get_partition_states(ctx.all_partitions())
        to_delete = await self.client.get_topics_to_delete(self._on_delete_topics)
        self._queue_deletions(to_delete)
        # Notifications from before this controller are dropped, as Kafka does: the
        # LeaderAndIsr requests of the failover tell it which replicas are offline.
        stale = await self.client.get_log_dir_events(self._on_log_dir_events)
        await self.client.delete_log_dir_events(sorted(stale), ctx.epoch_zk_version)
        # Every broker learns the whole cluster first.
        self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, ctx.all_partitions())
        self.batch.send()
        offline = await self.replica_sm.startup()
        self.partition_sm.startup()
        await self.partition_sm.trigger_online_partition_state_change()
        # Replicas of brokers that died with the previous controller leave their ISRs
        # now, as its onBrokerFailure would have done, after the elections (one epoch
        # bump each). Kafka leaves them to the leaders' replica.lag.time.max.ms, and
        # acks=all stalls that long.
        await self.replica_sm.handle_state_changes(offline, ReplicaState.OFFLINE)
        self.batch.send()
        # Reassignments the previous controller left half done carry on (Kafka's
        # initializePartitionReassignments), then those /admin/reassign_partitions asks.
        for tp, assignment in sorted(ctx.reassignments.items()):
            await self.reassigner.on_partition_reassignment(tp, assignment)
        self.batch.send()
        await self._process_zk_partition_reassignment()
        await self._resume_deletions()

    async def _load_topic(self, topic: str) -> bool:
        found = await self.client.get_topic_assignment(topic, self._topic_watch(topic))
        if found is None:
            return False
        assignment, _ = found
        self.ctx.all_topics.add(topic)
        self.ctx.topic_ids[topic] = assignment.topic_id
        for p, replicas in assignment.partitions.items():
            tp = TopicPartition(topic, p)
            self.ctx.assignments[tp] = list(replicas)
            adding = assignment.adding_replicas.get(p, [])
            removing = assignment.removing_replicas.get(p, [])
            if adding or removing:
                self.ctx.reassignments[tp] = ReplicaAssignment(
                    tuple(replicas), tuple(adding), tuple(removing)
                )
        return True

    # -- brokers -------------------------------------------------------------------------

    async def _process_broker_change(self) -> None:
        """Kafka's processBrokerChange. A bounced broker (registered again under a new
        epoch since last seen) is not live while its failure is handled, so no
        election picks it, then starts up again."""
        ctx = self.ctx
        current = await self.client.get_all_brokers(self._on_brokers)
        previous = dict(ctx.live_brokers)
        new = sorted(set(current) - set(previous))
        dead = sorted(set(previous) - set(current))
        bounced = sorted(
            b for b in set(current) & set(previous) if current[b].epoch > previous[b].epoch
        )
        for b in (set(current) & set(previous)) - set(bounced):
            ctx.live_brokers[b] = current[b]
        for b in dead:
            self.channel.remove_broker(b)
        for b in bounced:
            self.channel.remove_broker(b)
        for b in [*new, *bounced]:
            self.channel.add_broker(b)
        if new or dead or bounced:
            log.info("brokers: new %s, dead %s, bounced %s", new, dead, bounced)
        if new:
            ctx.live_brokers.update({b: current[b] for b in new})
            await self._on_broker_startup(set(new))
        if bounced:
            for b in bounced:
                del ctx.live_brokers[b]
            await self._on_broker_failure(set(bounced))
            ctx.live_brokers.update({b: current[b] for b in bounced})
            await self._on_broker_startup(set(bounced))
        if dead:
            for b in dead:
                del ctx.live_brokers[b]
            await self._on_broker_failure(set(dead))

    async def _on_broker_startup(self, new: set[int]) -> None:
        ctx = self.ctx
        for b in new:
            ctx.replicas_on_offline_dirs.pop(b, None)
        self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids - new, [])
        self.batch.add_update_metadata(new, ctx.all_partitions())
        self.batch.send()
        replicas = [
            pr
            for pr in ctx.replicas_on_brokers(new)
            if not ctx.is_topic_queued_for_deletion(pr.tp.topic)
        ]
        await self.replica_sm.handle_state_changes(replicas, ReplicaState.ONLINE)
        await self.partition_sm.trigger_online_partition_state_change()
        self.batch.send()
        # Reassignments waiting on these brokers' replicas tell them again.
        for tp, assignment in sorted(ctx.reassignments.items()):
            if new & set(assignment.replicas):
                await self.reassigner.on_partition_reassignment(tp, assignment)
        self.batch.send()
        revived = {pr.tp.topic for pr in ctx.replicas_on_brokers(new)}
        ctx.topics_ineligible_for_deletion -= revived
        for pr in ctx.replicas_on_brokers(new):
            if ctx.replica_state(pr) == ReplicaState.DELETION_INELIGIBLE:
                await self.replica_sm.handle_state_changes([pr], ReplicaState.OFFLINE)
        await self._resume_deletions()

    async def _on_broker_failure(self, dead: set[int]) -> None:
        ctx = self.ctx
        for b in dead:
            ctx.replicas_on_offline_dirs.pop(b, None)
        ctx.shutting_down_broker_ids -= dead
        led = [
            tp
            for tp in ctx.partitions_led_by(dead)
            if not ctx.is_topic_queued_for_deletion(tp.topic)
        ]
        await self.partition_sm.handle_state_changes(led, PartitionState.OFFLINE)
        await self.partition_sm.trigger_online_partition_state_change()
        replicas = ctx.replicas_on_brokers(dead)
        await self.replica_sm.handle_state_changes(
            [pr for pr in replicas if not ctx.is_topic_queued_for_deletion(pr.tp.topic)],
            ReplicaState.OFFLINE,
        )
        deleting = [pr for pr in replicas if ctx.is_topic_queued_for_deletion(pr.tp.topic)]
        if deleting:
            await self.replica_sm.handle_state_changes(deleting, ReplicaState.OFFLINE)
            await self.replica_sm.handle_state_changes(deleting, ReplicaState.DELETION_INELIGIBLE)
            ctx.topics_ineligible_for_deletion |= {pr.tp.topic for pr in deleting}
        if not led:
            self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, [])
        self.batch.send()

    # -- ISR changes from leaders (AlterPartition) ---------------------------------------

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, items: tuple[AlterPartitionItem, ...]
    ) -> tuple[ErrorCode, tuple[AlterPartitionResult, ...]]:
        """A leader's ISR proposals, answered once the event queue has processed them."""
        if not self.is_active:
            return ErrorCode.not_controller, ()
        answer: asyncio.Future[tuple[ErrorCode, tuple[AlterPartitionResult, ...]]] = (
            asyncio.get_running_loop().create_future()
        )
        self.enqueue(AlterPartitionReceived(broker_id, broker_epoch, items, answer))
        return await answer

    # -- leader elections on demand (ElectLeaders) ---------------------------------------

    async def elect_leaders(
        self, unclean: bool, partitions: tuple[TopicPartition, ...] | None
    ) -> dict[TopicPartition, ErrorCode]:
        """Each partition's outcome, once the event queue has processed the request.
        Raises NotControllerError on a broker that is not the active controller."""
        if not self.is_active:
            raise NotControllerError()
        answer: asyncio.Future[dict[TopicPartition, ErrorCode]] = (
            asyncio.get_running_loop().create_future()
        )
        self.enqueue(ElectLeadersRequested(unclean, partitions, answer))
        return await answer

    async def _process_elect_leaders(self, event: ElectLeadersRequested) -> None:
        """Kafka's processReplicaLeaderElection: PREFERRED moves leadership to the
        first replica of the assignment where it is live and in the ISR; UNCLEAN
        elects any live replica for a partition that has no leader."""
        ctx = self.ctx
        wanted = ctx.all_partitions() if event.partitions is None else sorted(set(event.partitions))
        results: dict[TopicPartition, ErrorCode] = {}
        to_elect = []
        for tp in wanted:
            leadership = ctx.leadership.get(tp)
            if tp not in ctx.assignments or ctx.is_topic_queued_for_deletion(tp.topic):
                results[tp] = ErrorCode.unknown_topic_or_partition
            elif leadership is None:
                results[tp] = (
                    ErrorCode.eligible_leaders_not_available
                    if event.unclean
                    else ErrorCode.preferred_leader_not_available
                )
            elif event.unclean:
                leader = leadership.leader_and_isr.leader
                if ctx.is_replica_online(leader, tp):
                    results[tp] = ErrorCode.election_not_needed
                else:
                    to_elect.append(tp)
            elif leadership.leader_and_isr.leader == ctx.assignments[tp][0]:
                results[tp] = ErrorCode.election_not_needed
            else:
                to_elect.append(tp)
        try:
            strategy = ElectionStrategy.UNCLEAN if event.unclean else ElectionStrategy.PREFERRED
            elected = await self.partition_sm.handle_state_changes(
                to_elect, PartitionState.ONLINE, strategy
            )
            failed = (
                ErrorCode.eligible_leaders_not_available
                if event.unclean
                else ErrorCode.preferred_leader_not_available
            )
            for tp in to_elect:
                results[tp] = ErrorCode.none if elected.get(tp) is not None else failed
            self.batch.send()
        finally:
            if not event.answer.done():
                for tp in wanted:
                    results.setdefault(tp, ErrorCode.unknown_server_error)
                event.answer.set_result(results)

    # -- controlled shutdown -------------------------------------------------------------

    async def controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> tuple[ErrorCode, list[TopicPartition]]:
        """Move `broker_id`'s leaderships away before it stops. Returns the error and
        the partitions it still leads (no other replica could take them). Raises
        NotControllerError on a broker that is not the active controller."""
        if not self.is_active:
            raise NotControllerError()
        answer: asyncio.Future[tuple[ErrorCode, list[TopicPartition]]] = (
            asyncio.get_running_loop().create_future()
        )
        self.enqueue(ControlledShutdownRequested(broker_id, broker_epoch, answer))
        return await answer

    async def _process_controlled_shutdown(self, event: ControlledShutdownRequested) -> None:
        """Kafka's doControlledShutdown: the broker's partitions with other replicas
        elect a leader among the others (the controlled-shutdown election) where it
        leads, and drop it from their ISR (OfflineReplica) where it follows."""
        ctx = self.ctx
        try:
            registration = ctx.live_brokers.get(event.broker_id)
            if registration is None:
                event.answer.set_result((ErrorCode.broker_not_available, []))
                return
            if event.broker_epoch not in (-1, registration.epoch):
                event.answer.set_result((ErrorCode.stale_broker_epoch, []))
                return
            ctx.shutting_down_broker_ids.add(event.broker_id)
            log.info("controller %d: broker %d shuts down", self.broker_id, event.broker_id)
            replicated = [
                tp
                for tp, replicas in sorted(ctx.assignments.items())
                if event.broker_id in replicas
                and len(replicas) > 1
                and tp in ctx.leadership
                and not ctx.is_topic_queued_for_deletion(tp.topic)
            ]
            led = [
                tp
                for tp in replicated
                if ctx.leadership[tp].leader_and_isr.leader == event.broker_id
            ]
            followed = [tp for tp in replicated if tp not in frozenset(led)]
            await self.partition_sm.handle_state_changes(
                led, PartitionState.ONLINE, ElectionStrategy.CONTROLLED_SHUTDOWN
            )
            await self.replica_sm.handle_state_changes(
                [PartitionReplica(tp, event.broker_id) for tp in followed], ReplicaState.OFFLINE
            )
            self.batch.send()
            remaining = ctx.partitions_led_by({event.broker_id})
            event.answer.set_result((ErrorCode.none, remaining))
        finally:
            if not event.answer.done():
                event.answer.set_result((ErrorCode.unknown_server_error, []))

    async def _process_auto_preferred_election(self) -> None:
        ctx = self.ctx
        assert self.leader_rebalance is not None
        candidates = partitions_to_rebalance(
            ctx.assignments,
            {tp: s.leader_and_isr.leader for tp, s in ctx.leadership.items()},
            ctx.live_broker_ids,
            ctx.topics_to_be_deleted,
            self.leader_rebalance.imbalance_percentage,
        )
        # A reassignment moves leadership itself when it completes (as in Kafka).
        candidates = [tp for tp in candidates if tp not in ctx.reassignments]
        if not candidates:
            return
        elected = await self.partition_sm.handle_state_changes(
            candidates, PartitionState.ONLINE, ElectionStrategy.PREFERRED
        )
        self.batch.send()
        log.info(
            "controller %d: leader imbalance: preferred election of %d partitions, %d moved",
            self.broker_id, len(candidates), sum(1 for v in elected.values() if v is not None),
        )  # fmt: skip

    async def _process_alter_partition(self, event: AlterPartitionReceived) -> None:
        """Kafka's processAlterPartition (ZooKeeper mode): each proposal is checked
        against what the controller knows, written conditionally, and the brokers
        learn the new ISRs through UpdateMetadata."""
        ctx = self.ctx
        registration = ctx.live_brokers.get(event.broker_id)
        if registration is None or registration.epoch != event.broker_epoch:
            event.answer.set_result((ErrorCode.stale_broker_epoch, ()))
            return
        results = []
        updated = []
        try:
            for item in event.items:
                tp = TopicPartition(item.topic, item.partition)
                result = await self._alter_partition(event.broker_id, tp, item)
                results.append(result)
                if result.error_code == ErrorCode.none:
                    updated.append(tp)
        except ControllerMovedError:
            # As Kafka: the whole request is NOT_CONTROLLER, and the leader sends it to
            # the new controller (what was written so far is in the znodes it reads).
            if not event.answer.done():
                event.answer.set_result((ErrorCode.not_controller, ()))
            raise
        finally:
            if updated:
                self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, updated)
                self.batch.send()
            if not event.answer.done():
                results += [
                    AlterPartitionResult(item.topic, item.partition, ErrorCode.unknown_server_error)
                    for item in event.items[len(results) :]
                ]
                event.answer.set_result((ErrorCode.none, tuple(results)))
        # A reassignment whose target has just joined the ISR completes.
        completed = [tp for tp in updated if await self.reassigner.maybe_complete(tp)]
        if completed:
            self.batch.send()
            await self._resume_deletions()

    async def _alter_partition(
        self, broker_id: int, tp: TopicPartition, item: AlterPartitionItem
    ) -> AlterPartitionResult:
        ctx = self.ctx

        def error(code: ErrorCode) -> AlterPartitionResult:
            return AlterPartitionResult(tp.topic, tp.partition, code)

        leadership = ctx.leadership.get(tp)
        if leadership is None or ctx.is_topic_queued_for_deletion(tp.topic):
            return error(ErrorCode.unknown_topic_or_partition)
        li = leadership.leader_and_isr
        if item.leader_epoch != li.leader_epoch:
            return error(ErrorCode.fenced_leader_epoch)
        if broker_id != li.leader:
            return error(ErrorCode.invalid_request)
        if sorted(item.new_isr) == sorted(li.isr):
            # Already applied (a retry whose answer was lost): checked before the
            # partition epoch, as Kafka does, to keep retries idempotent.
            return self._result(tp, li)
        if item.partition_epoch != li.partition_epoch:
            return error(ErrorCode.invalid_update_version)
        assigned = ctx.assignments.get(tp, [])
        if any(r not in assigned or not ctx.is_replica_online(r, tp) for r in item.new_isr):
            return error(ErrorCode.ineligible_replica)
        proposed = LeaderIsrAndControllerEpoch(li.new_isr(item.new_isr), ctx.epoch)
        try:
            written = await self.client.update_partition_state(tp, proposed, ctx.epoch_zk_version)
        except BadVersionError:
            # Checked again against the znode read anew: a write of ours that was
            # applied, then retried, is a proposal already applied.
            await refresh_leadership(self.client, ctx, tp)
            return await self._alter_partition(broker_id, tp, item)
        ctx.leadership[tp] = LeaderIsrAndControllerEpoch(written, ctx.epoch)
        log.info("%s: ISR %s -> %s (asked by broker %d)", tp, li.isr, written.isr, broker_id)
        return self._result(tp, written)

    @staticmethod
    def _result(tp: TopicPartition, li: LeaderAndIsr) -> AlterPartitionResult:
        return AlterPartitionResult(
            tp.topic, tp.partition, ErrorCode.none, li.leader, li.leader_epoch, li.isr,
            li.partition_epoch,
        )  # fmt: skip

    # -- partition reassignment (KIP-455) ------------------------------------------------

    async def alter_partition_reassignments(
        self,
        targets: dict[TopicPartition, tuple[int, ...] | None],
        allow_replication_factor_change: bool = True,
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """Start, replace or (None) cancel reassignments; each partition's error once
        the controller has acted. NotControllerError unless the active controller."""
        if not self.is_active:
            raise NotControllerError()
        answer: asyncio.Future[dict[TopicPartition, tuple[ErrorCode, str | None]]] = (
            asyncio.get_running_loop().create_future()
        )
        self.enqueue(ApiPartitionReassignment(targets, allow_replication_factor_change, answer))
        return await answer

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """The reassignments in progress (of `partitions` if given)."""
        if not self.is_active:
            raise NotControllerError()
        ongoing = self.ctx.reassignments
        if partitions is None:
            return dict(sorted(ongoing.items()))
        return {tp: ongoing[tp] for tp in sorted(set(partitions)) if tp in ongoing}

    def _reassignment_for(
        self, tp: TopicPartition, target: Sequence[int] | None, allow_rf_change: bool = True
    ) -> ReplicaAssignment | tuple[ErrorCode, str | None]:
        """What reassigning `tp` to `target` (None: cancel) means, or why it cannot
        (Kafka's maybeBuildReassignment and its checks)."""
        ctx = self.ctx
        if tp not in ctx.assignments or ctx.is_topic_queued_for_deletion(tp.topic):
            return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
        current = ctx.full_assignment(tp)
        if target is None:
            if tp not in ctx.reassignments:
                return ErrorCode.no_reassignment_in_progress, None
            return current.reassign_to(current.origin_replicas)
        problem = invalid_target(target, ctx.live_or_shutting_down_broker_ids)
        if problem is not None:
            return problem
        origin = current.origin_replicas
        if not allow_rf_change and len(target) != len(origin):
            return (
                ErrorCode.invalid_replication_factor,
                f"The replication factor is changed from {len(origin)} to {len(target)} "
                "but allowReplicationFactorChange is false",
            )
        return current.reassign_to(target)

    async def _process_api_partition_reassignment(self, event: ApiPartitionReassignment) -> None:
        results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        try:
            to_start: dict[TopicPartition, ReplicaAssignment] = {}
            for tp, target in sorted(event.targets.items()):
                built = self._reassignment_for(tp, target, event.allow_replication_factor_change)
                if isinstance(built, ReplicaAssignment):
                    to_start[tp] = built
                else:
                    results[tp] = built
            # An API reassignment takes over from the znode's for its partitions.
            from_zk = set(to_start) & self.ctx.zk_reassignments
            if from_zk:
                await self.reassigner.remove_from_zk_reassignment(from_zk)
            for tp, assignment in to_start.items():
                await self.reassigner.on_partition_reassignment(tp, assignment)
                results[tp] = (ErrorCode.none, None)
            self.batch.send()
            await self._resume_deletions()
        finally:
            if not event.answer.done():
                for tp in event.targets:
                    results.setdefault(tp, (ErrorCode.unknown_server_error, None))
                event.answer.set_result(results)

    async def _process_zk_partition_reassignment(self) -> None:
        """Kafka's processZkPartitionReassignment: start what the znode asks (a target
        already in flight is left alone); drop what cannot be done from it."""
        ctx = self.ctx
        asked = await self.client.get_reassignment(self._on_reassign_partitions)
        if asked is None:
            return
        failed: set[TopicPartition] = set()
        for tp, target in sorted(asked.items()):
            ongoing = ctx.reassignments.get(tp)
            if ongoing is not None and list(ongoing.target_replicas) == target:
                ctx.zk_reassignments.add(tp)
                continue
            built = self._reassignment_for(tp, target)
            if isinstance(built, ReplicaAssignment):
                ctx.zk_reassignments.add(tp)
                await self.reassigner.on_partition_reassignment(tp, built)
            else:
                log.warning("reassignment of %s to %s refused: %s", tp, target, built[1] or
                            built[0].name)  # fmt: skip
                failed.add(tp)
        if not asked:
            await self.client.set_reassignment({}, ctx.epoch_zk_version)  # nothing in it
        elif failed:
            await self.reassigner.remove_from_zk_reassignment(failed)
        self.batch.send()
        await self._resume_deletions()

    # -- log directory failures (KIP-112) ------------------------------------------------

    async def _process_log_dir_events(self) -> None:
        """Some broker's log dir failed: send its replicas a LeaderAndIsr; the
        KAFKA_STORAGE_ERRORs in its answer say which replicas are offline."""
        events = await self.client.get_log_dir_events(self._on_log_dir_events)
        try:
            brokers = set(events.values()) & self.ctx.live_or_shutting_down_broker_ids
            if brokers:
                log.info("log directory failure on brokers %s", sorted(brokers))
                replicas = [
                    pr
                    for pr in self.ctx.replicas_on_brokers(brokers)
                    if not self.ctx.is_topic_queued_for_deletion(pr.tp.topic)
                ]
                await self.replica_sm.handle_state_changes(replicas, ReplicaState.ONLINE)
                self.batch.send()
        finally:
            await self.client.delete_log_dir_events(sorted(events), self.ctx.epoch_zk_version)

    async def _process_leader_and_isr_response(
        self, broker_id: int, response: LeaderAndIsrResponse
    ) -> None:
        ctx = self.ctx
        if response.error_code != ErrorCode.none:
            log.warning("LeaderAndIsr to broker %d failed: %s", broker_id, response.error_code)
            return
        offline = ctx.replicas_on_offline_dirs.setdefault(broker_id, set())
        newly_offline = []
        for e in response.partition_errors:
            tp = TopicPartition(e.topic, e.partition)
            if e.error_code == ErrorCode.kafka_storage_error:
                if tp not in offline:
                    offline.add(tp)
                    newly_offline.append(PartitionReplica(tp, broker_id))
            elif e.error_code == ErrorCode.none:
                offline.discard(tp)
        if newly_offline:
            log.info(
                "replicas %s on broker %d are in an offline log directory",
                [str(pr.tp) for pr in newly_offline], broker_id,
            )  # fmt: skip
            await self._on_replicas_become_offline(newly_offline)

    async def _on_replicas_become_offline(self, replicas: list[PartitionReplica]) -> None:
        """Kafka's onReplicasBecomeOffline: partitions they led go Offline and are
        elected again where another replica can lead; the replicas go Offline."""
        ctx = self.ctx
        led = ctx.partitions_with_offline_leader()
        await self.partition_sm.handle_state_changes(led, PartitionState.OFFLINE)
        await self.partition_sm.trigger_online_partition_state_change()
        await self.replica_sm.handle_state_changes(
            [pr for pr in replicas if not ctx.is_topic_queued_for_deletion(pr.tp.topic)],
            ReplicaState.OFFLINE,
        )
        if not led:
            self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, [])
        self.batch.send()

    # -- topics --------------------------------------------------------------------------

    async def _process_topic_change(self) -> None:
        ctx = self.ctx
        topics = set(await self.client.get_all_topics(self._on_topics))
        new = sorted(topics - ctx.all_topics)
        for topic in sorted(ctx.all_topics - topics):
            ctx.remove_topic(topic)
            self._topic_watches.pop(topic, None)
        partitions: list[TopicPartition] = []
        for topic in new:
            if await self._load_topic(topic):
                partitions += ctx.partitions_for_topic(topic)
        if partitions:
            log.info("new topics %s", new)
            await self._on_new_partition_creation(partitions)

    async def _process_partition_modifications(self, topic: str) -> None:
        ctx = self.ctx
        found = await self.client.get_topic_assignment(topic, self._topic_watch(topic))
        if found is None or topic not in ctx.all_topics:
            return
        if ctx.is_topic_queued_for_deletion(topic):
            log.info("ignoring partition changes of %s: it is being deleted", topic)
            return
        assignment, _ = found
        added = []
        for p, replicas in sorted(assignment.partitions.items()):
            tp = TopicPartition(topic, p)
            if tp not in ctx.assignments:
                ctx.assignments[tp] = list(replicas)
                added.append(tp)
        if added:
            log.info("new partitions %s", added)
            await self._on_new_partition_creation(added)

    async def _on_new_partition_creation(self, partitions: list[TopicPartition]) -> None:
        replicas = [PartitionReplica(tp, r) for tp in partitions for r in self.ctx.assignments[tp]]
        await self.partition_sm.handle_state_changes(partitions, PartitionState.NEW)
        await self.replica_sm.handle_state_changes(replicas, ReplicaState.NEW)
        await self.partition_sm.handle_state_changes(partitions, PartitionState.ONLINE)
        await self.replica_sm.handle_state_changes(replicas, ReplicaState.ONLINE)
        self.batch.send()

    # -- topic deletion (Kafka's TopicDeletionManager) -----------------------------------

    def _queue_deletions(self, topics: Iterable[str]) -> None:
        for topic in topics:
            if topic in self.ctx.all_topics:
                self.ctx.topics_to_be_deleted.add(topic)

    async def _process_topic_deletion(self) -> None:
        ctx = self.ctx
        requested = set(await self.client.get_topics_to_delete(self._on_delete_topics))
        unknown = requested - ctx.all_topics
        for topic in sorted(unknown):
            # A marker for a topic that does not exist: just remove it.
            await self.client.remove_deletion_marker(topic, ctx.epoch_zk_version)
        if not self.delete_topic_enable:
            for topic in sorted(requested - unknown):
                await self.client.remove_deletion_marker(topic, ctx.epoch_zk_version)
            return
        new = (requested - unknown) - ctx.topics_to_be_deleted
        if new:
            log.info("deleting topics %s", sorted(new))
            self._queue_deletions(new)
            await self._resume_deletions()

    async def _resume_deletions(self) -> None:
        ctx = self.ctx
        for topic in sorted(ctx.topics_to_be_deleted):
            replicas = ctx.replicas_for_topic(topic)
            states = {ctx.replica_state(pr) for pr in replicas}
            if states <= {ReplicaState.DELETION_SUCCESSFUL}:
                await self._complete_delete_topic(topic)
            elif ReplicaState.DELETION_STARTED in states:
                continue
            elif ctx.is_topic_being_reassigned(topic):
                continue  # it resumes when the reassignment completes
            elif topic not in ctx.topics_ineligible_for_deletion:
                retry = [
                    pr
                    for pr in replicas
                    if ctx.replica_state(pr) == ReplicaState.DELETION_INELIGIBLE
                ]
                await self.replica_sm.handle_state_changes(retry, ReplicaState.OFFLINE)
                await self._on_topic_deletion(topic)

    async def _on_topic_deletion(self, topic: str) -> None:
        ctx = self.ctx
        partitions = ctx.partitions_for_topic(topic)
        # Brokers drop the topic from their metadata first (leader LeaderDuringDelete).
        self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, partitions)
        self.batch.send()
        replicas = ctx.replicas_for_topic(topic)
        dead = [pr for pr in replicas if not ctx.is_replica_online(pr.replica, pr.tp)]
        # A retry (a broker came back) leaves the replicas already deleted alone.
        live = [
            pr
            for pr in replicas
            if ctx.is_replica_online(pr.replica, pr.tp)
            and ctx.replica_state(pr) != ReplicaState.DELETION_SUCCESSFUL
        ]
        await self.replica_sm.handle_state_changes(dead, ReplicaState.DELETION_INELIGIBLE)
        if dead:
            ctx.topics_ineligible_for_deletion.add(topic)
        await self.replica_sm.handle_state_changes(live, ReplicaState.OFFLINE)
        await self.replica_sm.handle_state_changes(
            live, ReplicaState.DELETION_STARTED, self._on_stop_replica_response
        )
        self.batch.send()

    def _on_stop_replica_response(self, broker_id: int, response: ControlResponse) -> None:
        assert isinstance(response, StopReplicaResponse)
        self.enqueue(TopicDeletionStopReplicaResponseReceived(broker_id, response))

    async def _process_stop_replica_response(
        self, broker_id: int, response: StopReplicaResponse
    ) -> None:
        ctx = self.ctx
        failed = {
            TopicPartition(e.topic, e.partition) for e in response.partition_errors if e.error_code
        }
        started = [
            pr
            for pr, state in ctx.replica_states.items()
            if pr.replica == broker_id and state == ReplicaState.DELETION_STARTED
        ]
        ok = [pr for pr in started if pr.tp not in failed and response.error_code == 0]
        bad = [pr for pr in started if pr not in ok]
        await self.replica_sm.handle_state_changes(ok, ReplicaState.DELETION_SUCCESSFUL)
        if bad:
            await self.replica_sm.handle_state_changes(bad, ReplicaState.DELETION_INELIGIBLE)
            ctx.topics_ineligible_for_deletion |= {pr.tp.topic for pr in bad}
        await self._resume_deletions()

    async def _complete_delete_topic(self, topic: str) -> None:
        ctx = self.ctx
        await self.replica_sm.handle_state_changes(
            ctx.replicas_for_topic(topic), ReplicaState.NON_EXISTENT
        )
        partitions = ctx.partitions_for_topic(topic)
        await self.partition_sm.handle_state_changes(partitions, PartitionState.OFFLINE)
        await self.partition_sm.handle_state_changes(partitions, PartitionState.NON_EXISTENT)
        ctx.topics_to_be_deleted.discard(topic)
        ctx.topics_ineligible_for_deletion.discard(topic)
        await self.client.delete_topic_znodes(topic, ctx.epoch_zk_version)
        ctx.remove_topic(topic)
        self._topic_watches.pop(topic, None)
        log.info("deleted topic %s", topic)
