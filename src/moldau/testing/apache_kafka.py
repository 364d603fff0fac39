"""Apache Kafka's own broker as an OS process, for tests and benchmarks: a KRaft node
in combined mode (broker and controller) of Kafka 4.1, or a Kafka 3.9 broker on
ZooKeeper, the last Kafka that still writes message formats v0 and v1.

The jars come from Maven: tests/java/target/lib for 4.1 (moldau.testing.kafka_java),
tests/java/kafka39/target/lib for 3.9, each a class path of its own.
`KafkaBroker.start` formats a KRaft node's storage first (kafka.tools.StorageTool),
starts `java ... kafka.Kafka server.properties` with the broker's log in its
directory (kept for a failed test to show), waits until Metadata lists it, and
`stop`/`kill` end that process by its PID.

Started for a test (the default JVM options), a broker starts as fast as it can:
a small heap, the C1 compiler alone, the serial collector. (A Class Data Sharing
archive, kafka-run-class's trick for the tools, was tried: it saves about 2 s a
start but costs 10-20 s to make, which a CI run on a clean clone always pays.)
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moldau.testing import kafka_java
from moldau.testing.jvm import FAST_START

#: Kafka's kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS, for a benchmark's broker.
PERFORMANCE = (
    "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
    "-XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"
)


@dataclass(frozen=True, slots=True)
class Distribution:
    """One version of Kafka's jars: a Maven project whose `package` puts them in
    target/lib, and how its logging is configured."""

    version: str
    project: Path
    logging: tuple[str, ...]

    @property
    def lib(self) -> Path:
        return self.project / "target" / "lib"

    def ensure_built(self) -> None:
        """`mvn package` unless target/lib is newer than the pom."""
        why = kafka_java.java_unavailable()
        if why is not None:
            raise RuntimeError(f"Apache Kafka cannot run: {why}; scripts/test.sh installs it")
        if self.project == kafka_java.JAVA_DIR:
            kafka_java.ensure_built()
            return
        pom = self.project / "pom.xml"
        if not self.lib.is_dir() or pom.stat().st_mtime > self.lib.stat().st_mtime:
            subprocess.run(
                ["mvn", "-q", "-B", "package"], cwd=self.project, check=True, timeout=900
            )
            self.lib.touch()


KAFKA_4 = Distribution(
    "4.1.1",
    kafka_java.JAVA_DIR,
    (f"-Dlog4j2.configurationFile={kafka_java.JAVA_DIR / 'log4j2.properties'}",),
)
KAFKA_3_9 = Distribution(
    "3.9.1",
    kafka_java.JAVA_DIR / "kafka39",
    (f"-Dlog4j.configuration=file:{kafka_java.JAVA_DIR / 'kafka39' / 'log4j.properties'}",),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_id() -> str:
    """A new KRaft cluster id: a UUID in Kafka's form (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


def kraft_properties(
    node_id: int, port: int, controller_port: int, voters: str, log_dir: Path, rf: int = 1
) -> dict[str, str]:
    """A combined KRaft node's server.properties, PLAINTEXT on 127.0.0.1.
    `voters`: controller.quorum.voters, id@host:port of every node."""
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "offsets.topic.replication.factor": str(rf),
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }


def zookeeper_properties(
    broker_id: int, port: int, zookeeper_connect: str, log_dir: Path
) -> dict[str, str]:
    """A ZooKeeper-mode broker's server.properties (Kafka 3.x), PLAINTEXT on 127.0.0.1."""
    return {
        "broker.id": str(broker_id),
        "zookeeper.connect": zookeeper_connect,
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(log_dir),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }


class KafkaBroker:
    """One Apache Kafka broker process (in KRaft mode a combined node)."""

    def __init__(
        self,
        directory: Path,
        properties: Mapping[str, str],
        *,
        port: int,
        distribution: Distribution = KAFKA_4,
        kraft_cluster_id: str | None = None,
        heap: str = "256m",
        jvm_options: str = FAST_START,
    ) -> None:
        """`properties`: server.properties (kraft_properties, zookeeper_properties);
        `port`: its PLAINTEXT listener's; `kraft_cluster_id`: a KRaft node's cluster
        id, its storage formatted with it before the first start (None: ZooKeeper
        mode)."""
        self.directory = Path(directory)
        self.properties = dict(properties)
        self.port = port
        self.distribution = distribution
        self.kraft_cluster_id = kraft_cluster_id
        self.heap = heap
        self.jvm_options = jvm_options
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def kraft(
        cls, directory: Path, overrides: Mapping[str, str] | None = None, **kwargs: Any
    ) -> KafkaBroker:
        """A single-node KRaft cluster (Kafka 4.1 unless `distribution` says)."""
        port, controller_port = free_port(), free_port()
        props = kraft_properties(
            1, port, controller_port, f"1@127.0.0.1:{controller_port}", Path(directory) / "data"
        )
        props |= dict(overrides or {})
        return cls(directory, props, port=port, kraft_cluster_id=cluster_id(), **kwargs)

    @classmethod
    def on_zookeeper(
        cls,
        directory: Path,
        zookeeper_connect: str,
        overrides: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> KafkaBroker:
        """A broker in ZooKeeper mode (Kafka 3.9 unless `distribution` says)."""
        port = free_port()
        props = zookeeper_properties(0, port, zookeeper_connect, Path(directory) / "data")
        kwargs.setdefault("distribution", KAFKA_3_9)
        return cls(directory, props | dict(overrides or {}), port=port, **kwargs)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        return self.directory / "kafka.log"

    @property
    def log_dir(self) -> Path:
        return Path(self.properties["log.dirs"])

    def _java(self, main_class: str, *args: str) -> list[str]:
        return [
            "java",
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            *self.jvm_options.split(),
            # The JVM's own warnings into the broker's log.
            "-Xlog:disable",
            "-Xlog:all=warning:stderr",
            *self.distribution.logging,
            "-cp",
            f"{self.distribution.lib}/*",
            main_class,
            *args,
        ]

    def format_storage(self) -> None:
        """A KRaft node's storage formatted (once: a formatted one is left alone)."""
        if self.kraft_cluster_id is None or (self.log_dir / "meta.properties").is_file():
            return
        self._write_config()
        done = subprocess.run(
            self._java(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.kraft_cluster_id,
                "-c",
                str(self.config_path),
            ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"kafka-storage format failed: {done.stdout}{done.stderr}")

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    def _write_config(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))

    def launch(self) -> None:
        """Starts the process and returns at once (`wait_ready` waits for it)."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"Kafka broker {self.proc.pid} is already running")
        self.distribution.ensure_built()
        self._write_config()
        self.format_storage()
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child holds it)
        try:
            self.proc = subprocess.Popen(
                self._java("kafka.Kafka", str(self.config_path)),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()

    def wait_accepting(self, timeout: float = 60.0) -> None:
        """Until its listener accepts connections (Kafka binds it last in start-up)."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_running()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self._fail(f"nothing accepts on port {self.port} after {timeout} s")
                time.sleep(0.01)

    def wait_ready(self, brokers: int = 1, timeout: float = 60.0) -> None:
        """Until it accepts connections and its Metadata lists `brokers` brokers (a
        KRaft broker answers before its controller has registered it)."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        self.wait_accepting(timeout)
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        while time.monotonic() < deadline:
            self._check_running()
            try:
                if len(admin.list_topics(timeout=2).brokers) >= brokers:
                    return
            except Exception:  # not answering yet: ask again
                pass
            time.sleep(0.02)
        self._fail(f"Metadata did not list {brokers} broker(s) within {timeout} s")

    def start(self, timeout: float = 60.0) -> KafkaBroker:
        self.launch()
        try:
            self.wait_ready(timeout=timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def _check_running(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            self._fail(f"the Kafka broker exited with {code}")

    def _fail(self, what: str) -> None:
        tail = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
        raise RuntimeError(f"{what}; its log, {self.log_path}, ends:\n{tail}")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait (a clean shutdown); kill -9 if it takes longer."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return code

    def kill(self) -> None:
        """kill -9 by PID."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def __enter__(self) -> KafkaBroker:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Ends the process: kill -9 (a test's broker has nothing to save)."""
        self.kill()
