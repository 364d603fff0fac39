"""PartitionStateMachine: moves partitions between NonExistent, New, Online and
Offline, electing leaders and writing partition state znodes on the way."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from enum import Enum

from moldau.controller.channel import ControllerBrokerRequestBatch
from moldau.controller.context import ControllerContext
from moldau.controller.election import (
    controlled_shutdown_partition_leader_election,
    offline_partition_leader_election,
    preferred_replica_partition_leader_election,
    reassign_partition_leader_election,
)
from moldau.controller.states import PartitionState, is_valid_partition_transition
from moldau.metadata.client import ControllerMovedError, MetadataClient
from moldau.metadata.store import BadVersionError
from moldau.metadata.znodes import LeaderAndIsr, LeaderIsrAndControllerEpoch
from moldau.storage.partition_name import TopicPartition

log = logging.getLogger(__name__)


async def refresh_leadership(
    client: MetadataClient, ctx: ControllerContext, tp: TopicPartition
) -> LeaderIsrAndControllerEpoch | None:
    """After a version conflict on `tp`'s state znode: read it again into the
    context, for the caller to retry with (Kafka's updatesToRetry). The conflict
    may be this controller's own write, applied once and retried after a lost
    connection, so keeping the old copy would fail every later write of `tp`.
    None if the znode is gone. A znode written in a newer controller epoch means
    this controller's is over: ControllerMovedError, and it resigns."""
    fresh = (await client.get_partition_states([tp])).get(tp)
    if fresh is None:
        log.warning("state of %s is gone", tp)
        ctx.leadership.pop(tp, None)
        return None
    if fresh.controller_epoch > ctx.epoch:
        raise ControllerMovedError(
            f"state of {tp} written in controller epoch {fresh.controller_epoch} > {ctx.epoch}"
        )
    log.info("state of %s changed under the controller; retrying with %s", tp, fresh)
    ctx.leadership[tp] = fresh
    return fresh


class ElectionStrategy(Enum):
    OFFLINE = "offline"
    #: The offline election with unclean election allowed whatever the topic's
    #: config says (ElectLeaders UNCLEAN, Kafka's allowUnclean).
    UNCLEAN = "unclean"
    REASSIGN = "reassign"
    PREFERRED = "preferred"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"


class PartitionStateMachine:
    def __init__(
        self,
        context: ControllerContext,
        client: MetadataClient,
        batch: ControllerBrokerRequestBatch,
        unclean_election_enabled: Callable[[str], Awaitable[bool]],
    ) -> None:
        self.ctx = context
        self.client = client
        self.batch = batch
        self.unclean_election_enabled = unclean_election_enabled

    def startup(self) -> None:
        """Initial states from what the store says."""
        for tp in self.ctx.all_partitions():
            leadership = self.ctx.leadership.get(tp)
            if leadership is None:
                self.ctx.partition_states[tp] = PartitionState.NEW
            elif self.ctx.is_replica_online(
                leadership.leader_and_isr.leader, tp
            ) and not self.ctx.is_topic_queued_for_deletion(tp.topic):
                self.ctx.partition_states[tp] = PartitionState.ONLINE
            else:
                self.ctx.partition_states[tp] = PartitionState.OFFLINE

    async def trigger_online_partition_state_change(self, topic: str | None = None) -> None:
        """New and Offline partitions (not being deleted; of `topic` if given) go
        Online if they can."""
        candidates = [
            tp
            for tp, state in self.ctx.partition_states.items()
            if state in (PartitionState.NEW, PartitionState.OFFLINE)
            and not self.ctx.is_topic_queued_for_deletion(tp.topic)
            and topic in (None, tp.topic)
        ]
        await self.handle_state_changes(candidates, PartitionState.ONLINE, ElectionStrategy.OFFLINE)

    async def handle_state_changes(
        self,
        partitions: Iterable[TopicPartition],
        target: PartitionState,
        strategy: ElectionStrategy = ElectionStrategy.OFFLINE,
    ) -> dict[TopicPartition, int | None]:
        """Move partitions to `target`; returns the new leader of each partition that
        went Online through an election."""
        elected: dict[TopicPartition, int | None] = {}
        valid = []
        for tp in sorted(partitions):
            current = self.ctx.partition_state(tp)
            if is_valid_partition_transition(current, target):
                valid.append(tp)
            else:
                log.error(
                    "invalid partition transition of %s from %s to %s",
                    tp, current.value, target.value,
                )  # fmt: skip
        new: set[TopicPartition] = set()
        if target == PartitionState.ONLINE:
            # New partitions get their first leader and ISR all in one go.
            new = {tp for tp in valid if self.ctx.partition_state(tp) == PartitionState.NEW}
            for tp in await self._initialize_leaders_and_isrs(sorted(new)):
                self.ctx.partition_states[tp] = target
        for tp in valid:
            if target == PartitionState.NEW:
                self.ctx.partition_states[tp] = target
            elif target == PartitionState.ONLINE:
                if tp in new:
                    continue  # initialised above, or left New without a live replica
                leader = await self._elect_leader(tp, strategy)
                elected[tp] = leader
                if leader is not None:
                    self.ctx.partition_states[tp] = target
            elif target == PartitionState.OFFLINE:
                self.ctx.partition_states[tp] = target
            elif target == PartitionState.NON_EXISTENT:
                self.ctx.partition_states.pop(tp, None)
        return elected

    async def _initialize_leaders_and_isrs(
        self, partitions: list[TopicPartition]
    ) -> list[TopicPartition]:
        """The first leader and ISR of new partitions: their live replicas, the first
        leading; returns those initialised."""
        states = {}
        for tp in partitions:
            replicas = self.ctx.assignments.get(tp, [])
            live = [r for r in replicas if self.ctx.is_replica_online(r, tp)]
            if not live:
                log.warning("%s has no live replica among %s: it stays New", tp, replicas)
                continue
            states[tp] = LeaderIsrAndControllerEpoch(
                LeaderAndIsr(live[0], 0, tuple(live), 0), self.ctx.epoch
            )
        created = await self.client.create_partition_states(states, self.ctx.epoch_zk_version)
        for tp in sorted(created):
            state = states[tp]
            self.ctx.leadership[tp] = state
            replicas = self.ctx.assignments.get(tp, [])
            isr = set(state.leader_and_isr.isr)
            self.batch.add_leader_and_isr(isr, tp, state, replicas, is_new=True)
        return sorted(created)

    async def _elect_leader(self, tp: TopicPartition, strategy: ElectionStrategy) -> int | None:
        # Elected again from the znode read anew after each version conflict.
        while (leadership := self.ctx.leadership.get(tp)) is not None:
            li = leadership.leader_and_isr
            assignment = self.ctx.assignments.get(tp, [])
            # Only a controlled shutdown's election counts the brokers leaving as live
            # (to tell them); the others pass them over (Kafka's
            # includeShuttingDownBrokers).
            controlled = strategy == ElectionStrategy.CONTROLLED_SHUTDOWN
            live = [r for r in assignment if self.ctx.is_replica_online(r, tp, controlled)]
            isr = [r for r in li.isr if r in live]
            leader: int | None
            if strategy in (ElectionStrategy.OFFLINE, ElectionStrategy.UNCLEAN):
                unclean = strategy == ElectionStrategy.UNCLEAN or (
                    await self.unclean_election_enabled(tp.topic)
                )
                leader = offline_partition_leader_election(assignment, isr, live, unclean)
                if leader is not None and leader not in isr:
                    log.warning("unclean leader election of %s: %d was not in the ISR", tp, leader)
                    isr = [leader]
            elif strategy == ElectionStrategy.REASSIGN:
                leader = reassign_partition_leader_election(assignment, isr, live)
            elif strategy == ElectionStrategy.PREFERRED:
                leader = preferred_replica_partition_leader_election(assignment, isr, live)
            else:
                leader = controlled_shutdown_partition_leader_election(
                    assignment, isr, live, self.ctx.shutting_down_broker_ids
                )
                isr = [r for r in isr if r not in self.ctx.shutting_down_broker_ids]
            if leader is None:
                log.warning(
                    "no leader for %s (assignment %s, isr %s, live %s)",
                    tp, assignment, li.isr, live,
                )  # fmt: skip
                return None
            new = LeaderIsrAndControllerEpoch(li.new_leader_and_isr(leader, isr), self.ctx.epoch)
            try:
                li_written = await self.client.update_partition_state(
                    tp, new, self.ctx.epoch_zk_version
                )
            except BadVersionError:
                await refresh_leadership(self.client, self.ctx, tp)
                continue
            written = LeaderIsrAndControllerEpoch(li_written, self.ctx.epoch)
            self.ctx.leadership[tp] = written
            self.batch.add_leader_and_isr(set(live), tp, written, assignment, is_new=False)
            return leader
        return None
