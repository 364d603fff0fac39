"""MetadataClient: Kafka's znode operations, typed, over any MetadataStore backend
(what Kafka calls KafkaZkClient). Controller writes are conditional on the
controller epoch znode's version: if another controller has bumped it, the write
fails with ControllerMovedError and the caller resigns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence

from moldau.metadata import znodes as z
from moldau.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    Op,
    SetDataOp,
    Watcher,
    parent_of,
)
from moldau.storage.partition_name import TopicPartition

log = logging.getLogger(__name__)

# Partitions whose state znodes one write creates (3 ops each, far below
# ZooKeeper's 1 MB request limit).
STATE_WRITE_BATCH = 200


class ControllerMovedError(Exception):
    """Another broker became controller: this one must resign."""


class MetadataClient:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def create_top_level_paths(self) -> None:
        for path in z.PERSISTENT_PATHS:
            await self.store.ensure_path(path)

    # -- cluster id ----------------------------------------------------------------------

    async def get_or_create_cluster_id(self, proposed: str) -> str:
        try:
            await self.store.create(z.CLUSTER_ID, z.encode_cluster_id(proposed), make_parents=True)
            return proposed
        except NodeExistsError:
            data, _ = await self.store.get(z.CLUSTER_ID)
            return z.decode_cluster_id(data)

    # -- brokers -------------------------------------------------------------------------

    async def register_broker(
        self, broker: z.BrokerRegistration, now_ms: int, wait_s: float = 0.0
    ) -> int:
        """Create the ephemeral registration; return the broker epoch (its czxid).

        A registration left by another session (this broker's previous process,
        killed before its session expired) is waited out for up to `wait_s`; one
        that stays means another live broker has this id."""
        path = z.broker_path(broker.id)
        data = z.encode_broker(broker, now_ms)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        gone = asyncio.Event()

        def on_change(_: object) -> None:
            gone.set()

        while True:
            try:
                await self.store.create(path, data, ephemeral=True)
                break
            except NodeExistsError:
                stat = await self.store.exists(path)
                if stat is not None and stat.ephemeral_owner == self.store.session_id:
                    break  # ours: a create retried after a connection loss
                left = deadline - loop.time()
                if left <= 0:
                    raise NodeExistsError(
                        f"broker id {broker.id} is registered by another live session: "
                        "another broker has this broker.id, or this broker's previous "
                        "process is still within its zookeeper.session.timeout.ms"
                    ) from None
                gone.clear()
                if await self.store.exists(path, on_change) is not None:
                    log.info("broker %d: waiting for an old registration to expire", broker.id)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(left, 1.0)):
                            await gone.wait()
        stat = await self.store.exists(path)
        assert stat is not None
        return stat.czxid

    async def get_broker_ids(self, watch: Watcher | None = None) -> list[int]:
        return sorted(int(c) for c in await self.store.get_children(z.BROKER_IDS, watch))

    async def get_all_brokers(
        self, watch: Watcher | None = None
    ) -> dict[int, z.BrokerRegistration]:
        out = {}
        for broker_id in await self.get_broker_ids(watch):
            found = await self.store.get_or_none(z.broker_path(broker_id))
            if found is not None:
                data, stat = found
                out[broker_id] = z.decode_broker(broker_id, data, stat.czxid)
        return out

    # -- controller ----------------------------------------------------------------------

    async def get_controller_id(self, watch: Watcher | None = None) -> int | None:
        found = await self.store.get_or_none(z.CONTROLLER, watch)
        return None if found is None else z.decode_controller(found[0])

    async def try_become_controller(self, broker_id: int, now_ms: int) -> tuple[int, int] | None:
        """Create /controller and bump /controller_epoch, atomically.
        Returns (epoch, epoch znode version), or None if another broker is controller."""
        while True:
            found = await self.store.get_or_none(z.CONTROLLER_EPOCH)
            if found is None:
                with contextlib.suppress(NodeExistsError):
                    await self.store.create(z.CONTROLLER_EPOCH, b"0")
                continue
            data, stat = found
            epoch = int(data) + 1
            try:
                results = await self.store.multi(
                    [
                        CreateOp(
                            z.CONTROLLER, z.encode_controller(broker_id, now_ms), ephemeral=True
                        ),
                        SetDataOp(z.CONTROLLER_EPOCH, str(epoch).encode(), stat.version),
                    ]
                )
            except NodeExistsError:
                return None
            except BadVersionError:
                continue  # someone else bumped the epoch meanwhile; look again
            new_stat = results[1]
            assert not isinstance(new_stat, str) and new_stat is not None
            return epoch, new_stat.version

    async def delete_controller_node(self) -> None:
        with contextlib.suppress(NoNodeError):
            await self.store.delete(z.CONTROLLER)

    async def controller_write(self, epoch_zk_version: int, ops: Sequence[Op]) -> None:
        """Apply ops only if the controller epoch is still ours."""
        try:
            await self.store.multi([CheckOp(z.CONTROLLER_EPOCH, epoch_zk_version), *ops])
        except BadVersionError:
            stat = await self.store.exists(z.CONTROLLER_EPOCH)
            if stat is None or stat.version != epoch_zk_version:
                raise ControllerMovedError("controller epoch changed") from None
            raise

    # -- topics --------------------------------------------------------------------------

    async def get_all_topics(self, watch: Watcher | None = None) -> list[str]:
        return await self.store.get_children(z.TOPICS, watch)

    async def topic_exists(self, topic: str) -> bool:
        return await self.store.exists(z.topic_path(topic)) is not None

    async def get_topic_assignment(
        self, topic: str, watch: Watcher | None = None
    ) -> tuple[z.TopicAssignment, int] | None:
        """The topic's assignment and its znode version; None if it does not exist."""
        found = await self.store.get_or_none(z.topic_path(topic), watch)
        if found is None:
            return None
        data, stat = found
        return z.decode_topic(data), stat.version

    async def create_topic(
        self, topic: str, assignment: z.TopicAssignment, config: Mapping[str, str]
    ) -> None:
        """Write the topic's config, then its assignment (the controller acts on the
        latter), in one atomic step. NodeExistsError if the topic exists."""
        ops: list[Op] = []
        config_path = z.topic_config_path(topic)
        if await self.store.exists(config_path) is not None:
            ops.append(SetDataOp(config_path, z.encode_config(config)))
        else:
            ops.append(CreateOp(config_path, z.encode_config(config)))
        ops.append(CreateOp(z.topic_path(topic), z.encode_topic(assignment)))
        await self.store.multi(ops)

    async def set_topic_assignment(
        self, topic: str, assignment: z.TopicAssignment, expected_version: int
    ) -> None:
        await self.store.set(z.topic_path(topic), z.encode_topic(assignment), expected_version)

    async def write_topic_assignment(
        self, topic: str, assignment: z.TopicAssignment, epoch_zk_version: int
    ) -> None:
        """The controller's write of a topic's replicas (a reassignment's steps)."""
        data = z.encode_topic(assignment)
        await self.controller_write(epoch_zk_version, [SetDataOp(z.topic_path(topic), data)])

    # -- partition reassignment through /admin/reassign_partitions -----------------------

    async def get_reassignment(
        self, watch: Watcher | None = None
    ) -> dict[TopicPartition, list[int]] | None:
        """What /admin/reassign_partitions asks (None if absent), watching it."""
        if await self.store.exists(z.REASSIGN_PARTITIONS, watch) is None:
            return None
        found = await self.store.get_or_none(z.REASSIGN_PARTITIONS)
        if found is None:
            return None
        try:
            return z.decode_reassignment(found[0])
        except ValueError as e:
            log.warning("ignoring %s", e)
            return {}

    async def create_reassignment(self, targets: Mapping[TopicPartition, Sequence[int]]) -> None:
        """As kafka-reassign-partitions --zookeeper did. NodeExistsError if one runs."""
        await self.store.create(
            z.REASSIGN_PARTITIONS, z.encode_reassignment(targets), make_parents=True
        )

    async def set_reassignment(
        self, targets: Mapping[TopicPartition, Sequence[int]], epoch_zk_version: int
    ) -> None:
        """Rewrite what is left of /admin/reassign_partitions; delete it when empty."""
        path = z.REASSIGN_PARTITIONS
        if await self.store.exists(path) is None:
            return
        op: Op = SetDataOp(path, z.encode_reassignment(targets)) if targets else DeleteOp(path)
        with contextlib.suppress(NoNodeError):
            await self.controller_write(epoch_zk_version, [op])

    # -- partition states ----------------------------------------------------------------

    async def get_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, z.LeaderIsrAndControllerEpoch]:
        tps = list(partitions)
        paths = [z.partition_state_path(tp.topic, tp.partition) for tp in tps]
        return {
            tp: z.decode_partition_state(found[0], found[1].version)
            for tp, found in zip(tps, await self.store.get_many(paths), strict=True)
            if found is not None
        }

    async def create_partition_state(
        self,
        tp: TopicPartition,
        state: z.LeaderIsrAndControllerEpoch,
        epoch_zk_version: int,
    ) -> None:
        ops: list[Op] = []
        partitions = z.topic_partitions_path(tp.topic)
        if await self.store.exists(partitions) is None:
            ops.append(CreateOp(partitions))
        partition = z.partition_path(tp.topic, tp.partition)
        if await self.store.exists(partition) is None:
            ops.append(CreateOp(partition))
        ops.append(
            CreateOp(
                z.partition_state_path(tp.topic, tp.partition), z.encode_partition_state(state)
            )
        )
        await self.controller_write(epoch_zk_version, ops)

    async def create_partition_states(
        self,
        states: Mapping[TopicPartition, z.LeaderIsrAndControllerEpoch],
        epoch_zk_version: int,
    ) -> set[TopicPartition]:
        """Create many partitions' state znodes in a few writes (Kafka pipelines
        them); returns those created. One whose state exists is left out, logged."""
        created: set[TopicPartition] = set()
        existing: dict[str, set[str]] = {}
        items = sorted(states.items())
        for start in range(0, len(items), STATE_WRITE_BATCH):
            chunk = items[start : start + STATE_WRITE_BATCH]
            ops: list[Op] = []
            for tp, state in chunk:
                if tp.topic not in existing:
                    try:
                        children = await self.store.get_children(z.topic_partitions_path(tp.topic))
                        existing[tp.topic] = set(children)
                    except NoNodeError:
                        ops.append(CreateOp(z.topic_partitions_path(tp.topic)))
                        existing[tp.topic] = set()
                if str(tp.partition) not in existing[tp.topic]:
                    ops.append(CreateOp(z.partition_path(tp.topic, tp.partition)))
                    existing[tp.topic].add(str(tp.partition))
                path = z.partition_state_path(tp.topic, tp.partition)
                ops.append(CreateOp(path, z.encode_partition_state(state)))
            try:
                await self.controller_write(epoch_zk_version, ops)
                created |= {tp for tp, _ in chunk}
            except (NodeExistsError, NoNodeError):
                # Someone else wrote some of them: one at a time, keeping the others.
                existing.clear()
                for tp, state in chunk:
                    try:
                        await self.create_partition_state(tp, state, epoch_zk_version)
                        created.add(tp)
                    except NodeExistsError:
                        log.warning("%s already has a state znode", tp)
        return created

    async def update_partition_state(
        self,
        tp: TopicPartition,
        state: z.LeaderIsrAndControllerEpoch,
        epoch_zk_version: int,
    ) -> z.LeaderAndIsr:
        """Conditional on the state znode's version (the partition epoch); returns the
        LeaderAndIsr with its new partition epoch. BadVersionError on a conflict."""
        li = state.leader_and_isr
        path = z.partition_state_path(tp.topic, tp.partition)
        await self.controller_write(
            epoch_zk_version,
            [SetDataOp(path, z.encode_partition_state(state), li.partition_epoch)],
        )
        return z.LeaderAndIsr(li.leader, li.leader_epoch, li.isr, li.partition_epoch + 1)

    # -- configs -------------------------------------------------------------------------

    async def get_topic_config(self, topic: str) -> dict[str, str]:
        found = await self.store.get_or_none(z.topic_config_path(topic))
        return {} if found is None else z.decode_config(found[0])

    async def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        """Replace the topic's overrides and announce the change to every broker."""
        await self._set_config(z.topic_config_path(topic), f"topics/{topic}", config)

    async def get_broker_config(self, entity: str) -> dict[str, str]:
        """Dynamic configs of a broker id, or of DEFAULT_BROKER_ENTITY."""
        found = await self.store.get_or_none(z.broker_config_path(entity))
        return {} if found is None else z.decode_config(found[0])

    async def set_broker_config(self, entity: str, config: Mapping[str, str]) -> None:
        await self._set_config(z.broker_config_path(entity), f"brokers/{entity}", config)

    async def get_user_config(self, user: str) -> dict[str, str]:
        """A user's entry in /config/users (SCRAM credentials by mechanism)."""
        found = await self.store.get_or_none(z.user_config_path(user))
        return {} if found is None else z.decode_config(found[0])

    async def set_user_config(self, user: str, config: Mapping[str, str]) -> None:
        """Replace a user's entry and announce it, as kafka-configs does."""
        sanitized = z.sanitize(user)
        await self._set_config(z.user_config_path(user), f"users/{sanitized}", config)

    async def get_config_users(self) -> list[str]:
        """The users with an entry in /config/users."""
        if await self.store.exists(z.CONFIG_USERS) is None:
            return []
        return [z.desanitize(n) for n in await self.store.get_children(z.CONFIG_USERS)]

    async def get_entity_config(self, entity_path: str) -> dict[str, str]:
        """The config map of an entity path under /config ("users/<u>",
        "users/<u>/clients/<c>", "clients/<c>": quotas, and a user's credentials)."""
        found = await self.store.get_or_none(f"/config/{entity_path}")
        return {} if found is None else z.decode_config(found[0])

    async def set_entity_config(self, entity_path: str, config: Mapping[str, str]) -> None:
        """Replace an entity's config map and announce it by its entity path."""
        await self._set_config(f"/config/{entity_path}", entity_path, config)

    async def get_quota_entity_paths(self) -> list[str]:
        """Every entity path with a config map that may hold quotas: users, users'
        client-ids, and client-ids."""
        paths: list[str] = []
        for root, kind in ((z.CONFIG_USERS, "users"), (z.CONFIG_CLIENTS, "clients")):
            with contextlib.suppress(NoNodeError):
                for name in await self.store.get_children(root):
                    paths.append(f"{kind}/{name}")
                    if kind == "users":
                        with contextlib.suppress(NoNodeError):
                            for c in await self.store.get_children(f"{root}/{name}/clients"):
                                paths.append(f"users/{name}/clients/{c}")
        return paths

    async def _set_config(self, path: str, entity_path: str, config: Mapping[str, str]) -> None:
        data = z.encode_config(config)
        if await self.store.exists(path) is None:
            await self.store.create(path, data, make_parents=True)
        else:
            await self.store.set(path, data)
        await self.store.create(
            f"{z.CONFIG_CHANGES}/{z.CONFIG_CHANGE_PREFIX}",
            z.encode_config_change(entity_path),
            sequential=True,
        )

    async def get_config_changes(self, watch: Watcher | None = None) -> list[str]:
        return await self.store.get_children(z.CONFIG_CHANGES, watch)

    async def get_config_change(self, name: str) -> str | None:
        found = await self.store.get_or_none(f"{z.CONFIG_CHANGES}/{name}")
        return None if found is None else z.decode_config_change(found[0])

    # -- ACLs ----------------------------------------------------------------------------

    async def get_all_acls(self) -> list[tuple[str, str, bool, list[dict[str, str]]]]:
        """Every stored ACL node: (resource type name, resource name, prefixed, entries)."""
        nodes: list[tuple[str, str, bool]] = []
        for prefixed in (False, True):
            root = z.acl_root(prefixed)
            try:
                types = await self.store.get_children(root)
            except NoNodeError:
                continue
            for rtype in types:
                with contextlib.suppress(NoNodeError):
                    for name in await self.store.get_children(f"{root}/{rtype}"):
                        nodes.append((rtype, name, prefixed))
        # One pipelined read of every node (ZooKeeper: not a round trip each).
        found = await self.store.get_many([z.acl_path(*n) for n in nodes])
        return [(*n, z.decode_acls(f[0])) for n, f in zip(nodes, found, strict=True) if f]

    async def get_resource_acls(
        self, rtype: str, name: str, prefixed: bool
    ) -> tuple[list[dict[str, str]], int]:
        """The ACL entries of one resource pattern, and its node's version (-1: none)."""
        found = await self.store.get_or_none(z.acl_path(rtype, name, prefixed))
        if found is None:
            return [], -1
        return z.decode_acls(found[0]), found[1].version

    async def set_resource_acls(
        self,
        rtype: str,
        name: str,
        prefixed: bool,
        entries: Sequence[Mapping[str, str]],
        version: int,
    ) -> None:
        """Replace a resource pattern's ACLs if its node is still at `version` (-1: it
        did not exist), deleting the node when none remain, and announce the change
        in the same write. BadVersionError/NodeExistsError/NoNodeError: someone else
        changed it first; read again and retry."""
        path = z.acl_path(rtype, name, prefixed)
        if version < 0:
            await self.store.ensure_path(parent_of(path))
        ops: list[Op] = []
        if not entries:
            if version < 0:
                return
            ops.append(DeleteOp(path, version))
        elif version < 0:
            ops.append(CreateOp(path, z.encode_acls(entries)))
        else:
            ops.append(SetDataOp(path, z.encode_acls(entries), version))
        changes = z.EXTENDED_ACL_CHANGES if prefixed else z.ACL_CHANGES
        ops.append(
            CreateOp(
                f"{changes}/{z.ACL_CHANGE_PREFIX}",
                z.encode_acl_change(rtype, name, prefixed),
                sequential=True,
            )
        )
        await self.store.multi(ops)

    async def purge_acl_changes(self, keep: int) -> None:
        """Delete all but the newest `keep` notifications of each change path: every
        cache reloads everything on any name it has not seen, so the old ones only
        take room (Kafka deletes them after 15 minutes)."""
        for path in (z.ACL_CHANGES, z.EXTENDED_ACL_CHANGES):
            names = sorted(await self.store.get_children(path))
            for name in names[: max(len(names) - keep, 0)]:
                with contextlib.suppress(NoNodeError):  # another broker purged it first
                    await self.store.delete(f"{path}/{name}")

    async def get_acl_changes(self, watch: Watcher | None = None) -> list[str]:
        """Both change paths' notifications, as "<path>/<name>"."""
        out: list[str] = []
        for path in (z.ACL_CHANGES, z.EXTENDED_ACL_CHANGES):
            out.extend(f"{path}/{n}" for n in await self.store.get_children(path, watch))
        return out

    # -- deletion ------------------------------------------------------------------------

    async def mark_topic_for_deletion(self, topic: str) -> None:
        with contextlib.suppress(NodeExistsError):
            await self.store.create(z.delete_topic_path(topic))

    async def is_marked_for_deletion(self, topic: str) -> bool:
        return await self.store.exists(z.delete_topic_path(topic)) is not None

    # -- log directory events (KIP-112) -------------------------------------------------

    async def propagate_log_dir_event(self, broker_id: int) -> None:
        """Tell the controller that a log directory of `broker_id` failed."""
        await self.store.create(
            f"{z.LOG_DIR_EVENTS}/{z.LOG_DIR_EVENT_PREFIX}",
            z.encode_log_dir_event(broker_id),
            sequential=True,
            make_parents=True,
        )

    async def get_log_dir_events(self, watch: Watcher | None = None) -> dict[str, int]:
        """Pending notifications: znode name -> broker id."""
        events = {}
        for name in await self.store.get_children(z.LOG_DIR_EVENTS, watch):
            with contextlib.suppress(NoNodeError):
                data, _ = await self.store.get(f"{z.LOG_DIR_EVENTS}/{name}")
                events[name] = z.decode_log_dir_event(data)
        return events

    async def delete_log_dir_events(self, names: list[str], epoch_zk_version: int) -> None:
        for name in names:
            with contextlib.suppress(NoNodeError):
                await self.controller_write(
                    epoch_zk_version, [DeleteOp(f"{z.LOG_DIR_EVENTS}/{name}")]
                )

    async def get_topics_to_delete(self, watch: Watcher | None = None) -> list[str]:
        return await self.store.get_children(z.DELETE_TOPICS, watch)

    async def remove_deletion_marker(self, topic: str, epoch_zk_version: int) -> None:
        with contextlib.suppress(NoNodeError):
            await self.controller_write(epoch_zk_version, [DeleteOp(z.delete_topic_path(topic))])

    async def delete_topic_znodes(self, topic: str, epoch_zk_version: int) -> None:
        """Remove a topic's assignment, states, config and deletion marker."""
        store = self.store
        ops: list[Op] = []
        for p in await self._subtree(z.topic_path(topic)):
            ops.append(DeleteOp(p))
        if await store.exists(z.topic_config_path(topic)) is not None:
            ops.append(DeleteOp(z.topic_config_path(topic)))
        if await store.exists(z.delete_topic_path(topic)) is not None:
            ops.append(DeleteOp(z.delete_topic_path(topic)))
        await self.controller_write(epoch_zk_version, ops)

    async def _subtree(self, path: str) -> list[str]:
        """`path` and everything under it, deepest first."""
        try:
            children = await self.store.get_children(path)
        except NoNodeError:
            return []
        out: list[str] = []
        for c in children:
            out += await self._subtree(f"{path}/{c}")
        return [*out, path]
