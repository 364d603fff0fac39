"""Each broker's copy of the cluster's ACLs (Kafka's AclAuthorizer cache with its
ZkNodeChangeNotificationListener): loaded at start-up, then re-read whenever a
change notification appears under /kafka-acl-changes or /kafka-acl-extended-changes.
The store's watch fires at once, so every broker sees a change well within a second.

A change replaces `authorizer` with a new immutable Authorizer: a request decides
against one consistent set of ACLs. ACL writes (CreateAcls/DeleteAcls) go through
here too, as conditional updates of one resource pattern's node."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from moldau.metadata.client import MetadataClient
from moldau.metadata.store import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    StoreError,
    WatchedEvent,
)
from moldau.security.acl import (
    RESOURCE_BY_NAME,
    RESOURCE_NAMES,
    AccessControlEntry,
    AclBinding,
    PatternType,
    ResourcePattern,
    entry_from_json,
    entry_to_json,
)
from moldau.security.authorizer import Authorizer
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

# Attempts of a read-modify-write of one pattern's node against concurrent writers.
_WRITE_ATTEMPTS = 10
# Change notifications kept, and how often (in this broker's writes) older ones go.
_KEEP_CHANGES = 100
_PURGE_EVERY = 100


def bindings_from_store(
    nodes: Iterable[tuple[str, str, bool, list[dict[str, str]]]],
) -> list[AclBinding]:
    out = []
    for rtype, name, prefixed, entries in nodes:
        rt = RESOURCE_BY_NAME.get(rtype)
        if rt is None:
            continue
        pt = PatternType.PREFIXED if prefixed else PatternType.LITERAL
        pattern = ResourcePattern(rt, name, pt)
        for e in entries:
            try:
                out.append(AclBinding(pattern, entry_from_json(e)))
            except (KeyError, AttributeError):
                log.warning("ignoring a malformed ACL of %s %s: %r", rtype, name, e)
    return out


class AclCache:
    def __init__(
        self,
        client: MetadataClient,
        super_users: Iterable[str],
        allow_if_no_acl: bool,
        retry_backoff_s: float = 1.0,
    ) -> None:
        self.client = client
        self.authorizer = Authorizer([], super_users, allow_if_no_acl)
        self.retry_backoff_s = retry_backoff_s
        self._seen: set[str] = set()
        self._writes = 0
        self._changes = asyncio.Event()
        self._tasks = TaskOwner("acl-cache")
        # Called after the ACLs changed (tests and metrics hear of it).
        self.listeners: list[Callable[[], None]] = []

    async def start(self) -> None:
        self._seen = set(await self.client.get_acl_changes())
        await self._reload()
        self._tasks.spawn(self._watch(), "changes")

    async def close(self) -> None:
        await self._tasks.close()

    async def _reload(self) -> None:
        self.authorizer = self.authorizer.with_acls(
            bindings_from_store(await self.client.get_all_acls())
        )
        for listener in self.listeners:
            listener()

    def _on_change(self, _: WatchedEvent) -> None:
        self._changes.set()

    async def _watch(self) -> None:
        backoff = self.retry_backoff_s
        while True:
            self._changes.clear()
            try:
                names = set(await self.client.get_acl_changes(self._on_change))
                if names - self._seen:
                    # Read everything again: ACLs are few, and a full read cannot miss
                    # a change whatever order notifications arrive in.
                    await self._reload()
                self._seen = names
            except StoreError as e:
                log.warning("ACL change notifications unread (%s); retrying in %.1f s",
                            e, backoff)  # fmt: skip
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10 * self.retry_backoff_s)
                continue
            backoff = self.retry_backoff_s
            await self._changes.wait()

    # -- writes (CreateAcls, DeleteAcls) ---------------------------------------------------

    async def update(
        self,
        pattern: ResourcePattern,
        change: Callable[[list[AccessControlEntry]], list[AccessControlEntry]],
    ) -> list[AccessControlEntry]:
        """Apply `change` to the pattern's stored entries (retried if another writer got
        there first); return the entries before the change."""
        rtype = RESOURCE_NAMES[pattern.resource_type]
        prefixed = pattern.pattern_type == PatternType.PREFIXED
        for _ in range(_WRITE_ATTEMPTS):
            raw, version = await self.client.get_resource_acls(rtype, pattern.name, prefixed)
            before = [entry_from_json(e) for e in raw]
            after = list(dict.fromkeys(change(before)))
            if after == before:
                return before
            try:
                await self.client.set_resource_acls(
                    rtype, pattern.name, prefixed, [entry_to_json(e) for e in after], version
                )
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
            # This broker's own change is visible to its next request without waiting
            # for the notification.
            await self._reload()
            self._writes += 1
            if self._writes % _PURGE_EVERY == 0:
                await self.client.purge_acl_changes(_KEEP_CHANGES)
            return before
        raise StoreError(f"ACLs of {pattern} kept changing; gave up")
