"""A real ZooKeeper server as an OS process, for tests: Debian's ZooKeeper jar run
directly with java (standalone mode, admin server off, loopback only), with
stop, kill -9, pause and resume by PID."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperUnavailable(RuntimeError):
    pass


def zookeeper_available() -> str | None:
    """None when a ZooKeeper server can be started here, else why not."""
    if shutil.which("java") is None:
        return "java is not installed"
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} is missing (Debian package libzookeeper-java)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ZooKeeperServer:
    def __init__(self, directory: Path, port: int = 0, tick_time_ms: int = 200) -> None:
        self.directory = Path(directory)
        self.port = port or _free_port()
        self.tick_time_ms = tick_time_ms
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        """The `zookeeper.connect` string."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        why = zookeeper_available()
        if why is not None:
            raise ZooKeeperUnavailable(why)
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"ZooKeeper process {self.proc.pid} is already running")
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        # A short tick lets tests use short session timeouts (min = 2 ticks); the
        # maximum is raised from 20 ticks so a test can also hold a session through
        # a long pause (as Kafka's default of 18 s).
        config.write_text(
            f"tickTime={self.tick_time_ms}\n"
            "maxSessionTimeout=60000\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "maxClientCnxns=0\n"
            "4lw.commands.whitelist=srvr\n"
        )
        classpath = [str(ZOOKEEPER_JAR)]
        if SLF4J_SIMPLE_JAR.exists():
            classpath.append(str(SLF4J_SIMPLE_JAR))
        log = open(self.directory / "zookeeper.log", "ab")  # noqa: SIM115 (owned by the child)
        try:
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-cp", ":".join(classpath), MAIN_CLASS, str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.serving():
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"ZooKeeper did not start; see {self.directory / 'zookeeper.log'}")

    def serving(self) -> bool:
        """True when the server answers the `srvr` four-letter command."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"srvr")
                reply = b""
                while chunk := s.recv(4096):
                    reply += chunk
        except OSError:
            return False
        return b"Mode:" in reply

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is None:
            return
        self._signal(signal.SIGKILL)
        self.proc.wait(10)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def expire_session(connect: str, credentials: tuple[int, bytes]) -> None:
    """Expire a client's ZooKeeper session the way ZooKeeper's own tests do: open a
    second connection with the same session id and password, then close it. The
    server ends the session; the first client learns it is expired."""
    from kazoo.client import KazooClient

    hosts = connect.split("/", 1)[0]
    intruder = KazooClient(hosts=hosts, client_id=credentials)
    intruder.start(10)
    try:
        intruder.stop()
    finally:
        intruder.close()


def read_znodes(connect: str, paths: list[str]) -> dict[str, bytes | None]:
    """The data of each path (None where there is no node), read in one session."""
    from moldau.metadata.zookeeper import ZooKeeperStore

    async def read() -> dict[str, bytes | None]:
        store = ZooKeeperStore(connect)
        await store.start()
        try:
            found = {p: await store.get_or_none(p) for p in paths}
        finally:
            await store.close()
        return {p: None if f is None else f[0] for p, f in found.items()}

    return asyncio.run(read())


def read_children(connect: str, path: str) -> list[str]:
    """The children of `path`, sorted; none if it does not exist."""
    from moldau.metadata.zookeeper import ZooKeeperStore

    async def read() -> list[str]:
        store = ZooKeeperStore(connect)
        await store.start()
        try:
            if await store.exists(path) is None:
                return []
            return await store.get_children(path)
        finally:
            await store.close()

    return asyncio.run(read())
