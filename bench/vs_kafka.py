"""Moldau side by side with Apache Kafka 4.1.1 (issue 24), in one run, on one machine.

Kafka is one KRaft node in combined mode (process.roles=broker,controller), started
by moldau.testing.apache_kafka.KafkaBroker from the jars of tests/java/target/lib with
a 512 MiB heap (-Xmx/-Xms, the JVM options of Kafka's own kafka-run-class.sh otherwise,
no class archive beyond the JDK's), its storage formatted first with
kafka.tools.StorageTool. Moldau is `python -m moldau serve` from this checkout. Each
runs in turn on 127.0.0.1 with the same topic settings (RF 1, --partitions each), and
Kafka's own perf tools drive both:

- org.apache.kafka.tools.ProducerPerformance (kafka-producer-perf-test), client
  defaults but acks, 100 B and 1 KiB records, acks=1 and acks=all: records/s, MB/s;
- org.apache.kafka.tools.ConsumerPerformance (kafka-consumer-perf-test) over what the
  acks=1 run wrote: records/s and MB/s of fetching (its fetch.* figures, which leave
  out the group's join);
- the broker's CPU (utime+stime from /proc, all its threads) per MB produced/consumed;
- p50/p99 produce latency at a fixed rate (ProducerPerformance --throughput);
- start-up: process start to accepting TCP connections, and to answering a Metadata
  request that lists the broker (Kafka binds its listener at the end of its start-up;
  Moldau binds first and holds requests until it serves); idle RSS 2 s later;
- partition creation, on a fresh broker each time, until every partition has a leader
  in Metadata and until every partition's directory exists, in two shapes: one topic
  of N partitions in one CreateTopics (`kafka-topics --create --partitions N`), and
  N/10 topics of 10 partitions in CreateTopics requests of 100 topics each (an
  operator's script creating many topics);
- with --cluster: 3 Kafka nodes (three combined KRaft nodes) against 3 Moldau broker
  processes on ZooKeeper (moldau.testing.cluster.Cluster), RF 3, acks=all.

Ratios are Moldau / Kafka from the same run: for rates, above 1 means Moldau does
more; for CPU, time and memory, below 1 means Moldau spends less. A warm-up (not
measured) lets each broker load its code (and Kafka's JIT compile its hot paths)
before the first measured run. All brokers of a comparison run at once, idle but for
the one under test, and each test runs on each in turn, so a ratio compares runs
made seconds apart. Both sides set group.initial.rebalance.delay.ms=0.

    .venv/bin/python bench/vs_kafka.py             # everything, a few minutes
    .venv/bin/python bench/vs_kafka.py --quick     # about a minute: acks=all, small sizes
    .venv/bin/python bench/vs_kafka.py --record    # also append to bench/RESULTS.md
    .venv/bin/python bench/vs_kafka.py --event-loops asyncio,uvloop   # Moldau on both

Needs Java 17+ and Maven (tests/java is built on first use).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from throughput import machine, publish

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from moldau.testing import apache_kafka, kafka_java  # noqa: E402
from moldau.testing.apache_kafka import free_port  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS, for the broker and the perf tools alike
# (tests/java/kafka-run-class defaults to C1 only, which suits short-lived tools, not these).
JVM_PERFORMANCE_OPTS = apache_kafka.PERFORMANCE
# kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh set this heap.
TOOL_HEAP = "-Xmx512M"
TOOL_TIMEOUT_S = 240.0


def wait_accepting(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.pid} exited with {proc.returncode} at start")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing accepts on port {port} after {timeout} s") from None
            time.sleep(0.005)


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def wait_metadata(bootstrap: str, brokers: int, timeout: float = 60.0) -> None:
    """Until a Metadata answer lists every broker."""
    client = admin(bootstrap)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with suppress(Exception):
            if len(client.list_topics(timeout=5).brokers) >= brokers:
                return
        time.sleep(0.01)
    raise RuntimeError(f"Metadata did not list {brokers} brokers within {timeout} s")


# -- the brokers --------------------------------------------------------------------------


@dataclass
class Server:
    """One side of the comparison: its broker processes (the JVMs, or Moldau's), not
    ZooKeeper's; `stop` ends them whatever happens."""

    name: str
    bootstrap: str
    pids: list[int]
    log_dirs: list[Path]
    accepting_s: float = 0.0
    ready_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def partition_dirs(self, prefix: str) -> int:
        """How many partition directories of topics named prefix... exist."""
        return sum(
            sum(1 for e in os.scandir(d) if e.name.startswith(prefix)) for d in self.log_dirs
        )

    def cpu_seconds(self) -> float:
        total = 0
        for pid in self.pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / CLK_TCK

    def rss_mb(self) -> float:
        total = 0
        for pid in self.pids:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        return total / 1024


def kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
    for p in procs:
        with suppress(subprocess.TimeoutExpired):
            p.wait(30)


@contextmanager
def kafka(workdir: Path, nodes: int, heap: str) -> Iterator[Server]:
    """`nodes` KRaft nodes, each broker and controller (a static quorum of all), with
    kafka-run-class.sh's JVM options and no class archive of ours (as distributed)."""
    ports = [(free_port(), free_port()) for _ in range(nodes)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
    cluster = apache_kafka.cluster_id()
    nodes_ = [
        apache_kafka.KafkaBroker(
            workdir / f"kafka-{i + 1}",
            apache_kafka.kraft_properties(
                i + 1, port, cport, voters, workdir / f"kafka-{i + 1}" / "data", min(3, nodes)
            ),
            port=port,
            kraft_cluster_id=cluster,
            heap=heap,
            jvm_options=apache_kafka.PERFORMANCE,
        )
        for i, (port, cport) in enumerate(ports)
    ]
    began = time.monotonic()
    for n in nodes_:
        n.format_storage()
    formatted = time.monotonic() - began
    try:
        start = time.monotonic()
        for n in nodes_:
            n.launch()
        for n in nodes_:
            n.wait_accepting(120)
        accepting = time.monotonic() - start
        for n in nodes_:
            n.wait_ready(nodes)
        server = Server("kafka", ",".join(n.bootstrap for n in nodes_), [n.pid for n in nodes_],
                        [n.log_dir for n in nodes_], accepting,
                        time.monotonic() - start)  # fmt: skip
        server.notes.append(f"storage format (once, before the first start) {formatted:.1f} s")
        yield server
    finally:
        for n in nodes_:
            n.kill()


@contextmanager
def moldau(workdir: Path, event_loop: str | None) -> Iterator[Server]:
    port = free_port()
    cmd = [sys.executable, "-m", "moldau", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--data-dir", str(workdir / "moldau-data"), "--log-level", "WARNING"]  # fmt: skip
    # As the Kafka broker's server.properties: consumer-perf-test's group joins at once.
    cmd += ["--override", "group.initial.rebalance.delay.ms=0"]
    if event_loop is not None:
        cmd += ["--override", f"event.loop={event_loop}"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}  # this checkout's Moldau
    log = open(workdir / "moldau.log", "wb")  # noqa: SIM115 (the child holds it)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
    log.close()
    try:
        wait_accepting(port, proc, 60)
        accepting = time.monotonic() - start
        bootstrap = f"127.0.0.1:{port}"
        wait_metadata(bootstrap, 1)
        yield Server(moldau_name(event_loop), bootstrap, [proc.pid],
                     [workdir / "moldau-data"], accepting, time.monotonic() - start)  # fmt: skip
    finally:
        kill_all([proc])


@contextmanager
def moldau_cluster(workdir: Path, event_loop: str | None) -> Iterator[Server]:
    """Three `moldau serve` processes on one ZooKeeper (whose CPU is not counted)."""
    from moldau.testing.cluster import Cluster

    overrides = {"offsets.topic.replication.factor": "3", "group.initial.rebalance.delay.ms": "0"}
    if event_loop is not None:
        overrides["event.loop"] = event_loop
    os.environ["PYTHONPATH"] = str(REPO / "src")
    start = time.monotonic()
    with Cluster(workdir / "moldau-zk", brokers=3, overrides=overrides) as cluster:
        accepting = time.monotonic() - start
        wait_metadata(cluster.bootstrap, 3)
        server = Server(moldau_name(event_loop), cluster.bootstrap,
                        [b.pid for b in cluster.brokers.values()],
                        [b.data_dir for b in cluster.brokers.values()], accepting,
                        time.monotonic() - start)  # fmt: skip
        server.notes.append("start-up includes ZooKeeper's")
        yield server


def moldau_name(event_loop: str | None) -> str:
    return "moldau" if event_loop is None else f"moldau/{event_loop}"


# -- Kafka's perf tools -------------------------------------------------------------------


def tool(cls: str, *args: str) -> str:
    env = {"KAFKA_HEAP_OPTS": TOOL_HEAP, "KAFKA_JVM_PERFORMANCE_OPTS": JVM_PERFORMANCE_OPTS}
    done = kafka_java.run(cls, *args, timeout=TOOL_TIMEOUT_S, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{cls} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    config = {"min.insync.replicas": "2"} if rf >= 3 else {}
    client.create_topics([NewTopic(topic, partitions, rf, config=config)])[topic].result(60)
    wait_led(client, [topic], partitions, 60)


def wait_led(client: Any, topics: list[str], partitions: int, timeout: float) -> None:
    """Until Metadata shows every partition of every topic with a leader."""
    deadline = time.monotonic() + timeout
    pending = set(topics)
    while pending:
        md = client.list_topics(timeout=60).topics
        for t in list(pending):
            m = md.get(t)
            if (
                m is not None
                and not m.error
                and len(m.partitions) == partitions
                and all(p.leader >= 0 for p in m.partitions.values())
            ):
                pending.discard(t)
        if pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(pending)} topics without leaders after {timeout} s")
            time.sleep(0.02)


_PRODUCED = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


@dataclass
class Run:
    records: int
    rate: float
    mb_s: float
    cpu_us_per_mb: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0


def produce(
    server: Server, topic: str, records: int, size: int, acks: str, throughput: int = -1
) -> Run:
    before = server.cpu_seconds()
    out = tool(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic, "--num-records", str(records), "--record-size", str(size),
        "--throughput", str(throughput),
        "--producer-props", f"bootstrap.servers={server.bootstrap}", f"acks={acks}",
    )  # fmt: skip
    cpu = server.cpu_seconds() - before
    m = _PRODUCED.search(out.strip().splitlines()[-1])
    if m is None or int(m.group(1)) != records:
        raise RuntimeError(f"{server.name}: unexpected ProducerPerformance output:\n{out}")
    mb = records * size / 1e6
    return Run(records, float(m.group(2)), float(m.group(3)), cpu * 1e6 / mb,
               float(m.group(6)), float(m.group(8)))  # fmt: skip


def consume(server: Server, topic: str, records: int, size: int) -> Run:
    before = server.cpu_seconds()
    out = tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server", server.bootstrap, "--topic", topic,
        "--messages", str(records), "--timeout", "60000",
        "--group", f"perf-{topic}-{time.monotonic_ns()}",
    )  # fmt: skip
    cpu = server.cpu_seconds() - before
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    row = [c.strip() for c in out.strip().splitlines()[-1].split(",")]
    if len(row) < 10 or int(row[4]) < records:
        raise RuntimeError(f"{server.name}: unexpected ConsumerPerformance output:\n{out}")
    mb = int(row[4]) * size / 1e6
    # MB here is 10^6 bytes, as ProducerPerformance counts; ConsumerPerformance's MB is MiB.
    return Run(int(row[4]), float(row[9]), float(row[8]) * 1024 * 1024 / 1e6, cpu * 1e6 / mb)


# -- partition creation -------------------------------------------------------------------


def settle() -> None:
    """Let the disk write back what earlier phases wrote before a timed creation."""
    subprocess.run(["sync"], check=True)
    time.sleep(2)


def on_disk(server: Server, prefix: str, partitions: int, start: float) -> float:
    """Seconds from `start` until every partition's directory exists."""
    deadline = time.monotonic() + 900
    while server.partition_dirs(prefix) < partitions:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name}: partition directories missing after 900 s")
        time.sleep(0.01)
    return time.monotonic() - start


def create_one_topic(server: Server, topic: str, partitions: int) -> tuple[float, float]:
    from confluent_kafka.admin import NewTopic

    client = admin(server.bootstrap)
    client.list_topics(timeout=30)  # connected before the clock starts
    start = time.monotonic()
    client.create_topics([NewTopic(topic, partitions, 1)], request_timeout=300)[topic].result(300)
    wait_led(client, [topic], partitions, 300)
    led = time.monotonic() - start
    return led, on_disk(server, f"{topic}-", partitions, start)


def create_many_topics(
    server: Server, prefix: str, topics: int, per_request: int
) -> tuple[float, float]:
    from confluent_kafka.admin import NewTopic

    client = admin(server.bootstrap)
    client.list_topics(timeout=30)
    names = [f"{prefix}-{i}" for i in range(topics)]
    start = time.monotonic()
    for i in range(0, topics, per_request):
        batch = [NewTopic(n, 10, 1) for n in names[i : i + per_request]]
        for f in client.create_topics(batch, request_timeout=300).values():
            f.result(300)
    wait_led(client, names, 10, 300)
    led = time.monotonic() - start
    return led, on_disk(server, f"{prefix}-", topics * 10, start)


# -- the run ------------------------------------------------------------------------------


@dataclass
class Settings:
    sizes: dict[int, int]  # record size -> records per produce run
    partitions: int
    latency_rate: int
    latency_records: int
    creations: list[int]
    cluster_records: int
    heap: str
    rounds: int
    quick: bool


@dataclass
class Result:
    name: str
    accepting_s: float = 0.0
    ready_s: float = 0.0
    idle_rss_mb: float = 0.0
    runs: dict[str, list[Run]] = field(default_factory=dict)
    creations: dict[str, tuple[float, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def mean(self, key: str) -> Run:
        runs = self.runs[key]
        n = len(runs)
        return Run(
            runs[0].records,
            sum(r.rate for r in runs) / n,
            sum(r.mb_s for r in runs) / n,
            sum(r.cpu_us_per_mb for r in runs) / n,
            sum(r.p50_ms for r in runs) / n,
            sum(r.p99_ms for r in runs) / n,
        )


def warm_up(server: Server, s: Settings, rf: int) -> None:
    """Each path once, unmeasured: Moldau imports lazily, Kafka's JIT compiles what runs,
    and an idempotent producer's first id comes from the controller."""
    began = time.monotonic()
    create_topic(server.bootstrap, "warm-up", s.partitions, rf)
    records = (s.sizes[100] if rf == 1 else s.cluster_records * 10) // 4
    produce(server, "warm-up", records, 100, "all")
    if not s.quick:
        produce(server, "warm-up", records // 10, 1024, "1")
        consume(server, "warm-up", records, 100)
    print(f"  {server.name}: warm-up ({time.monotonic() - began:.1f} s)", flush=True)


Test = Callable[[Server, str], Run]


def compare(
    servers: list[Server], results: list[Result], tests: dict[str, Test], rounds: int
) -> None:
    """Each test on each server in turn, round after round (the order reversed every
    other round), so that each ratio compares runs made seconds apart on a machine
    whose load changes."""
    for key, test in tests.items():
        for round_ in range(rounds):
            pairs = list(zip(servers, results, strict=True))
            for server, result in pairs if round_ % 2 == 0 else pairs[::-1]:
                loadavg()
                began = time.monotonic()
                try:
                    run = test(server, f"r{round_}")
                except Exception as e:  # one failed run is reported, the rest goes on
                    why = str(e).strip().splitlines()[0][:300]
                    result.notes.append(f"{key}, round {round_ + 1}, failed: {why}")
                    print(f"  {key} on {server.name} FAILED: {why}", flush=True)
                    continue
                result.runs.setdefault(key, []).append(run)
                shown = f"{run.rate:,.0f} rec/s, {run.mb_s:,.1f} MB/s"
                if key.startswith("latency"):
                    shown = f"p50 {run.p50_ms:.0f} ms, p99 {run.p99_ms:.0f} ms"
                print(f"  {key} on {server.name}: {shown} "
                      f"({time.monotonic() - began:.1f} s)", flush=True)  # fmt: skip


def perf_tests(s: Settings, rf: int) -> dict[str, Test]:
    tests: dict[str, Test] = {}
    # --quick: acks=all only, the Java producer's default.
    ackses = ("1", "all") if rf == 1 and not s.quick else ("all",)
    for size, single_records in s.sizes.items():
        records = single_records if rf == 1 else s.cluster_records * (10 if size < 1024 else 1)
        for acks in ackses:

            def run_produce(server: Server, tag: str, z: int = size, n: int = records,
                            a: str = acks) -> Run:  # fmt: skip
                topic = f"perf-{z}-{a}-{tag}"
                create_topic(server.bootstrap, topic, s.partitions, rf)
                return produce(server, topic, n, z, a)

            tests[f"produce {size} B acks={acks}"] = run_produce

        def run_consume(server: Server, tag: str, z: int = size, n: int = records) -> Run:
            # What the first produce test of this size wrote in this round.
            return consume(server, f"perf-{z}-{ackses[0]}-{tag}", n, z)

        tests[f"consume {size} B"] = run_consume
    for acks in ackses:

        def run_latency(server: Server, tag: str, a: str = acks) -> Run:
            topic = f"latency-{a}-{tag}"
            create_topic(server.bootstrap, topic, s.partitions, rf)
            return produce(server, topic, s.latency_records, 1024, a, s.latency_rate)

        tests[f"latency acks={acks}"] = run_latency
    return tests


def start(
    stack: ExitStack, kind: str, event_loop: str | None, nodes: int, s: Settings
) -> tuple[Server, Result]:
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vs-kafka-")))
    if kind == "kafka":
        server = stack.enter_context(kafka(workdir, nodes, s.heap))
    elif nodes == 1:
        server = stack.enter_context(moldau(workdir, event_loop))
    else:
        server = stack.enter_context(moldau_cluster(workdir, event_loop))
    time.sleep(2)
    result = Result(server.name, server.accepting_s, server.ready_s, server.rss_mb(),
                    notes=server.notes)  # fmt: skip
    print(f"  {server.name}: accepting {result.accepting_s:.2f} s, Metadata "
          f"{result.ready_s:.2f} s, idle RSS {result.idle_rss_mb:.0f} MB", flush=True)  # fmt: skip
    return server, result


def creation_shapes(n: int) -> list[tuple[str, Callable[[Server], tuple[float, float]]]]:
    """n partitions as one topic in one CreateTopics, and as n/10 topics of 10
    partitions in CreateTopics requests of 100 topics."""

    def one(server: Server) -> tuple[float, float]:
        return create_one_topic(server, f"one-{n}", n)

    def many(server: Server) -> tuple[float, float]:
        return create_many_topics(server, f"many-{n}", n // 10, 100)

    return [(f"1 topic of {n:,}", one), (f"{n // 10:,} topics of 10", many)]


def bench(loops: list[str | None], nodes: int, s: Settings) -> list[Result]:
    """Kafka and Moldau (once per event loop) side by side: all started, then each
    test on each in turn."""
    print(f"{nodes} broker{'s' if nodes > 1 else ''} each:", flush=True)
    with ExitStack() as stack:
        pairs = [start(stack, "kafka", None, nodes, s)]
        pairs += [start(stack, "moldau", loop, nodes, s) for loop in loops]
        servers = [p[0] for p in pairs]
        results = [p[1] for p in pairs]
        for server in servers:
            warm_up(server, s, nodes)
        compare(servers, results, perf_tests(s, nodes), s.rounds)
        return results


def bench_creations(loops: list[str | None], s: Settings, results: list[Result]) -> None:
    """Each shape on a fresh broker of each kind in turn: thousands of partitions left
    from one shape would count against the next (and against the open-files limit:
    Moldau holds a file open per partition)."""
    by_name = {r.name: r for r in results}
    kinds = [("kafka", None), *(("moldau", loop) for loop in loops)]
    for n in s.creations:
        for key, create in creation_shapes(n)[: 1 if s.quick else 2]:
            for kind, loop in kinds:
                with ExitStack() as stack:
                    server, _ = start(stack, kind, loop, 1, s)
                    result = by_name[server.name]
                    settle()
                    try:
                        result.creations[key] = created = create(server)
                    except Exception as e:  # Kafka refuses some shapes: say so, go on
                        why = str(e).strip().splitlines()[0][:300]
                        result.creations[key] = (math.nan, math.nan)
                        result.notes.append(f"create {key} partitions failed: {why}")
                        print(f"  {key} partitions on {server.name} FAILED: {why}", flush=True)
                        continue
                    print(f"  {key} partitions on {server.name}: leaders {created[0]:.2f} s, "
                          f"on disk {created[1]:.2f} s", flush=True)  # fmt: skip


# -- the report ---------------------------------------------------------------------------


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and math.isfinite(a / b) else "-"


def table(results: list[Result], keys: list[str]) -> list[str]:
    """One row per test: each broker's mean over the rounds, then ratios: each Moldau /
    Kafka and, with two Moldau event loops, the second / the first."""
    pairs = [(r, results[0]) for r in results[1:]]
    if len(results) == 3:
        pairs.append((results[2], results[1]))
    head = [r.name for r in results] + [f"{a.name} / {b.name}" for a, b in pairs]
    lines = ["| test | " + " | ".join(head) + " |", "|---" * (1 + len(head)) + "|"]
    for key in keys:
        failed = Run(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        means = {r.name: r.mean(key) if r.runs.get(key) else failed for r in results}
        if key.startswith("latency"):
            cells = [f"p50 {m.p50_ms:.0f} / p99 {m.p99_ms:.0f} ms" for m in means.values()]
            cells += [
                f"p50 {ratio(means[a.name].p50_ms, means[b.name].p50_ms)}, "
                f"p99 {ratio(means[a.name].p99_ms, means[b.name].p99_ms)}"
                for a, b in pairs
            ]
        else:
            cells = [
                f"{m.rate:,.0f} rec/s, {m.mb_s:,.1f} MB/s, CPU {m.cpu_us_per_mb:,.0f} µs/MB"
                for m in means.values()
            ]
            cells += [
                f"rate {ratio(means[a.name].rate, means[b.name].rate)}, CPU/MB "
                f"{ratio(means[a.name].cpu_us_per_mb, means[b.name].cpu_us_per_mb)}"
                for a, b in pairs
            ]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return lines


def facts(results: list[Result], cluster: bool) -> list[str]:
    head = [r.name for r in results] + [f"{r.name} / kafka" for r in results[1:]]
    lines = ["| figure | " + " | ".join(head) + " |", "|---" * (1 + len(head)) + "|"]
    k = results[0]
    brokers = "3 brokers" if cluster else "the broker"
    rows: list[tuple[str, Callable[[Result], float], str]] = [
        ("start to accepting connections", lambda r: r.accepting_s, "{:.2f} s"),
        (f"start to Metadata listing {brokers}", lambda r: r.ready_s, "{:.2f} s"),
        ("idle RSS" + (" of the 3 brokers" if cluster else ""), lambda r: r.idle_rss_mb,
         "{:,.0f} MB"),
    ]  # fmt: skip
    for key in k.creations:
        for i, until in enumerate(("all have leaders in Metadata", "all directories exist")):

            def created(r: Result, key: str = key, i: int = i) -> float:
                return r.creations[key][i]

            rows.append((f"create {key} partitions, until {until}", created, "{:.2f} s"))
    for label, get, form in rows:
        cells = [form.format(get(r)) if math.isfinite(get(r)) else "failed" for r in results]
        cells += [ratio(get(r), get(k)) for r in results[1:]]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for r in results:
        for note in r.notes:
            lines.append(f"\n{r.name}: {note}.")
    return lines


def report(single: list[Result], cluster: list[Result], s: Settings, quick: bool) -> str:
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    rounds = f"mean of {s.rounds} rounds" if s.rounds > 1 else "one round"
    lines = [
        f"## {today}: Moldau vs Apache Kafka 4.1.1 "
        f"(bench/vs_kafka.py{' --quick' if quick else ''})",
        "",
        f"Machine: {machine()}, Java {java_version()}. Load average (1 min) {LOADS[0]:.1f} at "
        f"the start, {LOADS[-1]:.1f} at the end, {min(LOADS):.1f}-{max(LOADS):.1f} over the "
        f"run (sampled before each test).",
        "",
        f"One broker each, {s.partitions} partition(s), RF 1; Kafka: one KRaft combined node, "
        f"heap {s.heap}. Kafka's ProducerPerformance / ConsumerPerformance with client "
        "defaults but acks; records per run: "
        + ", ".join(f"{n:,} of {z} B" for z, n in s.sizes.items())
        + f"; latency: {s.latency_records:,} records of 1 KiB at {s.latency_rate:,} rec/s. "
        "CPU: the broker process's utime+stime per MB (10^6 B) produced or consumed. "
        f"Tests interleaved, brokers in turn ({rounds}); ratios: for rates above 1 means "
        "Moldau does more, for CPU, latency, time and memory below 1 means Moldau spends less.",
        "",
    ]
    keys = list(dict.fromkeys(k for r in single for k in r.runs))
    lines += table(single, keys)
    lines += ["", *facts(single, False)]
    if cluster:
        lines += [
            "",
            f"Three brokers each, {s.partitions} partition(s), RF 3, min.insync.replicas=2, "
            "acks=all: Kafka as three combined KRaft nodes (three JVMs), Moldau as three "
            "`moldau serve` processes on ZooKeeper (CPU of the three broker processes; "
            f"ZooKeeper's not counted); {s.cluster_records * 10:,} records of 100 B, "
            f"{s.cluster_records:,} of 1 KiB.",
            "",
        ]
        lines += table(cluster, list(dict.fromkeys(k for r in cluster for k in r.runs)))
        lines += ["", *facts(cluster, True)]
    return "\n".join(lines) + "\n"


def java_version() -> str:
    out = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    m = re.search(r'version "([^"]+)"', out)
    return m.group(1) if m else "unknown"


LOADS: list[float] = []


def loadavg() -> float:
    """The 1-minute load average, also kept for the report's range."""
    load = float(Path("/proc/loadavg").read_text().split()[0])
    LOADS.append(load)
    return load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true",
        help="100,000 records, acks=all only, 1,000 partitions in one topic, one broker each",
    )  # fmt: skip
    parser.add_argument("--record", action="store_true", help="append to bench/RESULTS.md")
    parser.add_argument("--records", type=int, help="records of 100 B per produce run "
                        "(1 KiB runs take a quarter as many)")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    parser.add_argument("--rate", type=int, default=5000, help="rec/s of the latency runs")
    parser.add_argument(
        "--create", default=None, metavar="N,N", help="partition counts to create (none: '')"
    )
    parser.add_argument(
        "--cluster", action=argparse.BooleanOptionalAction, default=None,
        help="also 3 brokers of each, RF 3 (default: on, off with --quick)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="runs of each test per broker")
    parser.add_argument("--heap", default="512m", help="Kafka broker heap (-Xmx and -Xms)")
    parser.add_argument(
        "--event-loops", default=None, metavar="LOOP,LOOP",
        help="run Moldau once per event loop named (asyncio, uvloop); default: its own choice",
    )  # fmt: skip
    args = parser.parse_args()
    quick = args.quick
    records = args.records or (100_000 if quick else 1_000_000)
    create = args.create if args.create is not None else ("1000" if quick else "1000,10000")
    s = Settings(
        sizes={100: records, 1024: records // 4},
        partitions=args.partitions,
        latency_rate=args.rate,
        latency_records=args.rate * (2 if quick else 10),
        creations=[int(n) for n in create.split(",") if n],
        cluster_records=records // 40,
        heap=args.heap,
        rounds=args.rounds,
        quick=quick,
    )
    loops: list[str | None] = (
        [None] if args.event_loops is None else [x.strip() for x in args.event_loops.split(",")]
    )
    # SIGTERM ends the run as Ctrl-C does: every broker started is stopped by its pid.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    loadavg()
    single = bench(loops, 1, s)
    bench_creations(loops, s, single)
    with_cluster = args.cluster if args.cluster is not None else not quick
    cluster: list[Result] = []
    if with_cluster:
        try:
            cluster = bench(loops, 3, s)
        except Exception as e:  # the single-broker results are still worth recording
            print(f"3 brokers each FAILED: {e}", flush=True)
    loadavg()
    publish(report(single, cluster, s, quick), args.record)


if __name__ == "__main__":
    main()
