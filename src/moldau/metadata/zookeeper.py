"""The ZooKeeper MetadataStore backend, on kazoo.

kazoo is synchronous and runs its own connection thread. Each operation runs on a
worker thread and is retried through a connection loss and through a session
expiry (then on the new session), as Kafka's ZooKeeperClient holds requests until
it is connected again. A retried create may find the node it made before the
connection dropped (NodeExistsError), as in Kafka. When the connection drops or the
session expires, every pending watcher gets SESSION_EXPIRED: the ephemeral nodes and
watches of an expired session are gone and its owner must register them again; the
session listeners hear EXPIRED, then RENEWED once a new session is connected, before
any answer given on it. Watch and state callbacks arrive on kazoo's threads and are
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
from typing import Any, TypeVar

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType as KazooEventType
from kazoo.protocol.states import KazooState, ZnodeStat
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
        self._wrappers: dict[tuple[str, str, Watcher], Callable[[KazooWatchedEvent], None]] = {}
        self._retry = request_retry()
        # kazoo calls block (and retry for as long as ZooKeeper is away): they get
        # threads of their own, so they neither starve the event loop's default
        # executor (log flushes) nor keep `close` from running.
        self._executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="zookeeper")
        self._session_listeners: list[SessionListener] = []
        # Set by kazoo's connection thread when the session is lost, until a new one.
        self._session_lost = False

    @property
    def session_id(self) -> int:
        credentials = self.credentials
        return 0 if credentials is None else credentials[0]

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
            loop.call_soon_threadsafe(self._tell, SessionState.EXPIRED)
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            loop.call_soon_threadsafe(self._tell, SessionState.RENEWED)

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
                if ours is None:  # kazoo's reset of every watch when the session is lost
                    ours = EventType.SESSION_EXPIRED
                loop.call_soon_threadsafe(self._deliver, key, WatchedEvent(ours, path))

            wrapper = self._wrappers[key] = fire
        return wrapper

    def _deliver(self, key: tuple[str, str, Watcher], event: WatchedEvent) -> None:
        self._wrappers.pop(key, None)
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
        return None if stat is None else _stat(stat)

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        children: list[str] = await self._call(
            self._client.get_children, path, watch=self._wrap("child", path, watch)
        )
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
