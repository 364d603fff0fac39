"""The controller on the embedded store, with brokers that record what it sends:
election and failover, topic creation, broker failure, deletion."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from moldau.clock import FakeClock
from moldau.controller.admin import NewTopic, TopicAdmin
from moldau.controller.assignment import BrokerMetadata
from moldau.controller.channel import InProcessTransport
from moldau.controller.context import PartitionReplica
from moldau.controller.controller import REGISTER_RETRY_S, Controller
from moldau.controller.events import BrokerChange, ControllerChange
from moldau.controller.states import ReplicaState
from moldau.metadata import znodes as z
from moldau.metadata.client import MetadataClient
from moldau.metadata.embedded import EmbeddedSession, EmbeddedTree
from moldau.metadata.store import Op, Stat, StoreError, Watcher
from moldau.protocol.control import (
    AlterPartitionItem,
    ControlRequest,
    ControlResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    PartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from moldau.protocol.errors import ErrorCode
from moldau.storage.partition_name import TopicPartition


class RecordingBroker:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.received: list[ControlRequest] = []
        # Cleared, the broker takes a request and answers once it is set again.
        self.answering = asyncio.Event()
        self.answering.set()

    async def handle_control_request(self, request: ControlRequest) -> ControlResponse:
        self.received.append(request)
        await self.answering.wait()
        if isinstance(request, StopReplicaRequest):
            return StopReplicaResponse(
                0, tuple(PartitionError(s.topic, s.partition, 0) for s in request.partition_states)
            )
        if isinstance(request, LeaderAndIsrRequest):
            return LeaderAndIsrResponse(0)
        return UpdateMetadataResponse(0)

    def of(self, kind: type[Any]) -> list[Any]:
        return [r for r in self.received if isinstance(r, kind)]


class RoundTripSession(EmbeddedSession):
    """An embedded session whose every call yields to the event loop first, as a
    call to ZooKeeper waits for its answer: what a controller sends goes out while
    it waits on the store, not only once its event is done. `instant` turns that
    off (a broker's restart registering before the controller looks)."""

    instant = False

    async def _round_trip(self) -> None:
        if not self.instant:
            await asyncio.sleep(0)

    async def create(self, path: str, data: bytes = b"", **kwargs: Any) -> str:
        await self._round_trip()
        return await super().create(path, data, **kwargs)

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        await self._round_trip()
        return await super().get(path, watch)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        await self._round_trip()
        return await super().set(path, data, version)

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        await self._round_trip()
        await super().delete(path, version, recursive)

    async def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        await self._round_trip()
        return await super().exists(path, watch)

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        await self._round_trip()
        return await super().get_children(path, watch)

    async def multi(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        await self._round_trip()
        return await super().multi(ops)


class Cluster:
    def __init__(self, tmp: Path, n: int) -> None:
        self.tree = EmbeddedTree(tmp)
        self.transport = InProcessTransport()
        self.clock = FakeClock()
        self.brokers = {i: RecordingBroker(i) for i in range(1, n + 1)}
        self.sessions: dict[int, Any] = {}
        self.controllers: dict[int, Controller] = {}
        self.own_session = self.tree.session()
        # Brokers whose next registration fails (once).
        self.refuse_registration: set[int] = set()

    async def start_broker(self, i: int, unclean: bool = False, instant: bool = False) -> None:
        session = RoundTripSession(self.tree)
        session.instant = instant
        await session.start()
        self.sessions[i] = session
        client = MetadataClient(session)
        await client.create_top_level_paths()
        self.transport.brokers[i] = self.brokers[i]
        reg = z.BrokerRegistration(i, (z.EndPoint("PLAINTEXT", "localhost", 9000 + i),))

        async def register() -> None:
            if i in self.refuse_registration:
                self.refuse_registration.discard(i)
                raise StoreError("the store refused the registration")
            await client.register_broker(reg, self.clock.milliseconds())

        await register()
        session.instant = False

        async def unclean_enabled(topic: str) -> bool:
            return unclean

        controller = Controller(
            i, client, self.transport, self.clock, unclean_enabled, register_broker=register
        )
        self.controllers[i] = controller
        await controller.start()
        await self.settle()

    async def restart_at_once(self, i: int) -> None:
        """As kill -9 and a restart whose registration replaces the old one before
        the controller reads /brokers/ids (nothing yields in between): it sees the
        broker bounced."""
        await self.controllers.pop(i).close()
        await self.sessions.pop(i).close()
        await self.start_broker(i, instant=True)

    async def cut_off(self, i: int) -> None:
        """Broker i's session is cut off the store and expires at once; the others
        elect a controller without it."""
        self.sessions[i].isolate(0)
        await self.settle()
        assert not await self.client().store.exists(z.broker_path(i))

    def mark(self) -> dict[int, int]:
        return {b: len(broker.received) for b, broker in self.brokers.items()}

    def since(self, mark: dict[int, int], b: int) -> list[ControlRequest]:
        return self.brokers[b].received[mark[b] :]

    async def kill_broker(self, i: int) -> None:
        await self.controllers.pop(i).close()
        await self.sessions.pop(i).close()
        self.transport.brokers.pop(i)
        await self.settle()

    async def settle(self) -> None:
        """Until every controller has handled all its events (twice seen idle)."""
        for _ in range(50):
            await asyncio.sleep(0.005)
            if all(c.idle.is_set() for c in self.controllers.values()):
                await asyncio.sleep(0.005)
                if all(c.idle.is_set() for c in self.controllers.values()):
                    return
        busy = [i for i, c in self.controllers.items() if not c.idle.is_set()]
        raise AssertionError(f"controllers {busy} still busy after 0.5 s")

    def active(self) -> Controller:
        (active,) = [c for c in self.controllers.values() if c.is_active]
        return active

    def client(self) -> MetadataClient:
        """The test's own session (any broker's may be cut off)."""
        return MetadataClient(self.own_session)

    async def create_topic(self, name: str, assignment: dict[int, list[int]]) -> None:
        await TopicAdmin(self.client()).create_topic(
            NewTopic(name, assignments=assignment),
            [BrokerMetadata(i) for i in self.sessions],
            1,
            1,
        )
        await self.settle()

    async def state(self, topic: str, partition: int) -> z.LeaderIsrAndControllerEpoch:
        states = await self.client().get_partition_states([TopicPartition(topic, partition)])
        return states[TopicPartition(topic, partition)]


def run(tmp: Path, n: int, body: Callable[[Cluster], Awaitable[None]]) -> None:
    async def main() -> None:
        cluster = Cluster(tmp, n)
        await cluster.own_session.start()
        try:
            for i in range(1, n + 1):
                await cluster.start_broker(i)
            await body(cluster)
        finally:
            for c in cluster.controllers.values():
                await c.close()

    asyncio.run(main())


def test_one_controller_is_elected_and_another_takes_over_when_it_dies(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        first = c.active()
        assert first.broker_id == 1 and first.ctx.epoch == 1
        await c.kill_broker(1)
        second = c.active()
        assert second.broker_id in (2, 3) and second.ctx.epoch == 2
        assert second.ctx.live_broker_ids == {2, 3}

    run(tmp_path, 3, body)


def test_a_new_topic_gets_leaders_and_every_broker_hears_of_it(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [2, 1], 1: [3, 2], 2: [1, 3]})
        for p, leader in ((0, 2), (1, 3), (2, 1)):
            state = await c.state("t", p)
            assert state.leader_and_isr.leader == leader
            assert state.leader_and_isr.leader_epoch == 0
            assert state.controller_epoch == 1
        lai = c.brokers[2].of(LeaderAndIsrRequest)
        states = {(s.topic, s.partition): s for r in lai for s in r.partition_states}
        assert set(states) == {("t", 0), ("t", 1)}
        assert states[("t", 0)].leader == 2 and states[("t", 0)].is_new
        for b in c.brokers.values():
            seen = {
                (s.topic, s.partition)
                for r in b.of(UpdateMetadataRequest)
                for s in r.partition_states
            }
            assert {("t", 0), ("t", 1), ("t", 2)} <= seen

    run(tmp_path, 3, body)


def test_partitions_of_a_dead_leader_move_to_the_next_isr_member(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [3, 1, 2], 1: [1, 3, 2]})
        await c.kill_broker(3)
        moved = await c.state("t", 0)
        assert moved.leader_and_isr.leader == 1
        assert moved.leader_and_isr.leader_epoch == 1
        assert set(moved.leader_and_isr.isr) == {1, 2}
        kept = await c.state("t", 1)
        assert kept.leader_and_isr.leader == 1
        assert 3 not in kept.leader_and_isr.isr

    run(tmp_path, 3, body)


def test_a_controller_taking_over_from_a_dead_one_takes_its_replicas_out_of_the_isrs(
    tmp_path: Path,
) -> None:
    """The controller's broker dies: the next controller finds broker 1 gone when it
    starts, and shrinks the ISRs it was in at once rather than leave acks=all
    writes waiting for replica.lag.time.max.ms (Kafka's ReplicaStateMachine.startup)."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [2, 1, 3], 1: [1, 3, 2]})
        assert c.active().broker_id == 1
        await c.kill_broker(1)
        assert c.active().broker_id in (2, 3)
        followed = await c.state("t", 0)
        assert (followed.leader_and_isr.leader, set(followed.leader_and_isr.isr)) == (2, {2, 3})
        led = await c.state("t", 1)
        assert (led.leader_and_isr.leader, set(led.leader_and_isr.isr)) == (3, {2, 3})

    run(tmp_path, 3, body)


def test_without_a_live_isr_member_the_partition_stays_offline_unless_unclean(
    tmp_path: Path,
) -> None:
    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [2]})
        await c.kill_broker(2)
        state = await c.state("t", 0)
        assert state.leader_and_isr.leader == -1
        assert state.leader_and_isr.isr == (2,)  # the last ISR member is kept

    run(tmp_path, 2, body)


def test_deleting_a_topic_stops_its_replicas_and_removes_its_znodes(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.create_topic("doomed", {0: [1, 2], 1: [2, 1]})
        await c.client().mark_topic_for_deletion("doomed")
        await c.settle()
        for b in c.brokers.values():
            stops = {
                (s.topic, s.partition, s.delete_partition)
                for r in b.of(StopReplicaRequest)
                for s in r.partition_states
            }
            assert {("doomed", 0, True), ("doomed", 1, True)} <= stops
        assert not await c.client().topic_exists("doomed")
        assert not await c.client().is_marked_for_deletion("doomed")
        assert "doomed" not in c.active().ctx.all_topics

    run(tmp_path, 2, body)


def test_a_broker_in_controlled_shutdown_is_passed_over_by_other_elections(
    tmp_path: Path,
) -> None:
    """Between its ControlledShutdown and its exit a broker is still registered, but
    no new partition or preferred election makes it a leader or ISR member (Kafka's
    liveBrokerIds leave out the brokers shutting down)."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [3, 1, 2]})
        controller = c.active()
        epoch = controller.ctx.live_brokers[2].epoch
        error, still_led = await controller.controlled_shutdown(2, epoch)
        assert (error, still_led) == (ErrorCode.none, [])
        await c.create_topic("new", {0: [2, 3], 1: [3, 2]})
        for p in (0, 1):
            state = await c.state("new", p)
            assert (state.leader_and_isr.leader, state.leader_and_isr.isr) == (3, (3,))
        results = await controller.elect_leaders(False, (TopicPartition("t", 0),))
        assert results == {TopicPartition("t", 0): ErrorCode.election_not_needed}
        await c.kill_broker(3)
        state = await c.state("t", 0)
        assert state.leader_and_isr.leader == 1
        assert 2 not in state.leader_and_isr.isr

    run(tmp_path, 3, body)


def test_a_controller_whose_epoch_was_taken_writes_nothing_more_in_it(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        # Someone bumped the controller epoch behind the controller's back: its next
        # conditional write fails, it resigns, and a new election starts a new epoch.
        _, stat = await c.sessions[2].get(z.CONTROLLER_EPOCH)
        await c.sessions[2].set(z.CONTROLLER_EPOCH, b"5", stat.version)
        await c.create_topic("t", {0: [1]})
        await c.settle()
        active = c.active()
        assert active.ctx.epoch == 6
        state = await c.state("t", 0)
        assert state.controller_epoch == 6  # written in the new epoch, not the stale one

    run(tmp_path, 2, body)


def test_a_leader_changes_its_isr_through_alter_partition(tmp_path: Path) -> None:
    """Kafka's processAlterPartition: a valid proposal is written conditionally and
    every broker hears of it; stale or wrong proposals get Kafka's error codes."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 2, 3]})
        active = c.active()
        before = (await c.state("t", 0)).leader_and_isr
        assert (before.leader, before.isr) == (1, (1, 2, 3))
        epoch_of = {b: r.epoch for b, r in active.ctx.live_brokers.items()}

        def item(isr: tuple[int, ...], leader_epoch: int = 0, partition_epoch: int = -1) -> Any:
            pe = before.partition_epoch if partition_epoch < 0 else partition_epoch
            return AlterPartitionItem("t", 0, leader_epoch, isr, pe)

        async def ask(broker: int, *items: Any, epoch: int | None = None) -> Any:
            return await active.alter_partition(
                broker, epoch_of[broker] if epoch is None else epoch, items
            )

        error, results = await ask(1, item((1, 2)))
        assert error == ErrorCode.none
        [result] = results
        assert result.error_code == ErrorCode.none
        assert (result.leader_id, result.isr) == (1, (1, 2))
        assert result.partition_epoch == before.partition_epoch + 1
        after = (await c.state("t", 0)).leader_and_isr
        assert (after.isr, after.leader_epoch) == ((1, 2), before.leader_epoch)
        await c.settle()
        for b in c.brokers.values():
            last = [s for r in b.of(UpdateMetadataRequest) for s in r.partition_states][-1]
            assert last.isr == (1, 2)
        # The same proposal again (a retry whose answer was lost): the current state.
        [again] = (await ask(1, item((1, 2))))[1]
        assert (again.error_code, again.partition_epoch) == (ErrorCode.none, after.partition_epoch)

        assert (await ask(1, item((1, 2, 3)), epoch=epoch_of[1] + 1))[0] == (
            ErrorCode.stale_broker_epoch
        )
        codes = [
            (await ask(1, item((1, 2, 3), leader_epoch=5)))[1][0].error_code,
            (await ask(1, item((1, 2, 3))))[1][0].error_code,  # old partition epoch
            (await ask(2, item((1, 2, 3), partition_epoch=after.partition_epoch)))[1][0].error_code,
        ]
        assert codes == [
            ErrorCode.fenced_leader_epoch,
            ErrorCode.invalid_update_version,
            ErrorCode.invalid_request,  # only the leader proposes
        ]
        await c.kill_broker(3)
        [dead] = (await ask(1, item((1, 2, 3), partition_epoch=after.partition_epoch)))[1]
        assert dead.error_code == ErrorCode.ineligible_replica
        other = next(ctl for ctl in c.controllers.values() if not ctl.is_active)
        assert (await other.alter_partition(1, epoch_of[1], ()))[0] == ErrorCode.not_controller

    run(tmp_path, 3, body)


def test_a_reassignment_adds_waits_for_the_isr_moves_the_leader_and_removes(
    tmp_path: Path,
) -> None:
    """KIP-455 on the controller: [1, 2] -> [2, 3] adds 3 (RS [2, 3, 1] persisted
    with AR and RR), completes once 3 is in the ISR: leadership moves to 2, broker 1
    deletes its replica, the znode says [2, 3]. A failover in the middle carries on."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 2]})
        tp = TopicPartition("t", 0)
        active = c.active()
        results = await active.alter_partition_reassignments(
            {tp: (2, 3), TopicPartition("t", 9): (1,), TopicPartition("t", 0): (2, 3)}
        )
        assert results[tp] == (ErrorCode.none, None)
        await c.settle()
        found = await c.client().get_topic_assignment("t")
        assert found is not None
        topic = found[0]
        assert (topic.partitions, topic.adding_replicas, topic.removing_replicas) == (
            {0: [2, 3, 1]}, {0: [3]}, {0: [1]},
        )  # fmt: skip
        [joined] = [s for r in c.brokers[3].of(LeaderAndIsrRequest) for s in r.partition_states]
        assert (joined.replicas, joined.adding_replicas, joined.removing_replicas) == (
            (2, 3, 1), (3,), (1,),
        )  # fmt: skip
        assert list(active.list_partition_reassignments(None)) == [tp]

        # The controller dies with the reassignment half done; the next one goes on.
        await c.kill_broker(active.broker_id)
        await c.start_broker(active.broker_id)
        active = c.active()
        assert active.list_partition_reassignments([tp])[tp].target_replicas == (2, 3)

        state = (await c.state("t", 0)).leader_and_isr
        registration = active.ctx.live_brokers[state.leader]
        error, [result] = await active.alter_partition(
            state.leader,
            registration.epoch,
            (AlterPartitionItem("t", 0, state.leader_epoch, (1, 2, 3), state.partition_epoch),),
        )
        assert (error, result.error_code) == (ErrorCode.none, ErrorCode.none)
        await c.settle()
        done = (await c.state("t", 0)).leader_and_isr
        assert done.leader == 2
        assert 1 not in done.isr
        found = await c.client().get_topic_assignment("t")
        assert found is not None
        assert (found[0].partitions, found[0].adding_replicas) == ({0: [2, 3]}, {})
        deleted = [
            s for r in c.brokers[1].of(StopReplicaRequest) for s in r.partition_states
            if s.delete_partition
        ]  # fmt: skip
        assert [(s.topic, s.partition) for s in deleted] == [("t", 0)]
        assert active.list_partition_reassignments(None) == {}

    run(tmp_path, 3, body)


def test_reassignment_requests_get_kafkas_errors_and_a_cancel_goes_back(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 2]})
        active = c.active()
        tp = TopicPartition("t", 0)
        results = await active.alter_partition_reassignments(
            {
                TopicPartition("t", 5): (1, 2),
                TopicPartition("nope", 0): (1,),
                tp: None,
            }
        )
        assert results[TopicPartition("t", 5)][0] == ErrorCode.unknown_topic_or_partition
        assert results[TopicPartition("nope", 0)][0] == ErrorCode.unknown_topic_or_partition
        assert results[tp][0] == ErrorCode.no_reassignment_in_progress
        for bad in [(), (1, 1), (1, 7), (-1, 2)]:
            code, message = (await active.alter_partition_reassignments({tp: bad}))[tp]
            assert code == ErrorCode.invalid_replica_assignment and message
        assert (await active.alter_partition_reassignments({tp: (1, 3)}))[tp][0] == ErrorCode.none
        assert active.ctx.assignments[tp] == [1, 3, 2]
        # Cancelled: back to [1, 2], the replica being added (3) deleted.
        assert (await active.alter_partition_reassignments({tp: None}))[tp][0] == ErrorCode.none
        await c.settle()
        assert active.ctx.assignments[tp] == [1, 2]
        assert active.list_partition_reassignments(None) == {}
        deleted = [
            s for r in c.brokers[3].of(StopReplicaRequest) for s in r.partition_states
            if s.delete_partition
        ]  # fmt: skip
        assert len(deleted) == 1

    run(tmp_path, 3, body)


def test_the_reassign_partitions_znode_is_acted_on_and_removed_when_done(
    tmp_path: Path,
) -> None:
    """/admin/reassign_partitions (kafka-reassign-partitions --zookeeper): the
    controller starts what it asks, drops what it cannot do, and deletes the znode
    once every partition in it is done."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 2], 1: [1, 2]})
        await c.client().create_reassignment(
            {TopicPartition("t", 0): [2, 1], TopicPartition("t", 7): [1, 2]}
        )
        await c.settle()
        active = c.active()
        assert active.ctx.assignments[TopicPartition("t", 0)] == [2, 1]
        assert await c.client().get_reassignment() is None
        found = await c.client().get_topic_assignment("t")
        assert found is not None
        assert found[0].partitions == {0: [2, 1], 1: [1, 2]}

    run(tmp_path, 3, body)


async def write_state_behind_the_controller(
    c: Cluster,
    topic: str,
    partition: int,
    isr: tuple[int, ...] | None = None,
    controller_epoch: int | None = None,
) -> None:
    """A write of the partition's state znode the controller does not know of, as
    when ZooKeeper applied its multi but the connection was lost before the answer,
    and KazooRetry's second attempt met BADVERSION: here through the store. The
    znode's version moves on; its content changes only where asked."""
    store = c.client().store
    path = z.partition_state_path(topic, partition)
    data, stat = await store.get(path)
    state = z.decode_partition_state(data, stat.version)
    li = state.leader_and_isr
    written = z.LeaderIsrAndControllerEpoch(
        z.LeaderAndIsr(li.leader, li.leader_epoch, li.isr if isr is None else isr),
        state.controller_epoch if controller_epoch is None else controller_epoch,
    )
    await store.set(path, z.encode_partition_state(written), stat.version)


def test_an_election_after_a_conflict_on_the_state_znode_elects_from_what_it_holds(
    tmp_path: Path,
) -> None:
    """Kafka's doElectLeaderForPartitions: a BADVERSION on the state znode means read
    it again and elect from what it holds. The controller gave up and kept its stale
    copy, so the dead leader's partition stayed without a leader (and every later
    write of it failed the same way) until a controller failover."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [2, 1, 3]})
        assert c.active().broker_id == 1
        await write_state_behind_the_controller(c, "t", 0)
        await c.kill_broker(2)
        state = (await c.state("t", 0)).leader_and_isr
        assert (state.leader, set(state.isr)) == (1, {1, 3})
        told = [s for r in c.brokers[3].of(LeaderAndIsrRequest) for s in r.partition_states]
        assert told[-1].leader == 1

    run(tmp_path, 3, body)


def test_an_isr_shrink_after_a_conflict_on_the_state_znode_is_retried(tmp_path: Path) -> None:
    """Kafka's removeReplicasFromIsr retries a BADVERSION with the state read again:
    a dead follower leaves the ISR. It stayed there, and acks=all writes waited
    replica.lag.time.max.ms for it."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 2, 3]})
        await write_state_behind_the_controller(c, "t", 0)
        await c.kill_broker(3)
        state = (await c.state("t", 0)).leader_and_isr
        assert (state.leader, set(state.isr)) == (1, {1, 2})

    run(tmp_path, 3, body)


def test_alter_partition_after_a_conflict_on_the_state_znode_answers_from_what_it_holds(
    tmp_path: Path,
) -> None:
    """The controller's ISR write was applied, but it met BADVERSION (a retried
    multi). The proposal is checked again against the znode read anew: it is
    already applied, so it succeeds, and the next one (in the new partition epoch)
    too. Both were INVALID_UPDATE_VERSION, and so was every later proposal, until a
    controller failover."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 2, 3]})
        active = c.active()
        before = (await c.state("t", 0)).leader_and_isr
        epoch = active.ctx.live_brokers[1].epoch
        await write_state_behind_the_controller(c, "t", 0, isr=(1, 2))
        item = AlterPartitionItem("t", 0, before.leader_epoch, (1, 2), before.partition_epoch)
        [shrunk] = (await active.alter_partition(1, epoch, (item,)))[1]
        assert (shrunk.error_code, shrunk.isr) == (ErrorCode.none, (1, 2))
        assert shrunk.partition_epoch == before.partition_epoch + 1
        item = AlterPartitionItem("t", 0, before.leader_epoch, (1, 2, 3), shrunk.partition_epoch)
        [expanded] = (await active.alter_partition(1, epoch, (item,)))[1]
        assert (expanded.error_code, expanded.isr) == (ErrorCode.none, (1, 2, 3))
        assert (await c.state("t", 0)).leader_and_isr.isr == (1, 2, 3)


def test_a_broker_restarted_at_once_is_not_elected_while_its_failure_is_handled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """kill -9 and a restart whose registration replaces the old one before the
    controller looks: it sees the broker bounced. While its failure is handled the
    broker is not live, so the partitions it led go to another ISR member; then it
    starts up again and is told to follow them, in its new epoch. (It was counted
    live: elected again, then written leader -1 as it left the ISR, and those
    partitions stayed without a leader for good.)"""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [2, 1, 3], 1: [2, 3, 1], 2: [1, 2, 3]})
        before = c.active().ctx.live_brokers[2].epoch
        mark = c.mark()
        with caplog.at_level(logging.INFO, "moldau.controller"):
            await c.restart_at_once(2)
        assert "bounced [2]" in caplog.text
        active = c.active()
        after = active.ctx.live_brokers[2].epoch
        assert after > before
        leaders = {p: (await c.state("t", p)).leader_and_isr.leader for p in range(3)}
        assert leaders == {0: 1, 1: 3, 2: 1}
        told = [r for r in c.since(mark, 2) if isinstance(r, LeaderAndIsrRequest)]
        assert {r.broker_epoch for r in c.since(mark, 2)} == {after}
        states = [s for r in told for s in r.partition_states]
        assert [s.partition for s in states if s.leader == 2] == []  # never told to lead
        assert {s.partition: s.leader for s in states} == leaders

    run(tmp_path, 3, body)


def test_a_partition_left_without_a_leader_by_its_replica_going_offline_is_elected_again(
    tmp_path: Path,
) -> None:
    """Taking a partition's leader out of its ISR writes leader -1: the partition is
    Offline then, so the next election gives it a leader (it stayed Online, which no
    election looks at)."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [2, 1, 3]})
        active = c.active()
        tp = TopicPartition("t", 0)
        await active.replica_sm.handle_state_changes(
            [PartitionReplica(tp, 2)], ReplicaState.OFFLINE
        )
        assert (await c.state("t", 0)).leader_and_isr.leader == -1
        await active.partition_sm.trigger_online_partition_state_change()
        active.batch.send()
        assert (await c.state("t", 0)).leader_and_isr.leader == 1

    run(tmp_path, 3, body)


def test_a_reassignment_after_a_conflict_on_the_state_znode_bumps_the_leader_epoch(
    tmp_path: Path,
) -> None:
    """A reassignment starts with a new leader epoch that tells every replica the
    new replica sets (Kafka's updateLeaderEpoch, which retries a BADVERSION). It
    was skipped: the replicas never heard of the replicas being added."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 2]})
        await write_state_behind_the_controller(c, "t", 0)
        tp = TopicPartition("t", 0)
        results = await c.active().alter_partition_reassignments({tp: (1, 2, 3)})
        assert results[tp] == (ErrorCode.none, None)
        await c.settle()
        assert (await c.state("t", 0)).leader_and_isr.leader_epoch == 1
        [last] = [s for r in c.brokers[2].of(LeaderAndIsrRequest) for s in r.partition_states][-1:]
        assert (last.leader_epoch, last.adding_replicas) == (1, (3,))

    run(tmp_path, 3, body)


def test_a_state_znode_written_in_a_newer_controller_epoch_makes_the_controller_resign(
    tmp_path: Path,
) -> None:
    """Read again after a BADVERSION, the znode names a newer controller epoch:
    another controller wrote it, so this one resigns (its epoch is stale) and the
    next controller elects the leader. This one carried on in its old epoch."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [2, 1, 3]})
        assert c.active().ctx.epoch == 1
        await write_state_behind_the_controller(c, "t", 0, controller_epoch=2)
        await c.kill_broker(2)
        active = c.active()
        assert active.ctx.epoch == 2
        state = await c.state("t", 0)
        assert state.leader_and_isr.leader in (1, 3)


def test_a_controller_whose_session_expired_resigns_before_anything_else(
    tmp_path: Path,
) -> None:
    """Broker 1, the controller, is cut off past its session while broker 3, dead
    before, starts again. Healed, broker 1 hears of the expiry before anything of
    the new session: it resigns, registers again, then takes part in the election.
    No request of its old epoch reaches a broker after the heal (it handled its
    BrokerChange first, as the controller it no longer was, and sent the restarted
    broker UpdateMetadata from stale state), and the new controller tells it to
    follow its partitions, in its new broker epoch."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
        assert c.active().broker_id == 1
        await c.kill_broker(3)
        await c.cut_off(1)
        # (broker 1, cut off, still believes it is the controller)
        assert (c.controllers[2].is_active, c.controllers[2].ctx.epoch) == (True, 2)
        await c.start_broker(3)
        # Its watches fire as the ZooKeeper backend's do when the connection drops
        # (children first): the BrokerChange waits for the store, in progress.
        c.controllers[1].enqueue(BrokerChange())
        c.controllers[1].enqueue(ControllerChange())
        for _ in range(100):
            if c.controllers[1].processing is not None:
                break
            await asyncio.sleep(0)
        assert c.controllers[1].processing == BrokerChange()
        mark = c.mark()
        c.sessions[1].heal()
        await c.settle()
        stale = [
            (b, type(r).__name__) for b in c.brokers for r in c.since(mark, b)
            if r.controller_epoch < 2
        ]  # fmt: skip
        assert stale == []
        registration = await c.own_session.exists(z.broker_path(1))
        assert registration is not None
        assert registration.ephemeral_owner == c.sessions[1].session_id
        active = c.active()
        assert active.broker_id == 2
        assert active.ctx.live_brokers[1].epoch == registration.czxid
        told = [r for r in c.since(mark, 1) if isinstance(r, LeaderAndIsrRequest)]
        assert {s.partition for r in told for s in r.partition_states} == {0, 1, 2}
        assert {r.broker_epoch for r in told} == {registration.czxid}

    run(tmp_path, 3, body)


def test_a_broker_stands_for_election_only_once_registered_on_its_new_session(
    tmp_path: Path,
) -> None:
    """Healed after its session expired, broker 1 fails to register at first; the
    controller is gone meanwhile. It does not lead a cluster it is not live in
    (its controller would never count itself live): it tries again, then stands,
    and as controller counts itself live."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 2]})
        await c.cut_off(1)
        await c.kill_broker(2)
        c.refuse_registration.add(1)
        c.sessions[1].heal()
        await c.settle()
        assert await c.own_session.exists(z.CONTROLLER) is None
        assert not c.controllers[1].is_active
        for _ in range(int(REGISTER_RETRY_S * 3 / 0.01)):
            if c.controllers[1].is_active:
                break
            await asyncio.sleep(0.01)
        await c.settle()
        assert c.active().ctx.live_broker_ids == {1}

    run(tmp_path, 2, body)


def test_what_a_deposed_controller_had_built_never_goes_out(tmp_path: Path) -> None:
    """The controller's epoch is taken while it handles a bounce: its write fails
    half way, after it built a StopReplica for the old incarnation. It resigns and
    wins the next election: nothing built in the old epoch goes out in the new one
    (the restarted broker got a StopReplica for the replica it was to follow)."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [2, 3]})
        _, stat = await c.own_session.get(z.CONTROLLER_EPOCH)
        await c.own_session.set(z.CONTROLLER_EPOCH, b"5", stat.version)
        mark = c.mark()
        await c.restart_at_once(3)
        active = c.active()
        assert (active.broker_id, active.ctx.epoch) == (1, 6)
        assert [r for r in c.since(mark, 3) if isinstance(r, StopReplicaRequest)] == []
        told = [s for r in c.since(mark, 3) if isinstance(r, LeaderAndIsrRequest)
                for s in r.partition_states]  # fmt: skip
        assert [(s.partition, s.leader) for s in told] == [(0, 2)]

    run(tmp_path, 3, body)


def test_an_event_that_fails_leaves_nothing_for_the_next_to_send(tmp_path: Path) -> None:
    """A controlled shutdown fails half way (the store refuses the ISR write after
    the follower's StopReplica was built): the next event does not send that
    StopReplica, which would stop a replica the controller still counts online."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 3]})
        active = c.active()
        client = active.client
        written = client.update_partition_state

        async def refuse(*_: object) -> None:
            raise StoreError("the store failed")

        client.update_partition_state = refuse  # type: ignore[assignment,method-assign]
        epoch = active.ctx.live_brokers[3].epoch
        error, _ = await active.controlled_shutdown(3, epoch)
        assert error == ErrorCode.unknown_server_error
        client.update_partition_state = written  # type: ignore[method-assign]
        mark = c.mark()
        await c.create_topic("u", {0: [1]})
        assert c.since(mark, 1)  # the next event did send
        assert [r for r in c.since(mark, 3) if isinstance(r, StopReplicaRequest)] == []

    run(tmp_path, 3, body)


def test_requests_waiting_for_a_broker_are_dropped_when_the_controller_resigns(
    tmp_path: Path,
) -> None:
    """Broker 3 answers slowly and requests wait for it when the controller's epoch
    is taken: it resigns (and wins the next election), and none of the requests of
    its old epoch still waiting goes out (Kafka's removeBroker clears the queue)."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 2, 3]})
        c.brokers[3].answering.clear()
        await c.create_topic("u", {0: [1, 2]})
        await c.create_topic("v", {0: [2, 1]})
        _, stat = await c.own_session.get(z.CONTROLLER_EPOCH)
        await c.own_session.set(z.CONTROLLER_EPOCH, b"5", stat.version)
        await c.create_topic("w", {0: [1, 2]})
        assert c.active().ctx.epoch == 6
        mark = c.mark()
        c.brokers[3].answering.set()
        await c.settle()
        late = [r for r in c.since(mark, 3) if r.controller_epoch < 6]
        assert late == []
        assert c.since(mark, 3)  # what the new epoch sends it does arrive

    run(tmp_path, 3, body)


def test_alter_partition_that_finds_a_newer_controller_answers_not_controller(
    tmp_path: Path,
) -> None:
    """The ISR write meets a state znode of a newer controller epoch: this controller
    resigns, and the leader is told NOT_CONTROLLER for its whole request (as Kafka), so
    it sends it to the new controller. It was told UNKNOWN_SERVER_ERROR per partition."""

    async def body(c: Cluster) -> None:
        await c.create_topic("t", {0: [1, 2, 3]})
        active = c.active()
        before = (await c.state("t", 0)).leader_and_isr
        epoch = active.ctx.live_brokers[1].epoch
        await write_state_behind_the_controller(c, "t", 0, isr=(1, 2, 3), controller_epoch=2)
        item = AlterPartitionItem("t", 0, before.leader_epoch, (1, 2), before.partition_epoch)
        assert await active.alter_partition(1, epoch, (item,)) == (ErrorCode.not_controller, ())

    run(tmp_path, 3, body)
