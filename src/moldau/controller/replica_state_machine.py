"""ReplicaStateMachine: moves each (partition, replica) between New, Online, Offline
and the deletion states, telling brokers with LeaderAndIsr and StopReplica."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from moldau.controller.channel import Callback, ControllerBrokerRequestBatch
from moldau.controller.context import ControllerContext, PartitionReplica
from moldau.controller.partition_state_machine import refresh_leadership
from moldau.controller.states import PartitionState, ReplicaState, is_valid_replica_transition
from moldau.metadata.client import MetadataClient
from moldau.metadata.store import BadVersionError
from moldau.metadata.znodes import LeaderAndIsr, LeaderIsrAndControllerEpoch

log = logging.getLogger(__name__)


class ReplicaStateMachine:
    def __init__(
        self,
        context: ControllerContext,
        client: MetadataClient,
        batch: ControllerBrokerRequestBatch,
    ) -> None:
        self.ctx = context
        self.client = client
        self.batch = batch

    async def startup(self) -> list[PartitionReplica]:
        """Replicas on live brokers go Online; the others are ineligible for deletion
        until their broker returns (Kafka's ReplicaStateMachine.startup). Returns
        those not being deleted, for the controller to take out of their ISRs once
        leaders are elected."""
        online, offline = [], []
        for tp, replicas in self.ctx.assignments.items():
            for r in replicas:
                pr = PartitionReplica(tp, r)
                if self.ctx.is_replica_online(r, tp, include_shutting_down=True):
                    self.ctx.replica_states[pr] = ReplicaState.ONLINE
                    online.append(pr)
                else:
                    self.ctx.replica_states[pr] = ReplicaState.DELETION_INELIGIBLE
                    if not self.ctx.is_topic_queued_for_deletion(tp.topic):
                        offline.append(pr)
        await self.handle_state_changes(online, ReplicaState.ONLINE)
        return offline

    async def handle_state_changes(
        self,
        replicas: Iterable[PartitionReplica],
        target: ReplicaState,
        callback: Callback | None = None,
    ) -> None:
        for pr in replicas:
            current = self.ctx.replica_state(pr)
            if not is_valid_replica_transition(current, target):
                log.error(
                    "invalid replica transition of %s on broker %d from %s to %s",
                    pr.tp, pr.replica, current.value, target.value,
                )  # fmt: skip
                continue
            await self._transition(pr, current, target, callback)
            self.ctx.replica_states[pr] = target
            if target == ReplicaState.NON_EXISTENT:
                del self.ctx.replica_states[pr]

    async def _transition(
        self,
        pr: PartitionReplica,
        current: ReplicaState,
        target: ReplicaState,
        callback: Callback | None,
    ) -> None:
        tp, replica = pr.tp, pr.replica
        leadership = self.ctx.leadership.get(tp)
        assignment = self.ctx.assignments.get(tp, [])
        if target == ReplicaState.NEW:
            if leadership is not None:
                self.batch.add_leader_and_isr({replica}, tp, leadership, assignment, is_new=True)
        elif target == ReplicaState.ONLINE:
            if current == ReplicaState.NEW:
                if replica not in assignment:
                    self.ctx.assignments[tp] = [*assignment, replica]
            elif leadership is not None:
                self.batch.add_leader_and_isr({replica}, tp, leadership, assignment, is_new=False)
        elif target == ReplicaState.OFFLINE:
            self.batch.add_stop_replica({replica}, tp, delete_partition=False)
            if leadership is not None and replica in leadership.leader_and_isr.isr:
                updated = await self._remove_from_isr(pr, leadership)
                if updated is not None and not self.ctx.is_topic_queued_for_deletion(tp.topic):
                    others = {
                        r
                        for r in assignment
                        if r != replica and self.ctx.is_replica_online(r, tp, True)
                    }
                    self.batch.add_leader_and_isr(others, tp, updated, assignment, is_new=False)
            self.batch.add_update_metadata(self.ctx.live_or_shutting_down_broker_ids, [tp])
        elif target == ReplicaState.DELETION_STARTED:
            self.batch.add_stop_replica({replica}, tp, delete_partition=True, callback=callback)
        elif target == ReplicaState.NON_EXISTENT:
            remaining = [r for r in assignment if r != replica]
            if remaining:
                self.ctx.assignments[tp] = remaining

    async def _remove_from_isr(
        self, pr: PartitionReplica, leadership: LeaderIsrAndControllerEpoch | None
    ) -> LeaderIsrAndControllerEpoch | None:
        """Drop a replica from the ISR; if it led, the partition has no leader until
        the partition state machine elects one. Kafka keeps the last ISR member even
        when it dies, so that a clean election can wait for it to return. After a
        version conflict, again from the znode read anew (Kafka's updatesToRetry)."""
        while leadership is not None:
            li = leadership.leader_and_isr
            if pr.replica not in li.isr:
                return leadership  # out already, as the znode read anew says
            new_isr = [r for r in li.isr if r != pr.replica]
            if not new_isr:
                new_isr = list(li.isr)
            new_leader = LeaderAndIsr.NO_LEADER if li.leader == pr.replica else li.leader
            new_li = LeaderAndIsr(
                new_leader, li.leader_epoch + 1, tuple(new_isr), li.partition_epoch
            )
            state = LeaderIsrAndControllerEpoch(new_li, self.ctx.epoch)
            try:
                written = await self.client.update_partition_state(
                    pr.tp, state, self.ctx.epoch_zk_version
                )
            except BadVersionError:
                leadership = await refresh_leadership(self.client, self.ctx, pr.tp)
                continue
            result = LeaderIsrAndControllerEpoch(written, self.ctx.epoch)
            self.ctx.leadership[pr.tp] = result
            online = self.ctx.partition_state(pr.tp) == PartitionState.ONLINE
            if new_leader == LeaderAndIsr.NO_LEADER and online:
                # Left without a leader: Offline, so that the next election looks at it.
                self.ctx.partition_states[pr.tp] = PartitionState.OFFLINE
            return result
        return None
