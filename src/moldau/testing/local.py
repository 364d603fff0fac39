"""A replicated cluster in this process, for tests: N brokers sharing the embedded
metadata store (what `moldau serve --brokers N` runs), on an event loop of their
own in a background thread, so synchronous tests and clients use it as any
cluster. No JVM, no ZooKeeper, no subprocess; ready in well under a second.

    with LocalCluster(tmp_path, brokers=3) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        cluster.kill(cluster.controller_id())  # or stop, restart

`kill` stops a broker as kill -9 stops its process (nothing flushed, no clean
shutdown marker, its registration gone at once); `stop` is SIGTERM's controlled
shutdown; `restart` brings it back on the same port with the same data.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from moldau.config.broker import BrokerConfig
from moldau.metadata.embedded import EmbeddedSession
from moldau.metadata.store import NoNodeError
from moldau.metadata.znodes import CONTROLLER, decode_controller
from moldau.server.embedded import METADATA_DIR, EmbeddedCluster
from moldau.server.event_loop import loop_factory
from moldau.testing.sasl import SaslListener, SaslUsers, write_scram_users

if TYPE_CHECKING:  # cryptography is a test extra: only for tests with TLS
    from moldau.testing.certs import Certificates

T = TypeVar("T")


class LocalCluster(SaslListener):
    def __init__(
        self,
        directory: Path,
        brokers: int = 3,
        overrides: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        tls: Certificates | None = None,
        sasl: SaslUsers | None = None,
    ) -> None:
        """`tls`: every broker also listens on SSL (`ssl_bootstrap`); `sasl`: and on
        SASL_SSL with `tls`, else SASL_PLAINTEXT (`sasl_bootstrap`), its SCRAM users
        written to the embedded store before the brokers start."""
        self.directory = Path(directory)
        self.size = brokers
        self.host = host
        self.tls, self.sasl = tls, sasl
        listeners = [f"PLAINTEXT://{host}:0"]
        props: dict[str, str] = {}
        if tls is not None:
            props |= tls.broker_properties()
            listeners.append(f"SSL://{host}:0")
        if sasl is not None:
            props |= sasl.broker_properties(SaslUsers.listener(tls is not None))
            listeners.append(f"{SaslUsers.listener(tls is not None)}://{host}:0")
        self.overrides = {"listeners": ",".join(listeners), **props, **(overrides or {})}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._cluster: EmbeddedCluster | None = None
        self._session: EmbeddedSession | None = None  # the test's own, to read znodes

    # -- life cycle ----------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> LocalCluster:
        loop = self._loop = loop_factory(BrokerConfig(self.overrides)["event.loop"])()
        self._thread = threading.Thread(
            target=loop.run_forever, name="moldau-local-cluster", daemon=True
        )
        self._thread.start()
        try:
            self._call(self._start(), timeout)
        except BaseException:
            self.close()
            raise
        return self

    async def _start(self) -> None:
        configs = [
            BrokerConfig(
                {
                    "broker.id": str(i),
                    "log.dirs": str(self.directory / f"broker-{i}"),
                    "offsets.topic.replication.factor": str(min(3, self.size)),
                    **self.overrides,
                }
            )
            for i in range(1, self.size + 1)
        ]
        self._cluster = EmbeddedCluster(configs, self.directory / METADATA_DIR)
        self._session = self._cluster.tree.session()
        await self._session.start()
        if self.sasl is not None:  # brokers log in to each other from the start
            await write_scram_users(self._session, self.sasl)
        await self._cluster.start()

    def close(self, timeout: float = 60.0) -> None:
        """Stop every broker (cleanly) and the thread they run on."""
        loop = self._loop
        if loop is None:
            return
        try:
            if self._cluster is not None:
                self._call(self._cluster.shutdown(), timeout)
            if self._session is not None:
                self._call(self._session.close(), timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout)
            loop.close()
            self._loop = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        assert self._loop is not None, "the cluster is not running"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @property
    def cluster(self) -> EmbeddedCluster:
        assert self._cluster is not None, "the cluster is not running"
        return self._cluster

    # -- where the brokers are -----------------------------------------------------------

    def bootstrap_of(self, broker_id: int) -> str:
        b = self.cluster.broker(broker_id)
        return f"{self.host}:{b.port}"

    @property
    def bootstrap(self) -> str:
        """bootstrap.servers naming every broker that runs."""
        return ",".join(
            f"{self.host}:{b.port}" for b in self.cluster.brokers if b.started and b.servers
        )

    def _listener_bootstrap(self, listener: str) -> str:
        return ",".join(
            f"{self.host}:{s.port}"
            for b in self.cluster.brokers
            if b.started
            for s in b.servers
            if s.listener_name == listener
        )

    @property
    def ssl_bootstrap(self) -> str:
        """bootstrap.servers naming every running broker's SSL listener."""
        return self._listener_bootstrap("SSL")

    @property
    def sasl_bootstrap(self) -> str:
        """bootstrap.servers naming every running broker's SASL listener."""
        return self._listener_bootstrap(SaslUsers.listener(self.tls is not None))

    def metrics_url(self, broker_id: int) -> str:
        """Where a broker serves Prometheus metrics (with metrics.port set)."""
        server = self.cluster.broker(broker_id).metrics_server
        assert server is not None, "set metrics.port (0: a free port each) to serve metrics"
        return f"http://{self.host}:{server.port}/metrics"

    def data_dir(self, broker_id: int) -> Path:
        return self.directory / f"broker-{broker_id}"

    def znode(self, path: str) -> bytes | None:
        """What the metadata store holds at `path` (ZooKeeper's layout)."""

        async def read() -> bytes | None:
            assert self._session is not None
            try:
                data, _ = await self._session.get(path)
            except NoNodeError:
                return None
            return data

        return self._call(read())

    def is_running(self, broker_id: int) -> bool:
        return self.cluster.broker(broker_id).started

    def controller_id(self) -> int | None:
        """The active controller, as the metadata store says (an isolated broker may
        still believe it is)."""
        data = self.znode(CONTROLLER)
        return None if data is None else decode_controller(data)

    # -- faults --------------------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        """As kill -9: nothing flushed, no clean shutdown marker."""
        self._call(self.cluster.kill_broker(broker_id))

    def stop(self, broker_id: int, timeout: float = 60.0) -> None:
        """As SIGTERM: a controlled shutdown, then a clean stop."""
        self._call(self.cluster.stop_broker(broker_id), timeout)

    def isolate(self, broker_id: int) -> None:
        """Cut one broker off the network (clients, the other brokers and the
        metadata store stop hearing from it; its session expires after
        zookeeper.session.timeout.ms), though it runs on."""

        async def cut() -> None:
            self.cluster.isolate_broker(broker_id)

        self._call(cut())

    def heal(self, broker_id: int) -> None:
        """Put an isolated broker back on the network."""

        async def mend() -> None:
            self.cluster.heal_broker(broker_id)

        self._call(mend())

    def restart(self, broker_id: int, timeout: float = 60.0) -> None:
        """Start a stopped or killed broker again (same id, port and data); one that
        runs is stopped first."""
        if self.is_running(broker_id):
            self.stop(broker_id, timeout)
        self._call(self.cluster.start_broker(broker_id), timeout)
