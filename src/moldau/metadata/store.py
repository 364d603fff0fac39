"""MetadataStore: a ZooKeeper-shaped tree of znodes, the coordination service the
brokers and the controller share.

Nodes carry bytes and a Stat (data version, child version). Nodes may be
ephemeral (gone when their session ends). Watches are one-shot, as in ZooKeeper,
and are delivered on the event loop, never from inside the call that set them off;
a watcher should only enqueue work. `multi` applies a list of operations
atomically: all or none.

Two backends: `embedded` (in-process, persisted under the data dir) and
`zookeeper` (kazoo).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple


class StoreError(Exception):
    pass


class NoNodeError(StoreError):
    pass


class NodeExistsError(StoreError):
    pass


class BadVersionError(StoreError):
    pass


class NotEmptyError(StoreError):
    pass


class SessionExpiredError(StoreError):
    pass


class StorePersistError(StoreError):
    """The store could not make a change durable (e.g. the embedded store's disk is
    full); the change was not applied."""


class Stat(NamedTuple):
    version: int  # data version: bumps on every set
    cversion: int  # child version: bumps on every child create/delete
    ephemeral_owner: int  # session id, 0 for persistent nodes
    czxid: int  # transaction id of the create
    mzxid: int  # transaction id of the last change


class EventType(Enum):
    CREATED = "created"
    DELETED = "deleted"
    CHANGED = "changed"
    CHILD = "child"
    # The session ended; the watcher should re-register (new session) or stop.
    SESSION_EXPIRED = "session_expired"


@dataclass(frozen=True, slots=True)
class WatchedEvent:
    type: EventType
    path: str


Watcher = Callable[[WatchedEvent], None]


class SessionState(Enum):
    """What a session listener hears (Kafka's StateChangeHandler)."""

    # The session expired: its ephemeral nodes and watches are gone. Heard before
    # any answer given on the session that replaces it.
    EXPIRED = "expired"
    # A new session replaces the expired one (heard after EXPIRED).
    RENEWED = "renewed"


SessionListener = Callable[[SessionState], None]

ANY_VERSION = -1


@dataclass(frozen=True, slots=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetDataOp:
    path: str
    data: bytes
    version: int = ANY_VERSION


@dataclass(frozen=True, slots=True)
class DeleteOp:
    path: str
    version: int = ANY_VERSION


@dataclass(frozen=True, slots=True)
class CheckOp:
    path: str
    version: int


Op = CreateOp | SetDataOp | DeleteOp | CheckOp


class MetadataStore(abc.ABC):
    """One client session of the coordination service."""

    @property
    @abc.abstractmethod
    def session_id(self) -> int: ...

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    def add_session_listener(self, listener: SessionListener) -> None:
        """Hear of the session's expiry and renewal, on the event loop. The client
        learns of an expiry when it reaches the service again, so EXPIRED and
        RENEWED come together, EXPIRED first."""

    @abc.abstractmethod
    async def close(self) -> None:
        """End the session: its ephemeral nodes go away."""

    @abc.abstractmethod
    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Create a node; return its path (with the sequence suffix if sequential)."""

    @abc.abstractmethod
    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]: ...

    @abc.abstractmethod
    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> Stat: ...

    @abc.abstractmethod
    async def delete(
        self, path: str, version: int = ANY_VERSION, recursive: bool = False
    ) -> None: ...

    @abc.abstractmethod
    async def exists(self, path: str, watch: Watcher | None = None) -> Stat | None: ...

    @abc.abstractmethod
    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]: ...

    @abc.abstractmethod
    async def multi(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        """Apply all ops atomically; raise the first op's error and change nothing."""

    # -- conveniences shared by both backends --------------------------------------------

    async def ensure_path(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            with contextlib.suppress(NodeExistsError):
                await self.create("/" + "/".join(parts[:i]))

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, Stat] | None]:
        """The data of many nodes (None for a missing one), without watches; the
        ZooKeeper backend pipelines the reads (a controller taking over reads every
        partition's state)."""
        return [await self.get_or_none(p) for p in paths]

    async def get_or_none(
        self, path: str, watch: Watcher | None = None
    ) -> tuple[bytes, Stat] | None:
        try:
            return await self.get(path, watch)
        except NoNodeError:
            if watch is not None:
                await self.exists(path, watch)
            return None


def parent_of(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def validate_path(path: str) -> None:
    if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
        raise ValueError(f"invalid znode path {path!r}")
