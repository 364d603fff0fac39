"""TLS: what it costs a producer and a consumer, against PLAINTEXT on the same
broker, in one run. One broker listening on PLAINTEXT and SSL (client
certificates required, made on the fly); confluent-kafka sends N records of
1 KiB to one partition through each listener, then reads them back through the
same listener; records/s and the ratio SSL / PLAINTEXT (aim, issue 26: at least
0.6x). Under TLS the fetch path reads file slices with pread (sendfile cannot go
through TLS), so the consume ratio shows what losing sendfile costs too.

    .venv/bin/python bench/security.py [--records 200000] [--rounds 3] [--record]
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from moldau.testing.certs import Certificates
from moldau.testing.process import BrokerProcess
from throughput import machine, publish, warm_memory

VALUE = b"x" * 1024


def produce(conf: dict[str, Any], topic: str, n: int) -> float:
    from confluent_kafka import Producer

    p = Producer(conf | {"linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return n / (time.perf_counter() - start)


def consume(conf: dict[str, Any], topic: str, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(conf | {
        "group.id": f"bench-{topic}", "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
    })  # fmt: skip
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    while got < n:
        got += sum(1 for m in c.consume(10_000, 1.0) if m.error() is None)
    rate = n / (time.perf_counter() - start)
    c.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm-memory", type=int, default=1, metavar="GIB")
    args = parser.parse_args()
    warm_memory(args.warm_memory)
    n = args.records
    workdir = Path(tempfile.mkdtemp(prefix="bench-security-"))
    try:
        certs = Certificates.create(workdir / "certs")
        client = certs.client("bench")
        with BrokerProcess(workdir / "data", tls=certs, client_auth="required") as broker:
            from confluent_kafka.admin import AdminClient, NewTopic

            confs: dict[str, dict[str, Any]] = {
                "PLAINTEXT": {"bootstrap.servers": broker.bootstrap},
                "SSL": {
                    "bootstrap.servers": broker.ssl_bootstrap,
                    "security.protocol": "SSL",
                    "ssl.ca.location": str(certs.ca),
                    "ssl.certificate.location": str(client.cert),
                    "ssl.key.location": str(client.key),
                },
            }
            admin = AdminClient(confs["PLAINTEXT"])
            results: dict[str, tuple[float, float]] = {}
            # Rounds alternate the listeners (the machine's noise falls on both);
            # each listener's best round counts.
            for _ in range(args.rounds):
                for name, conf in confs.items():
                    topic = f"{name.lower()}-{time.time_ns()}"
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
                    produce(conf, topic, min(n, 20_000))  # warm-up: connections, page cache
                    p, c = produce(conf, topic, n), consume(conf, topic, n)
                    best = results.get(name, (0.0, 0.0))
                    results[name] = (max(best[0], p), max(best[1], c))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    plain = results["PLAINTEXT"]
    lines = [
        f"## {datetime.date.today().isoformat()}: TLS against PLAINTEXT (bench/security.py)",
        "",
        f"Machine: {machine()}. One broker listening on both, one partition, one "
        f"confluent-kafka producer then one consumer, {n:,} records of 1 KiB, the best of "
        f"{args.rounds} alternating rounds; SSL with client certificates (ECDSA P-256), TLS 1.3.",
        "",
        "| listener | produce records/s | / PLAINTEXT | consume records/s | / PLAINTEXT |",
        "|---|---|---|---|---|",
    ]
    for name, (p, c) in results.items():
        lines.append(
            f"| {name} | {p:,.0f} | {p / plain[0]:.2f}x | {c:,.0f} | {c / plain[1]:.2f}x |"
        )
    publish("\n".join(lines), args.record)


if __name__ == "__main__":
    main()
