"""The controller's side of partition reassignment (Kafka's onPartitionReassignment
and the steps around it). Runs on the controller's event task only; the caller
sends the batch of requests the steps build."""

from __future__ import annotations

import logging

from moldau.controller.channel import ControllerBrokerRequestBatch
from moldau.controller.context import ControllerContext, PartitionReplica
from moldau.controller.partition_state_machine import (
    ElectionStrategy,
    PartitionStateMachine,
    refresh_leadership,
)
from moldau.controller.reassignment import ReplicaAssignment
from moldau.controller.replica_state_machine import ReplicaStateMachine
from moldau.controller.states import PartitionState, ReplicaState
from moldau.metadata import znodes as z
from moldau.metadata.client import MetadataClient
from moldau.metadata.store import BadVersionError
from moldau.storage.partition_name import TopicPartition

log = logging.getLogger(__name__)


class PartitionReassigner:
    def __init__(
        self,
        ctx: ControllerContext,
        client: MetadataClient,
        batch: ControllerBrokerRequestBatch,
        partition_sm: PartitionStateMachine,
        replica_sm: ReplicaStateMachine,
    ) -> None:
        self.ctx = ctx
        self.client = client
        self.batch = batch
        self.partition_sm = partition_sm
        self.replica_sm = replica_sm

    async def on_partition_reassignment(
        self, tp: TopicPartition, assignment: ReplicaAssignment
    ) -> None:
        """Start (or carry on with) moving `tp` to `assignment`'s target; finish it
        if the whole target is in the ISR already."""
        await self._update_current_reassignment(tp, assignment)
        leadership = self.ctx.leadership.get(tp)
        isr = leadership.leader_and_isr.isr if leadership is not None else ()
        if not assignment.is_complete(isr):
            # Every replica learns RS, AR and RR; the new ones start following.
            await self._bump_leader_epoch(tp)
            # Replicas already known (a resumed reassignment) heard of it just now.
            adding = [
                pr
                for pr in (PartitionReplica(tp, r) for r in assignment.adding)
                if self.ctx.replica_state(pr) == ReplicaState.NON_EXISTENT
            ]
            await self.replica_sm.handle_state_changes(adding, ReplicaState.NEW)
            log.info("reassigning %s: %s, waiting for %s to join the ISR", tp, assignment,
                     [r for r in assignment.target_replicas if r not in isr])  # fmt: skip
        else:
            await self._complete(tp, assignment)

    async def maybe_complete(self, tp: TopicPartition) -> bool:
        """After an ISR change: finish `tp`'s reassignment if its target is in the ISR."""
        assignment = self.ctx.reassignments.get(tp)
        leadership = self.ctx.leadership.get(tp)
        if assignment is None or leadership is None:
            return False
        if not assignment.is_complete(leadership.leader_and_isr.isr):
            return False
        await self.on_partition_reassignment(tp, assignment)
        return True

    async def _update_current_reassignment(
        self, tp: TopicPartition, assignment: ReplicaAssignment
    ) -> None:
        ctx = self.ctx
        current = ctx.full_assignment(tp)
        if tp in ctx.reassignments:
            # A new target replaces one in flight: replicas neither keeps go now.
            unneeded = [r for r in current.replicas if r not in assignment.replicas]
            if unneeded:
                ctx.assignments[tp] = [r for r in current.replicas if r not in unneeded]
                await self._stop_removed_replicas(tp, unneeded)
        ctx.assignments[tp] = list(assignment.replicas)
        ctx.reassignments[tp] = assignment
        await self._write_topic(tp.topic)

    async def _complete(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        ctx = self.ctx
        target = list(assignment.target_replicas)
        added = [PartitionReplica(tp, r) for r in assignment.adding]
        await self.replica_sm.handle_state_changes(added, ReplicaState.ONLINE)
        ctx.assignments[tp] = target
        del ctx.reassignments[tp]
        await self._move_leader_if_required(tp, target)
        await self._stop_removed_replicas(tp, list(assignment.removing))
        await self._write_topic(tp.topic)
        if tp in ctx.zk_reassignments:
            await self.remove_from_zk_reassignment({tp})
        self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, [tp])
        log.info("reassignment of %s completed: replicas %s", tp, target)

    async def _move_leader_if_required(self, tp: TopicPartition, target: list[int]) -> None:
        leadership = self.ctx.leadership.get(tp)
        leader = leadership.leader_and_isr.leader if leadership is not None else -1
        if leader in target and self.ctx.is_replica_online(leader, tp):
            await self._bump_leader_epoch(tp)
        else:
            await self.partition_sm.handle_state_changes(
                [tp], PartitionState.ONLINE, ElectionStrategy.REASSIGN
            )

    async def _stop_removed_replicas(self, tp: TopicPartition, removed: list[int]) -> None:
        """Out of the ISR, then deleted (Kafka does not wait for the deletions)."""
        replicas = [PartitionReplica(tp, r) for r in removed]
        for state in (
            ReplicaState.OFFLINE,
            ReplicaState.DELETION_STARTED,
            ReplicaState.DELETION_SUCCESSFUL,
            ReplicaState.NON_EXISTENT,
        ):
            await self.replica_sm.handle_state_changes(replicas, state)

    async def _bump_leader_epoch(self, tp: TopicPartition) -> None:
        """Same leader and ISR in a new epoch, sent to every replica with the
        partition's replica sets (Kafka's updateLeaderEpochAndSendRequest; after a
        version conflict, from the znode read anew, as its updateLeaderEpoch)."""
        ctx = self.ctx
        while (leadership := ctx.leadership.get(tp)) is not None:
            li = leadership.leader_and_isr
            bumped = z.LeaderAndIsr(li.leader, li.leader_epoch + 1, li.isr, li.partition_epoch)
            state = z.LeaderIsrAndControllerEpoch(bumped, ctx.epoch)
            try:
                written = await self.client.update_partition_state(tp, state, ctx.epoch_zk_version)
            except BadVersionError:
                await refresh_leadership(self.client, ctx, tp)
                continue
            ctx.leadership[tp] = z.LeaderIsrAndControllerEpoch(written, ctx.epoch)
            replicas = ctx.assignments.get(tp, [])
            live = {r for r in replicas if r in ctx.live_or_shutting_down_broker_ids}
            self.batch.add_leader_and_isr(live, tp, ctx.leadership[tp], replicas, is_new=False)
            return

    async def _write_topic(self, topic: str) -> None:
        ctx = self.ctx
        partitions = ctx.partitions_for_topic(topic)
        reassigning = {tp: ctx.reassignments[tp] for tp in partitions if tp in ctx.reassignments}
        assignment = z.TopicAssignment(
            ctx.topic_ids[topic],
            {tp.partition: list(ctx.assignments[tp]) for tp in partitions},
            {tp.partition: list(a.adding) for tp, a in reassigning.items() if a.adding},
            {tp.partition: list(a.removing) for tp, a in reassigning.items() if a.removing},
        )
        await self.client.write_topic_assignment(topic, assignment, ctx.epoch_zk_version)

    async def remove_from_zk_reassignment(self, partitions: set[TopicPartition]) -> None:
        """Drop finished (or refused) partitions from /admin/reassign_partitions,
        deleting it once none is left, as Kafka does."""
        self.ctx.zk_reassignments -= partitions
        current = await self.client.get_reassignment()
        if current is None:
            return
        remaining = {tp: r for tp, r in current.items() if tp not in partitions}
        if remaining != current:
            await self.client.set_reassignment(remaining, self.ctx.epoch_zk_version)
