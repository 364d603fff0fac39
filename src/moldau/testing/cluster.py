"""A Moldau cluster for tests: a ZooKeeper server and N brokers, each a real
`moldau serve` process, with the faults a test needs: kill -9, SIGTERM, pause
(SIGSTOP) and resume, restart. For this project's tests and for users testing
their own Kafka applications:

    with Cluster(tmp_path, brokers=3) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        cluster.kill(cluster.controller_id())
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from moldau.testing.isolation import IsolationGroup, isolation_available
from moldau.testing.process import BrokerProcess, wait_for
from moldau.testing.sasl import SaslListener, SaslUsers, write_scram_users
from moldau.testing.zookeeper import ZooKeeperServer, read_children, read_znodes

if TYPE_CHECKING:  # cryptography is a test extra: only for tests with TLS
    from moldau.testing.certs import Certificates


class Cluster(SaslListener):
    def __init__(
        self,
        directory: Path,
        brokers: int = 3,
        overrides: Mapping[str, str] | None = None,
        zookeeper: ZooKeeperServer | None = None,
        chroot: str = "/moldau",
        tls: Certificates | None = None,
        client_auth: str = "none",
        inter_broker_listener: str | None = None,
        sasl: SaslUsers | None = None,
    ) -> None:
        """`tls`: every broker also listens with TLS (BrokerProcess's `tls`);
        `sasl`: and with SASL (SASL_SSL with `tls`, else SASL_PLAINTEXT), its SCRAM
        users written to ZooKeeper before the brokers start;
        `inter_broker_listener` (e.g. "SSL", "SASL_SSL") is what brokers use
        between them."""
        self.directory = Path(directory)
        self.tls, self.client_auth, self.sasl = tls, client_auth, sasl
        self._own_zookeeper = zookeeper is None
        self.zookeeper = zookeeper or ZooKeeperServer(self.directory / "zookeeper")
        self.chroot = chroot
        self.overrides = dict(overrides or {})
        if inter_broker_listener is not None:
            self.overrides.setdefault("inter.broker.listener.name", inter_broker_listener)
        # Each broker starts in a group of its own so `isolate` can cut it off, where
        # this machine allows it (root, cgroup v2, nft).
        self.isolation_unavailable = isolation_available()
        self._groups: dict[int, IsolationGroup] = {}
        if self.isolation_unavailable is None:
            self._groups = {i: IsolationGroup(f"broker-{i}") for i in range(1, brokers + 1)}
        self.brokers: dict[int, BrokerProcess] = {
            i: BrokerProcess(
                self.directory / f"broker-{i}",
                self._settings(i),
                isolation=self._groups.get(i),
                tls=tls,
                client_auth=client_auth,
                sasl=sasl,
            )
            for i in range(1, brokers + 1)
        }

    @property
    def zookeeper_connect(self) -> str:
        return self.zookeeper.connect + self.chroot

    def _settings(self, broker_id: int) -> dict[str, str]:
        return {
            "broker.id": str(broker_id),
            "zookeeper.connect": self.zookeeper_connect,
            # Short enough that a killed broker is noticed within seconds.
            "zookeeper.session.timeout.ms": "2000",
            **self.overrides,
        }

    @property
    def bootstrap(self) -> str:
        """bootstrap.servers naming every broker that runs."""
        return ",".join(b.bootstrap for b in self.brokers.values() if self.is_running(b))

    @property
    def ssl_bootstrap(self) -> str:
        """bootstrap.servers naming every running broker's SSL listener."""
        return ",".join(b.ssl_bootstrap for b in self.brokers.values() if self.is_running(b))

    @property
    def sasl_bootstrap(self) -> str:
        """bootstrap.servers naming every running broker's SASL listener."""
        return ",".join(b.sasl_bootstrap for b in self.brokers.values() if self.is_running(b))

    @staticmethod
    def is_running(b: BrokerProcess) -> bool:
        return b.proc is not None and b.proc.poll() is None

    # -- life cycle ----------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> Cluster:
        try:
            if self._own_zookeeper:
                self.zookeeper.start()
            if self.sasl is not None:
                self._write_users(self.sasl)
            # Side by side: a broker's start is mostly its own CPU (imports, recovery),
            # so together they take about half as long on two cores as one by one.
            for b in self.brokers.values():
                b.launch()
            for b in self.brokers.values():
                b.wait_started(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _write_users(self, sasl: SaslUsers) -> None:
        from moldau.metadata.zookeeper import ZooKeeperStore

        async def write() -> None:
            store = ZooKeeperStore(self.zookeeper_connect)
            await store.start()
            try:
                await write_scram_users(store, sasl)
            finally:
                await store.close()

        asyncio.run(write())

    def add_broker(
        self, broker_id: int | None = None, sasl: SaslUsers | None = None, timeout: float = 60.0
    ) -> BrokerProcess:
        """Start one more broker in the cluster (the next id by default), with the
        cluster's settings; `sasl` replaces the cluster's (e.g. a wrong inter-broker
        password). `close` kills it with the others."""
        broker_id = broker_id or max(self.brokers) + 1
        if broker_id in self.brokers:
            raise ValueError(f"broker {broker_id} is already in the cluster")
        b = BrokerProcess(
            self.directory / f"broker-{broker_id}",
            self._settings(broker_id),
            tls=self.tls,
            client_auth=self.client_auth,
            sasl=sasl or self.sasl,
        )
        self.brokers[broker_id] = b
        return b.start(timeout)

    def close(self) -> None:
        """Kill every broker and, if the cluster started it, ZooKeeper."""
        for b in self.brokers.values():
            self._resume(b)
            b.kill()
        if self._own_zookeeper:
            self.zookeeper.stop()
        for group in self._groups.values():
            group.remove()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults --------------------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        """kill -9 one broker."""
        self._resume(self.brokers[broker_id])
        self.brokers[broker_id].kill()

    def stop(self, broker_id: int) -> int:
        """SIGTERM one broker and wait for its clean shutdown."""
        return self.brokers[broker_id].stop()

    def restart(self, broker_id: int, timeout: float = 60.0) -> None:
        """Start a stopped or killed broker again (same port, same data)."""
        b = self.brokers[broker_id]
        if self.is_running(b):
            b.stop()
        b.start(timeout)

    def isolate(self, broker_id: int) -> None:
        """Cut one broker off the network: ZooKeeper, the other brokers and clients
        stop hearing from it (they time out), though it runs on."""
        if self.isolation_unavailable is not None:
            raise RuntimeError(f"cannot isolate a broker here: {self.isolation_unavailable}")
        self._groups[broker_id].isolate()

    def heal(self, broker_id: int) -> None:
        """Put an isolated broker back on the network."""
        group = self._groups.get(broker_id)
        if group is not None:
            group.heal()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the process stays, but answers nothing, not even ZooKeeper."""
        os.kill(self.brokers[broker_id].pid, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        self._resume(self.brokers[broker_id])

    @staticmethod
    def _resume(b: BrokerProcess) -> None:
        if Cluster.is_running(b):
            os.kill(b.pid, signal.SIGCONT)

    def data_dir(self, broker_id: int) -> Path:
        return self.brokers[broker_id].data_dir

    # -- what ZooKeeper says -------------------------------------------------------------

    def znode(self, path: str) -> bytes | None:
        return read_znodes(self.zookeeper_connect, [path])[path]

    def controller_id(self) -> int | None:
        data = self.znode("/controller")
        return None if data is None else int(json.loads(data)["brokerid"])

    def live_broker_ids(self) -> list[int]:
        return sorted(int(c) for c in read_children(self.zookeeper_connect, "/brokers/ids"))

    def wait_for_controller(self, other_than: int | None = None, timeout: float = 30.0) -> int:
        """The id of the controller once there is one (other than `other_than`)."""
        found: list[int] = []

        def elected() -> bool:
            c = self.controller_id()
            if c is None or c == other_than:
                return False
            found.append(c)
            return True

        if not wait_for(elected, timeout, interval=0.1):
            raise TimeoutError(f"no controller (other than {other_than}) within {timeout} s")
        return found[-1]
