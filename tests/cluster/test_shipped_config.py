"""The shipped config/zookeeper.properties and config/server.properties, started as
README.md says: one ZooKeeper server and one broker on this machine as shipped, and
the walk-through's three-server ensemble and three brokers, with the README's own
lines (host names turned into loopback ports) written into copies of the files.
ZooKeeper runs as the README starts it: Debian's jar, QuorumPeerMain, the file."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.testing.process import wait_for
from moldau.testing.zookeeper import SLF4J_SIMPLE_JAR, ZOOKEEPER_JAR, zookeeper_available

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config"
README = ROOT / "README.md"
QUORUM_PEER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def edited(source: Path, target: Path, changes: dict[str, str]) -> Path:
    """A copy of a properties file with some lines set, as a user edits it: a
    line of the key (or its commented-out example) takes the new value; a key
    the file lacks is appended."""
    lines = source.read_text().splitlines()
    left = dict(changes)
    for i, line in enumerate(lines):
        m = re.match(r"#?\s*([\w.]+)\s*=", line)
        if m and m.group(1) in left:
            lines[i] = f"{m.group(1)}={left.pop(m.group(1))}"
    lines += [f"{k}={v}" for k, v in left.items()]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n")
    return target


def readme_properties(first_line: str) -> dict[str, str]:
    """The lines of the README's ```properties block that starts with `first_line`."""
    blocks = re.findall(r"```properties\n(.*?)```", README.read_text(), re.S)
    for block in blocks:
        if block.startswith(first_line):
            return dict(
                (k.strip(), v.strip())
                for k, _, v in (line.partition("=") for line in block.splitlines())
                if not k.startswith("#") and k.strip()
            )
    raise AssertionError(f"README.md has no properties block starting {first_line!r}")


def srvr(port: int) -> str:
    """The answer to ZooKeeper's `srvr` command ('' while it does not serve)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"srvr")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
    except OSError:
        return ""
    return reply.decode(errors="replace")


class Processes:
    """ZooKeeper servers and brokers started from config files, all killed at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: list[subprocess.Popen[bytes]] = []
        self.readers: list[threading.Thread] = []

    def zookeeper(self, config: Path, client_port: int) -> None:
        log = open(config.with_suffix(".log"), "ab")  # noqa: SIM115 (the child's)
        with log:
            self.procs.append(
                subprocess.Popen(
                    ["java", "-Xmx256m", "-cp", f"{ZOOKEEPER_JAR}:{SLF4J_SIMPLE_JAR}",
                     QUORUM_PEER_MAIN, str(config)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )  # fmt: skip

    def broker(self, config: Path) -> str:
        """`moldau serve --config FILE`; its address once it listens."""
        log = open(config.with_suffix(".log"), "ab")  # noqa: SIM115 (the reader thread's)
        proc = subprocess.Popen(
            [sys.executable, "-m", "moldau", "serve", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=log,
        )
        self.procs.append(proc)
        found: list[str] = []
        listening = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                m = re.search(r"listening on (\S+)", raw.decode(errors="replace"))
                if m and not found:
                    found.append(m.group(1))
                    listening.set()
            listening.set()
            proc.stdout.close()
            log.close()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        self.readers.append(reader)
        assert listening.wait(60) and found, f"no broker; see {config.with_suffix('.log')}"
        return found[0]

    def kill_all(self) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait(10)
        for reader in self.readers:
            reader.join(10)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    why = zookeeper_available()
    if why is not None:
        pytest.fail(f"ZooKeeper cannot run here ({why}); scripts/test.sh installs it")
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


def produce_and_consume_in_a_group(bootstrap: str, topic: str, replicas: int) -> None:
    """A topic of the cluster's defaults, acks=all writes, and a consumer group
    (which needs __consumer_offsets) reading them back."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3)])[topic].result(timeout=60)

    def full_isr() -> bool:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        return len(md.partitions) == 3 and all(
            len(p.replicas) == replicas and len(p.isrs) == replicas for p in md.partitions.values()
        )

    assert wait_for(full_isr, timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(60) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "readers", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        seen: list[bytes] = []

        def all_read() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
            return len(seen) == 30

        assert wait_for(all_read, timeout=90)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(seen) == sorted(b"%d" % i for i in range(30))


def test_one_broker_and_zookeeper_from_the_files_as_shipped(
    tmp_path: Path, processes: Processes
) -> None:
    [client] = free_ports(1)
    zk = edited(
        CONFIG / "zookeeper.properties",
        tmp_path / "zookeeper.properties",
        # Where this test may write and listen; the rest as shipped.
        {"dataDir": str(tmp_path / "zookeeper"), "clientPort": str(client),
         "clientPortAddress": "127.0.0.1"},
    )  # fmt: skip
    processes.zookeeper(zk, client)
    assert wait_for(lambda: "Mode: standalone" in srvr(client), timeout=60)
    server = edited(
        CONFIG / "server.properties",
        tmp_path / "server.properties",
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "logs"),
         "zookeeper.connect": f"127.0.0.1:{client}/moldau"},
    )  # fmt: skip
    bootstrap = processes.broker(server)
    produce_and_consume_in_a_group(bootstrap, "shipped", replicas=1)


def test_the_three_host_walk_through(tmp_path: Path, processes: Processes) -> None:
    """The README's lines for three ZooKeeper servers and three brokers on three
    hosts, each host played by loopback ports of its own."""
    zk_lines = readme_properties("# config/zookeeper.properties")
    broker_lines = readme_properties("# config/server.properties")
    ports = free_ports(9)
    clients, quorum, election = ports[0:3], ports[3:6], ports[6:9]

    def on_loopback(text: str, n: int) -> str:
        """The README's host names and directories, as this test's host n."""
        for i in (1, 2, 3):
            text = text.replace(
                f"zk{i}.example.com:2888:3888", f"127.0.0.1:{quorum[i - 1]}:{election[i - 1]}"
            )
            text = text.replace(f"zk{i}.example.com:2181", f"127.0.0.1:{clients[i - 1]}")
        text = text.replace("/var/lib/zookeeper", str(tmp_path / f"zk{n}"))
        text = text.replace("/var/lib/moldau", str(tmp_path / f"broker{n}"))
        return re.sub(r"PLAINTEXT://broker\d\.example\.com:9092", "PLAINTEXT://127.0.0.1:0", text)

    for n in (1, 2, 3):
        changes = {k: on_loopback(v, n) for k, v in zk_lines.items()}
        # Each host's own port (on loopback the three cannot share 2181).
        changes |= {"clientPort": str(clients[n - 1]), "clientPortAddress": "127.0.0.1"}
        config = edited(CONFIG / "zookeeper.properties", tmp_path / f"zk{n}.properties", changes)
        data = Path(changes["dataDir"])
        data.mkdir(parents=True)
        (data / "myid").write_text(f"{n}\n")  # the README's `echo N > .../myid`
        processes.zookeeper(config, clients[n - 1])
    modes = lambda: [srvr(p) for p in clients]  # noqa: E731
    assert wait_for(
        lambda: (
            sorted(re.findall(r"Mode: (\w+)", "".join(modes())))
            == ["follower", "follower", "leader"]
        ),
        timeout=90,
    ), modes()

    addresses = []
    for n in (1, 2, 3):
        changes = {k: on_loopback(v, n) for k, v in broker_lines.items()}
        changes["broker.id"] = str(n)  # the README: 2 and 3 on the other hosts
        config = edited(CONFIG / "server.properties", tmp_path / f"server{n}.properties", changes)
        addresses.append(processes.broker(config))
    produce_and_consume_in_a_group(",".join(addresses), "walked-through", replicas=3)
    offsets = AdminClient({"bootstrap.servers": addresses[0]}).list_topics(
        "__consumer_offsets", timeout=20
    )
    assert {len(p.replicas) for p in offsets.topics["__consumer_offsets"].partitions.values()} == {
        3
    }
