"""The ZooKeeper MetadataStore backend, on kazoo.

kazoo is synchronous and runs its own connection thread. Each operation runs on a
worker thread and is retried through a connection loss and through a session
expiry (then on the new session), as Kafka's ZooKeeperClient holds requests until
it is connected again. A retried create may find the node it made before the
connection dropped (NodeExistsError), as in Kafka.

A dropped connection is not an expiry. ZooKeeper keeps the session, its ephemeral
nodes and its watches until the session timeout; Kafka's ZooKeeperClient does
nothing on Disconnected and the Java client sets its watches again on reconnection.
kazoo instead forgets every watch when the connection drops (it does not send
SetWatches): the watches it hands back are held and set again once the same session
is connected, and a watcher whose node changed meanwhile hears it then, decided as
ZooKeeper decides SetWatches from the last zxid seen (`rearmed_event`). Only when
the session expires does every pending watcher get SESSION_EXPIRED (its ephemeral
nodes and watches are gone and its owner must register them again) and the session
listeners hear EXPIRED, then RENEWED once a new session is connected, before any
answer given on it. Watch and state callbacks arrive on kazoo's threads and are
handed to the event loop, so watchers and listeners run there, as with the embedded
backend.

`zookeeper.connect` takes Kafka's form, `host:port[,host:port...][/chroot]`; the
chroot is created when missing, as Kafka does.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType as KazooEventType
from kazoo.protocol.states import KazooState, KeeperState, ZnodeStat
from kazoo.protocol.states import WatchedEvent as KazooWatchedEvent
from kazoo.retry import KazooRetry

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
    StoreError,
    WatchedEvent,
    Watcher,
    validate_path,
)
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

# Reads sent together by get_many.
_PIPELINED_READS = 1000

T = TypeVar("T")

_EVENTS = {
    KazooEventType.CREATED: EventType.CREATED,
    KazooEventType.DELETED: EventType.DELETED,
    KazooEventType.CHANGED: EventType.CHANGED,
    KazooEventType.CHILD: EventType.CHILD,
}

_ERRORS: tuple[tuple[type[Exception], type[StoreError]], ...] = (
    (kz.NoNodeError, NoNodeError),
    (kz.NodeExistsError, NodeExistsError),
    (kz.BadVersionError, BadVersionError),
    (kz.NotEmptyError, NotEmptyError),
    (kz.SessionExpiredError, SessionExpiredError),
    (kz.ConnectionClosedError, SessionExpiredError),
    (kz.NoChildrenForEphemeralsError, NoNodeError),
)


def _translate(e: Exception) -> Exception:
    for theirs, ours in _ERRORS:
        if isinstance(e, theirs):
            return ours(str(e) or type(e).__name__)
    if isinstance(e, kz.KazooException):
        return StoreError(f"{type(e).__name__}: {e}")
    return e


# A watch as ZooKeeper tells them apart when it sets them again (SetWatches): a data
# watch (get, or exists of a node that exists), an exist watch (exists of a node
# that does not) and a child watch.
WatchKind = Literal["data", "exist", "child"]
# (the kazoo watch family, "data" or "child"; path; our watcher)
WatchKey = tuple[str, str, Watcher]


def rearmed_event(kind: WatchKind, now: ZnodeStat | None, last_zxid: int) -> EventType | None:
    """What a watch set again after a disconnection fires at once, given the node's
    stat now (None: no node) and the last zxid the client had seen: ZooKeeper's rule
    for SetWatches (DataTree.setWatches). None: nothing changed, the watch is set."""
    if kind == "exist":
        return None if now is None else EventType.CREATED
    if now is None:
        return EventType.DELETED
    if kind == "data":
        return EventType.CHANGED if now.mzxid > last_zxid else None
    return EventType.CHILD if now.pzxid > last_zxid else None


def _stat(s: ZnodeStat) -> Stat:
    return Stat(s.version, s.cversion, s.ephemeralOwner, s.czxid, s.mzxid)


def split_connect(connect: str) -> tuple[str, str]:
    """('host:port,...', '/chroot' or '') from a zookeeper.connect string."""
    hosts, slash, chroot = connect.partition("/")
    chroot = f"/{chroot}".rstrip("/") if slash else ""
    if chroot:
        validate_path(chroot)
    if not hosts:
        raise ValueError(f"zookeeper.connect {connect!r} names no host")
    return hosts, chroot


def request_retry() -> KazooRetry:
    """How every request is retried: through connection losses and session expiries
    until it gets an answer or the client is closed (kazoo then raises
    ConnectionClosedError, which is not retried). No deadline, as Kafka's
    KafkaZkClient waits for the connection however long it takes: a request given up
    on while ZooKeeper is away leaves its caller (a registration, an election) with
    an error it can only retry itself, or, from a watch, not at all."""
    return KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0, ignore_expire=True)


class ZooKeeperStore(MetadataStore):
    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18_000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self._hosts, self._chroot = split_connect(connect)
        self._session_timeout_s = session_timeout_ms / 1000
        self._connection_timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000
        self._zk: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # One kazoo callback per (kind, path, watcher), so that registering the same
        # watcher twice on a path fires it once, as ZooKeeper does.
        self._wrappers: dict[WatchKey, Callable[[KazooWatchedEvent], None]] = {}
        self._retry = request_retry()
        # kazoo calls block (and retry for as long as ZooKeeper is away): they get
        # threads of their own, so they neither starve the event loop's default
        # executor (log flushes) nor keep `close` from running.
        self._executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="zookeeper")
        self._session_listeners: list[SessionListener] = []
        # Set by kazoo's connection thread when the session is lost, until a new one.
        self._session_lost = False
        # What each pending watch is, for setting it again after a disconnection.
        self._kinds: dict[WatchKey, WatchKind] = {}
        # On the loop: whether the connection is down, the watches kazoo gave back
        # when it dropped, and the last zxid seen before it did.
        self._disconnected = False
        self._held: dict[WatchKey, WatchKind] = {}
        self._last_zxid = 0
        self._tasks = TaskOwner("zookeeper-watches")

    @property
    def session_id(self) -> int:
        credentials = self.credentials
        return 0 if credentials is None else credentials[0]

    @property
    def connected(self) -> bool:
        """Whether the client is connected now: False from a dropped connection until
        it is connected again, on the same session or a new one."""
        return self._zk is not None and self._zk.connected

    @property
    def credentials(self) -> tuple[int, bytes] | None:
        """(session id, password) of the current session: what a second client needs
        to take the session over, which is how tests expire it."""
        if self._zk is None or self._zk.client_id is None:
            return None
        sid, passwd = self._zk.client_id
        return sid, passwd

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._chroot:
            # The chroot must exist before a client rooted in it can do anything.
            root = KazooClient(hosts=self._hosts, timeout=self._session_timeout_s)
            try:
                await _connect(root, self._connection_timeout_s)
                await asyncio.to_thread(root.ensure_path, self._chroot)
            except TimeoutError as e:
                raise StoreError(f"cannot reach ZooKeeper at {self._hosts}: {e}") from e
            except Exception as e:
                raise _translate(e) from e
            finally:
                await _close_apart(root)
        self._zk = KazooClient(
            hosts=self._hosts + self._chroot,
            timeout=self._session_timeout_s,
            # Reconnect for as long as it takes, with a new session once the old one
            # expired, as Kafka's ZooKeeperClient does (kazoo's default gives up).
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 2.0},
        )
        self._zk.add_listener(self._on_state)
        try:
            await _connect(self._zk, self._connection_timeout_s)
        except Exception as e:
            zk, self._zk = self._zk, None
            await _close_apart(zk)
            raise StoreError(f"cannot reach ZooKeeper at {self._hosts}: {e}") from e

    async def close(self) -> None:
        await self._tasks.close()
        if self._zk is not None:
            zk, self._zk = self._zk, None
            await _close_apart(zk)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def add_session_listener(self, listener: SessionListener) -> None:
        self._session_listeners.append(listener)

    def _on_state(self, state: KazooState) -> None:
        """On kazoo's connection thread. LOST comes when ZooKeeper answers a reconnect
        with an expired session, before the requests waiting on it fail and are
        retried on a new one: handed to the loop now, it is heard before their answers."""
        loop = self._loop
        if loop is None or self._zk is None:
            return  # closing
        if state == KazooState.LOST:
            self._session_lost = True
            loop.call_soon_threadsafe(self._on_expired)
        elif state == KazooState.SUSPENDED:
            # Before kazoo hands the watches back: the loop hears this first.
            loop.call_soon_threadsafe(self._on_disconnected, self._zk.last_zxid)
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            loop.call_soon_threadsafe(self._tell, SessionState.RENEWED)
        elif state == KazooState.CONNECTED:
            loop.call_soon_threadsafe(self._on_reconnected)

    def _on_disconnected(self, last_zxid: int) -> None:
        log.info("ZooKeeper connection lost; the session may resume")
        self._disconnected = True
        self._last_zxid = last_zxid

    def _on_reconnected(self) -> None:
        """The same session is connected again: nothing to redo (Kafka's
        ZooKeeperClient does nothing on SyncConnected) but set the held watches."""
        self._disconnected = False
        held, self._held = self._held, {}
        if held and self._zk is not None:
            log.info("ZooKeeper session resumed; setting %d watches again", len(held))
            self._tasks.spawn(self._rearm(held, self._last_zxid), "rearm")

    def _on_expired(self) -> None:
        self._disconnected = False
        self._tell(SessionState.EXPIRED)
        held, self._held = self._held, {}
        for key in held:
            self._deliver(key, WatchedEvent(EventType.SESSION_EXPIRED, key[1]))

    def _hold(self, key: WatchKey) -> None:
        """kazoo gave a watch back as the connection dropped."""
        kind = self._kinds.pop(key, "child" if key[0] == "child" else "data")
        if self._disconnected:
            self._held[key] = kind
        elif self._zk is not None:  # already connected again
            self._tasks.spawn(self._rearm({key: kind}, self._last_zxid), "rearm")

    async def _rearm(self, held: dict[WatchKey, WatchKind], last_zxid: int) -> None:
        for key, kind in held.items():
            family, path, watcher = key
            wrapper = self._wrap(family, path, watcher)
            try:
                if kind == "child":
                    try:
                        _, now = await self._call(
                            self._client.get_children, path, watch=wrapper, include_data=True
                        )
                    except NoNodeError:
                        now = None  # no watch is set on a missing node's children
                else:
                    now = await self._call(self._client.exists, path, watch=wrapper)
            except StoreError:
                # The session went while setting it again (or the store closed).
                self._deliver(key, WatchedEvent(EventType.SESSION_EXPIRED, path))
                continue
            event = rearmed_event(kind, now, last_zxid)
            if event is None:
                self._armed(key, "child" if kind == "child" else "data" if now else "exist")
            elif kind == "child" and now is None:
                self._deliver(key, WatchedEvent(event, path))
            else:
                # The read set a watch with this wrapper: kept, so that the watcher,
                # setting its watch again, shares it rather than adding a second.
                watcher(WatchedEvent(event, path))

    def _tell(self, state: SessionState) -> None:
        if self._zk is None:
            return
        level = logging.WARNING if state == SessionState.EXPIRED else logging.INFO
        log.log(level, "ZooKeeper session %s", state.value)
        for listener in list(self._session_listeners):
            listener(state)

    # -- plumbing ------------------------------------------------------------------------

    @property
    def _client(self) -> KazooClient:
        if self._zk is None:
            raise SessionExpiredError("the ZooKeeper session is closed")
        return self._zk

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        call = functools.partial(self._retry.copy(), fn, *args, **kwargs)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except Exception as e:
            raise _translate(e) from e

    def _armed(self, key: WatchKey, kind: WatchKind) -> None:
        if key in self._wrappers:  # else it fired already
            self._kinds[key] = kind

    def _wrap(self, kind: str, path: str, watch: Watcher | None) -> Any:
        if watch is None:
            return None
        key = (kind, path, watch)
        wrapper = self._wrappers.get(key)
        if wrapper is None:
            loop = self._loop
            assert loop is not None

            def fire(event: KazooWatchedEvent) -> None:  # on kazoo's thread
                ours = _EVENTS.get(event.type)
                if ours is None and event.state == KeeperState.CONNECTING:
                    # kazoo forgets its watches when the connection drops.
                    loop.call_soon_threadsafe(self._hold, key)
                    return
                if ours is None:  # kazoo's reset of every watch when the session is lost
                    ours = EventType.SESSION_EXPIRED
                loop.call_soon_threadsafe(self._deliver, key, WatchedEvent(ours, path))

            wrapper = self._wrappers[key] = fire
        return wrapper

    def _deliver(self, key: WatchKey, event: WatchedEvent) -> None:
        self._wrappers.pop(key, None)
        self._kinds.pop(key, None)
        key[2](event)

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
        validate_path(path)
        created: str = await self._call(
            self._client.create,
            path,
            data,
            ephemeral=ephemeral,
            sequence=sequential,
            makepath=make_parents,
        )
        return created

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        data, stat = await self._call(self._client.get, path, watch=self._wrap("data", path, watch))
        if watch is not None:
            self._armed(("data", path, watch), "data")
        return data, _stat(stat)

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, Stat] | None]:
        for path in paths:
            validate_path(path)
        out: list[tuple[bytes, Stat] | None] = []
        for start in range(0, len(paths), _PIPELINED_READS):
            chunk = paths[start : start + _PIPELINED_READS]

            def read(chunk: Sequence[str] = chunk) -> list[tuple[bytes, Stat] | None]:
                # Every request is sent before the first answer is awaited: one round
                # trip for the chunk rather than one per node.
                pending = [self._client.get_async(p) for p in chunk]
                got: list[tuple[bytes, Stat] | None] = []
                for result in pending:
                    try:
                        data, stat = result.get()
                        got.append((data, _stat(stat)))
                    except kz.NoNodeError:
                        got.append(None)
                return got

            out += await self._call(read)
        return out

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> Stat:
        return _stat(await self._call(self._client.set, path, data, version))

    async def delete(self, path: str, version: int = ANY_VERSION, recursive: bool = False) -> None:
        await self._call(self._client.delete, path, version, recursive)

    async def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        stat = await self._call(self._client.exists, path, watch=self._wrap("data", path, watch))
        if watch is not None:
            self._armed(("data", path, watch), "exist" if stat is None else "data")
        return None if stat is None else _stat(stat)

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        children: list[str] = await self._call(
            self._client.get_children, path, watch=self._wrap("child", path, watch)
        )
        if watch is not None:
            self._armed(("child", path, watch), "child")
        return sorted(children)

    async def multi(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        for op in ops:
            validate_path(op.path)

        def commit() -> list[Any]:
            t = self._client.transaction()
            for op in ops:
                if isinstance(op, CreateOp):
                    t.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential)
                elif isinstance(op, SetDataOp):
                    t.set_data(op.path, op.data, op.version)
                elif isinstance(op, DeleteOp):
                    t.delete(op.path, op.version)
                elif isinstance(op, CheckOp):
                    t.check(op.path, op.version)
            results: list[Any] = t.commit()
            return results

        results = await self._call(commit)
        # A failed transaction answers with the failing op's error and RolledBackError
        # for the others; raise the first real one, as the embedded backend does.
        for r in results:
            if isinstance(r, Exception) and not isinstance(r, kz.RolledBackError):
                raise _translate(r)
        out: list[str | Stat | None] = []
        for op, r in zip(ops, results, strict=True):
            if isinstance(op, CreateOp):
                out.append(r)
            elif isinstance(op, SetDataOp):
                out.append(_stat(r))
            else:
                out.append(None)
        return out


def _stop_and_close(zk: KazooClient) -> None:
    try:
        zk.stop()
    finally:
        zk.close()


async def _connect(zk: KazooClient, timeout_s: float) -> None:
    """kazoo's `start` without a thread blocked in it: a start waiting for a
    ZooKeeper that does not answer can then be cancelled (a broker asked to stop
    while it starts), and nothing is left for the loop's executor to wait for at
    exit. TimeoutError when no session came within `timeout_s`."""
    connected = zk.start_async()
    async with asyncio.timeout(timeout_s):
        while not connected.is_set():
            await asyncio.sleep(0.02)


async def _close_apart(zk: KazooClient) -> None:
    """Stop and close the client on a thread of its own: every pooled one may be
    inside a call that retries until the client stops, which is what this does.
    Waits for it only with a session to close (ZooKeeper then drops the ephemeral
    nodes at once): a client still in a handshake ZooKeeper does not answer stops
    only when kazoo's read times out, up to a session timeout later."""
    if not zk.connected:
        threading.Thread(
            target=_stop_and_close, args=(zk,), name="zookeeper-close", daemon=True
        ).start()
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def stop() -> None:
        try:
            _stop_and_close(zk)
        finally:
            loop.call_soon_threadsafe(done.set_result, None)

    threading.Thread(target=stop, name="zookeeper-close", daemon=True).start()
    await done
