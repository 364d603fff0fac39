"""The embedded MetadataStore backend: an in-process znode tree with ZooKeeper's
semantics, persisted as a snapshot and a journal of changes (metadata/journal.py),
each change appended and fsynced before it is acknowledged, so a restarted
single-process cluster finds its topics again. Ephemeral nodes are not persisted:
they belong to sessions of this process.

`EmbeddedTree` is the server; each broker holds its own `EmbeddedSession`.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from moldau.metadata.journal import Image, Journal, StoredTree
from moldau.metadata.store import (
    ANY_VERSION,
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionExpiredError,
    SessionListener,
    SessionState,
    SetDataOp,
    Stat,
    StorePersistError,
    WatchedEvent,
    Watcher,
    parent_of,
    validate_path,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Node:
    data: bytes
    version: int = 0
    cversion: int = 0
    ephemeral_owner: int = 0
    czxid: int = 0
    mzxid: int = 0
    children: set[str] = field(default_factory=set)
    # Next sequence number for sequential children.
    seq: int = 0

    def stat(self) -> Stat:
        return Stat(self.version, self.cversion, self.ephemeral_owner, self.czxid, self.mzxid)


def _image(n: _Node) -> Image:
    return {
        "data": base64.b64encode(n.data).decode(),
        "version": n.version,
        "cversion": n.cversion,
        "czxid": n.czxid,
        "mzxid": n.mzxid,
        "seq": n.seq,
    }


class EmbeddedTree:
    """The shared tree. All access happens on one event loop."""

    def __init__(self, directory: Path | None, snapshot_every: int = 10_000) -> None:
        self._dir = directory
        self._snapshot_every = snapshot_every
        self._nodes: dict[str, _Node] = {"/": _Node(b"")}
        self._zxid = 0
        self._next_session = 1
        self._sessions: set[int] = set()
        self._data_watches: dict[str, list[Watcher]] = {}
        self._child_watches: dict[str, list[Watcher]] = {}
        self._journal: Journal | None = None
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._load()

    def session(self) -> EmbeddedSession:
        return EmbeddedSession(self)

    # -- persistence ---------------------------------------------------------------------

    def _load(self) -> None:
        assert self._dir is not None
        self._journal = Journal(self._dir, self._snapshot_every)
        stored = self._journal.load()
        self._zxid = stored.zxid
        self._nodes["/"].seq = stored.root_seq
        for p, n in stored.nodes.items():
            self._nodes[p] = _Node(
                base64.b64decode(n["data"]),
                n["version"],
                n["cversion"],
                0,
                n["czxid"],
                n["mzxid"],
                seq=n.get("seq", 0),
            )
        for p in sorted(self._nodes, key=len):
            if p != "/":
                self._nodes[parent_of(p)].children.add(p.rsplit("/", 1)[1])

    def _record(self, paths: Iterable[str]) -> None:
        """Journal the new images of the persistent nodes at `paths` (fsynced)."""
        if self._journal is None:
            return
        changed: dict[str, Image | None] = {}
        for p in paths:
            if p == "/":
                continue
            node = self._nodes.get(p)
            changed[p] = None if node is None or node.ephemeral_owner else _image(node)
        self._journal.append(self._zxid, self._nodes["/"].seq, changed)
        if self._journal.due_for_snapshot():
            try:
                self._journal.snapshot(self._stored())
            except OSError as e:  # the journal goes on; the next record tries again
                log.warning("metadata store: could not write a snapshot: %s", e)

    def _stored(self) -> StoredTree:
        nodes = {
            p: _image(n) for p, n in self._nodes.items() if p != "/" and n.ephemeral_owner == 0
        }
        return StoredTree(self._zxid, self._nodes["/"].seq, nodes)

    def close(self) -> None:
        """Close the journal's file (the tree may be opened again later)."""
        if self._journal is not None:
            self._journal.close()

    # -- sessions ------------------------------------------------------------------------

    def open_session(self) -> int:
        sid = self._next_session
        self._next_session += 1
        self._sessions.add(sid)
        return sid

    def close_session(self, sid: int) -> None:
        if sid not in self._sessions:
            return
        self._sessions.discard(sid)
        doomed = [p for p, n in self._nodes.items() if n.ephemeral_owner == sid]
        for p in sorted(doomed, key=len, reverse=True):
            self._apply([DeleteOp(p)], sid)

    def _check_session(self, sid: int) -> None:
        if sid not in self._sessions:
            raise SessionExpiredError(f"session {sid} is closed")

    # -- operations ----------------------------------------------------------------------

    def apply(self, ops: Sequence[Op], sid: int) -> list[str | Stat | None]:
        self._check_session(sid)
        return self._apply(ops, sid)

    def _apply(self, ops: Sequence[Op], sid: int) -> list[str | Stat | None]:
        """All or nothing: ops are validated first, and if the new tree cannot be
        written to disk every change is undone and StorePersistError raised, so
        memory never holds what the file does not. Watches fire only after."""
        self._validate(ops)
        before = self._zxid, self._saved_nodes(ops)
        try:
            return self._apply_validated(ops, sid, before[1])
        except OSError as e:
            # The journal was cut back to where it was: memory goes back too.
            self._zxid, saved = before
            for path, node in saved.items():
                if node is None:
                    self._nodes.pop(path, None)
                else:
                    self._nodes[path] = node
            raise StorePersistError(f"metadata store could not save a change: {e}") from e

    def _saved_nodes(self, ops: Sequence[Op]) -> dict[str, _Node | None]:
        """Copies of every node the ops may change: their paths, their parents, and
        the paths sequential creates will take (None: absent before)."""
        saved: dict[str, _Node | None] = {}
        next_seq: dict[str, int] = {}
        for op in ops:
            paths = [op.path, parent_of(op.path)]
            if isinstance(op, CreateOp) and op.sequential:
                parent = parent_of(op.path)
                parent_node = self._nodes.get(parent)
                seq = next_seq.get(parent, parent_node.seq if parent_node else 0)
                next_seq[parent] = seq + 1
                paths.append(f"{op.path}{seq:010d}")
            for path in paths:
                if path not in saved:
                    node = self._nodes.get(path)
                    saved[path] = (
                        None
                        if node is None
                        else dataclasses.replace(node, children=set(node.children))
                    )
        return saved

    def _apply_validated(
        self, ops: Sequence[Op], sid: int, touched: Iterable[str]
    ) -> list[str | Stat | None]:
        results: list[str | Stat | None] = []
        fired: list[tuple[dict[str, list[Watcher]], str, EventType]] = []
        persist = False
        for op in ops:
            self._zxid += 1
            if isinstance(op, CreateOp):
                parent = self._nodes[parent_of(op.path)]
                path = op.path
                if op.sequential:
                    path = f"{op.path}{parent.seq:010d}"
                    parent.seq += 1
                owner = sid if op.ephemeral else 0
                self._nodes[path] = _Node(op.data, 0, 0, owner, self._zxid, self._zxid)
                parent.children.add(path.rsplit("/", 1)[1])
                parent.cversion += 1
                fired.append((self._data_watches, path, EventType.CREATED))
                fired.append((self._child_watches, parent_of(path), EventType.CHILD))
                persist = persist or not op.ephemeral or op.sequential
                results.append(path)
            elif isinstance(op, SetDataOp):
                node = self._nodes[op.path]
                node.data = op.data
                node.version += 1
                node.mzxid = self._zxid
                fired.append((self._data_watches, op.path, EventType.CHANGED))
                persist = persist or node.ephemeral_owner == 0
                results.append(node.stat())
            elif isinstance(op, DeleteOp):
                node = self._nodes.pop(op.path)
                parent = self._nodes[parent_of(op.path)]
                parent.children.discard(op.path.rsplit("/", 1)[1])
                parent.cversion += 1
                fired.append((self._data_watches, op.path, EventType.DELETED))
                fired.append((self._child_watches, op.path, EventType.DELETED))
                fired.append((self._child_watches, parent_of(op.path), EventType.CHILD))
                persist = persist or node.ephemeral_owner == 0
                results.append(None)
            else:
                results.append(None)
        if persist:
            self._record(touched)
        self._deliver([self._take(table, path, kind) for table, path, kind in fired])
        return results

    def _validate(self, ops: Sequence[Op]) -> None:
        """Check every op against the tree as the earlier ops would leave it."""
        created: set[str] = set()
        deleted: set[str] = set()
        versions: dict[str, int] = {}

        def exists(p: str) -> bool:
            return p not in deleted and (p in created or p in self._nodes)

        def children(p: str) -> int:
            n = self._nodes.get(p)
            base = {f"{p.rstrip('/')}/{c}" for c in n.children} if n else set()
            extra = {c for c in created if parent_of(c) == p}
            return len((base | extra) - deleted)

        for op in ops:
            validate_path(op.path)
            if isinstance(op, CreateOp):
                parent = parent_of(op.path)
                if not exists(parent):
                    raise NoNodeError(parent)
                pnode = self._nodes.get(parent)
                if pnode is not None and pnode.ephemeral_owner:
                    raise NoNodeError(f"{parent} is ephemeral: it cannot have children")
                if not op.sequential and exists(op.path):
                    raise NodeExistsError(op.path)
                created.add(op.path)
                deleted.discard(op.path)
                continue
            if not exists(op.path):
                raise NoNodeError(op.path)
            node = self._nodes.get(op.path)
            current = versions.get(op.path, node.version if node and op.path not in created else 0)
            if op.version not in (ANY_VERSION, current):
                raise BadVersionError(f"{op.path}: version {op.version}, current {current}")
            if isinstance(op, SetDataOp):
                versions[op.path] = current + 1
            elif isinstance(op, DeleteOp):
                if op.path == "/":
                    raise BadVersionError("cannot delete /")
                if children(op.path):
                    raise NotEmptyError(op.path)
                deleted.add(op.path)
                created.discard(op.path)
            elif isinstance(op, CheckOp):
                pass

    @staticmethod
    def _take(
        table: dict[str, list[Watcher]], path: str, kind: EventType
    ) -> tuple[list[Watcher], WatchedEvent]:
        return table.pop(path, []), WatchedEvent(kind, path)

    def _deliver(self, fired: list[tuple[list[Watcher], WatchedEvent]]) -> None:
        loop = asyncio.get_running_loop()
        for watchers, event in fired:
            for w in watchers:
                loop.call_soon(w, event)

    def get(self, path: str, watch: Watcher | None, sid: int) -> tuple[bytes, Stat]:
        self._check_session(sid)
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if watch is not None:
            self._add(self._data_watches, path, watch)
        return node.data, node.stat()

    def exists(self, path: str, watch: Watcher | None, sid: int) -> Stat | None:
        self._check_session(sid)
        if watch is not None:
            self._add(self._data_watches, path, watch)
        node = self._nodes.get(path)
        return None if node is None else node.stat()

    def children(self, path: str, watch: Watcher | None, sid: int) -> list[str]:
        self._check_session(sid)
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if watch is not None:
            self._add(self._child_watches, path, watch)
        return sorted(node.children)

    @staticmethod
    def _add(table: dict[str, list[Watcher]], path: str, watch: Watcher) -> None:
        watchers = table.setdefault(path, [])
        if watch not in watchers:
            watchers.append(watch)

    def subtree(self, path: str) -> list[str]:
        """Paths under `path`, deepest first."""
        prefix = path.rstrip("/") + "/"
        return sorted((p for p in self._nodes if p.startswith(prefix)), key=len, reverse=True)


@dataclass(frozen=True, slots=True)
class _SessionWatch:
    """A session's watch as the tree holds it: equal to the same watch of the same
    session, so that a path keeps one, as in ZooKeeper; fired through the session,
    which holds the event while it is cut off. Nothing keeps it once fired."""

    session: EmbeddedSession
    watch: Watcher

    def __call__(self, event: WatchedEvent) -> None:
        self.session._fire(self.watch, event)


class EmbeddedSession(MetadataStore):
    """A broker's session. `isolate` cuts it off as a network partition cuts a
    ZooKeeper client off: operations wait, watch events are held, and after the
    session timeout the session expires (its ephemeral nodes go); `heal` reconnects,
    on a new session if it expired (the session listeners hear EXPIRED, then
    RENEWED), and delivers what was held, as the ZooKeeper backend does after a
    reconnect."""

    def __init__(self, tree: EmbeddedTree) -> None:
        self._tree = tree
        self._sid = 0
        self._connected = asyncio.Event()
        self._connected.set()
        self._held: list[tuple[Watcher, WatchedEvent]] = []
        self._expiry: asyncio.TimerHandle | None = None
        self._expired = False
        self._session_listeners: list[SessionListener] = []

    @property
    def session_id(self) -> int:
        return self._sid

    async def start(self) -> None:
        self._sid = self._tree.open_session()

    def add_session_listener(self, listener: SessionListener) -> None:
        self._session_listeners.append(listener)

    async def close(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        self._tree.close_session(self._sid)
        self._held.clear()
        self._connected.set()

    # -- network faults (in-process clusters) --------------------------------------------

    def isolate(self, session_timeout_s: float) -> None:
        self._connected.clear()
        self._expiry = asyncio.get_running_loop().call_later(session_timeout_s, self._expire)

    def _expire(self) -> None:
        self._expired = True
        self._tree.close_session(self._sid)

    def heal(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if self._expired:
            # As a ZooKeeper client learns of the expiry on reconnecting: before any
            # answer on the new session, and before the events held meanwhile.
            self._expired = False
            self._tell(SessionState.EXPIRED)
            self._sid = self._tree.open_session()
            self._tell(SessionState.RENEWED)
        self._connected.set()
        held, self._held = self._held, []
        for watch, event in held:
            watch(event)

    def _tell(self, state: SessionState) -> None:
        for listener in list(self._session_listeners):
            listener(state)

    async def _reachable(self) -> None:
        if not self._connected.is_set():
            await self._connected.wait()

    def _watch(self, watch: Watcher | None) -> Watcher | None:
        return None if watch is None else _SessionWatch(self, watch)

    def _fire(self, watch: Watcher, event: WatchedEvent) -> None:
        if self._connected.is_set():
            watch(event)
        else:
            self._held.append((watch, event))

    # -- operations ----------------------------------------------------------------------

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        await self._reachable()
        if make_parents:
            await self.ensure_path(parent_of(path))
        result = self._tree.apply([CreateOp(path, data, ephemeral, sequential)], self._sid)[0]
        assert isinstance(result, str)
        return result

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        await self._reachable()
        return self._tree.get(path, self._watch(watch), self._sid)

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> Stat:
        await self._reachable()
        result = self._tree.apply([SetDataOp(path, data, version)], self._sid)[0]
        assert isinstance(result, Stat)
        return result

    async def delete(self, path: str, version: int = ANY_VERSION, recursive: bool = False) -> None:
        await self._reachable()
        ops: list[Op] = []
        if recursive:
            ops = [DeleteOp(p) for p in self._tree.subtree(path)]
        ops.append(DeleteOp(path, version))
        self._tree.apply(ops, self._sid)

    async def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        await self._reachable()
        return self._tree.exists(path, self._watch(watch), self._sid)

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        await self._reachable()
        return self._tree.children(path, self._watch(watch), self._sid)

    async def multi(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        await self._reachable()
        return self._tree.apply(ops, self._sid)
