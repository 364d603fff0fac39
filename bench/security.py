"""TLS and SASL: what they cost a producer and a consumer, and a new connection,
against PLAINTEXT on the same broker, in one run. One broker listening on
PLAINTEXT, SSL (client certificates required, made on the fly), SASL_PLAINTEXT and
SASL_SSL (PLAIN and SCRAM-SHA-256/512).

Throughput: confluent-kafka sends N records of 1 KiB to one partition through
PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512), then reads them back through the same
listener; records/s and the ratio to PLAINTEXT (aim, issue 26: at least 0.6x). Under
TLS the fetch path reads file slices with pread (sendfile cannot go through TLS), so
the consume ratio shows what losing sendfile costs too.

Connection setup: a client of this file (asyncio; the SASL exchange of the broker's
own inter-broker client) connects, sends ApiVersions, logs in (SaslHandshake and
SaslAuthenticate) and waits for its first Metadata answer; median and p99 of
--connections, one connection at a time, for each listener and mechanism, SCRAM
with credentials of 4096 iterations (Kafka's minimum) and of 8192 (what Kafka's
tools make by default). The client computes SCRAM's PBKDF2 each login as real
clients do; the broker keeps the salted keys and runs none.

    .venv/bin/python bench/security.py [--records 200000] [--rounds 3]
        [--connections 300] [--record]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shutil
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.api_versions.v2.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

sys.path.insert(0, str(Path(__file__).parent))
from moldau.protocol.codec import decode_response, encode_body
from moldau.security.credentials import (
    CredentialCache,
    ScramMechanism,
    new_credential,
    salted_password,
)
from moldau.security.sasl_client import PlainClient, SaslClient, ScramClient
from moldau.security.scram import ScramServer
from moldau.server.control_client import roundtrip
from moldau.server.inter_broker_sasl import sasl_authenticator
from moldau.testing.certs import Certificates
from moldau.testing.process import BrokerProcess
from throughput import machine, publish, warm_memory

VALUE = b"x" * 1024
PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="bench-secret";'
)
PASSWORD = "bench-secret"


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


@dataclass(frozen=True)
class Setup:
    """One row of the connection-setup table: a listener, and a login on it."""

    name: str
    listener: str
    tls: bool
    login: Callable[[], SaslClient] | None


def setups(iterations: tuple[int, ...]) -> list[Setup]:
    rows = [
        Setup("PLAINTEXT", "PLAINTEXT", False, None),
        Setup("SSL", "SSL", True, None),
        Setup(
            "SASL_PLAINTEXT PLAIN", "SASL_PLAINTEXT", False, lambda: PlainClient("bench", PASSWORD)
        ),
    ]
    for listener, tls, mechanisms in (
        ("SASL_PLAINTEXT", False, ("SCRAM-SHA-256", "SCRAM-SHA-512")),
        ("SASL_SSL", True, ("SCRAM-SHA-512",)),
    ):
        for name in mechanisms:
            mech = ScramMechanism.by_name(name)
            assert mech is not None
            for i in iterations:
                rows.append(
                    Setup(f"{listener} {name}, {i} iterations", listener, tls,
                          scram_login(mech, scram_user(name, i)))
                )  # fmt: skip
    return rows


def scram_login(mechanism: ScramMechanism, user: str) -> Callable[[], SaslClient]:
    return lambda: ScramClient(mechanism, user, PASSWORD)


def scram_user(mechanism: str, iterations: int) -> str:
    return f"bench-{mechanism.lower()}-{iterations}"


def create_scram_users(bootstrap: str, iterations: tuple[int, ...]) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        UserScramCredentialUpsertion,
    )
    from confluent_kafka.admin import ScramMechanism as CkMechanism

    upserts = [
        UserScramCredentialUpsertion(
            scram_user(name, i), ScramCredentialInfo(CkMechanism[name.replace("-", "_")], i),
            PASSWORD.encode(),
        )
        for name in ("SCRAM-SHA-256", "SCRAM-SHA-512") for i in iterations
    ]  # fmt: skip
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(10)


async def connect_once(port: int, tls: ssl.SSLContext | None, setup: Setup) -> float:
    """Seconds from connect to the first Metadata answer."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls, server_hostname="127.0.0.1" if tls else None
    )
    try:
        await roundtrip(reader, writer, 1, "bench", 18, 2, encode_body(ApiVersionsRequest()), False)
        if setup.login is not None:
            await sasl_authenticator(setup.login, "bench")(reader, writer)
        request = MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        raw = await roundtrip(reader, writer, 9, "bench", 3, 12, encode_body(request))
        assert decode_response(3, 12, raw).brokers  # type: ignore[attr-defined]
        return time.perf_counter() - started
    finally:
        writer.close()


def connection_setup(
    broker: BrokerProcess, certs: Certificates, rows: list[Setup], n: int
) -> dict[str, list[float]]:
    """Each row's setup times, rows taking turns (the machine's noise falls on all)."""
    tls = ssl.create_default_context(cafile=str(certs.ca))
    client = certs.client("bench")
    tls.load_cert_chain(str(client.cert), str(client.key))  # the SSL listener asks for one
    times: dict[str, list[float]] = {row.name: [] for row in rows}

    async def warm_up(row: Setup) -> None:
        """A first login (once the broker has learned the new SCRAM credentials)."""
        deadline = time.monotonic() + 20
        while True:
            try:
                port = broker.listener_ports[row.listener]
                await connect_once(port, tls if row.tls else None, row)
                return
            except ConnectionError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def run() -> None:
        for row in rows:
            await warm_up(row)
        for _ in range(n):
            for row in rows:
                port = broker.listener_ports[row.listener]
                times[row.name].append(await connect_once(port, tls if row.tls else None, row))

    asyncio.run(run())
    return times


def scram_costs(iterations: tuple[int, ...]) -> dict[str, tuple[float, float]]:
    """Per SCRAM login, in ms (the median of 50): the client's PBKDF2 alone, and the
    broker's whole side of the exchange (its ScramServer, in this process): the
    broker keeps the salted keys, so it runs no PBKDF2."""
    out = {}
    for name in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        mech = ScramMechanism.by_name(name)
        assert mech is not None
        for i in iterations:
            cache = CredentialCache()
            cache.update_user("u", {name: new_credential(mech, PASSWORD, i).to_string()})
            client_ms, server_ms = [], []
            for _ in range(50):
                started = time.perf_counter()
                salted_password(mech, PASSWORD, b"0123456789abcdef", i)
                client_ms.append((time.perf_counter() - started) * 1000)
                client, server = ScramClient(mech, "u", PASSWORD), ScramServer(mech, cache)
                first = client.respond(None)
                assert first is not None
                started = time.perf_counter()
                challenge = server.evaluate(first)
                server_ms.append((time.perf_counter() - started) * 1000)
                final = client.respond(challenge)
                assert final is not None
                started = time.perf_counter()
                server.evaluate(final)
                server_ms[-1] += (time.perf_counter() - started) * 1000
                assert server.complete
            out[f"{name}, {i} iterations"] = (
                statistics.median(client_ms),
                statistics.median(server_ms),
            )
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--warm-memory", type=int, default=1, metavar="GIB")
    args = parser.parse_args()
    warm_memory(args.warm_memory)
    n = args.records
    iterations = (4096, 8192)
    load_before = os.getloadavg()[0]
    workdir = Path(tempfile.mkdtemp(prefix="bench-security-"))
    try:
        certs = Certificates.create(workdir / "certs")
        client = certs.client("bench")
        overrides = {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
            "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.jaas.config": PLAIN_JAAS,
        }
        with BrokerProcess(
            workdir / "data", overrides, tls=certs, client_auth="required"
        ) as broker:
            from confluent_kafka.admin import AdminClient, NewTopic

            create_scram_users(broker.bootstrap, iterations)
            ssl_conf = {"ssl.ca.location": str(certs.ca)}
            confs: dict[str, dict[str, Any]] = {
                "PLAINTEXT": {"bootstrap.servers": broker.bootstrap},
                "SSL": ssl_conf | {
                    "bootstrap.servers": broker.ssl_bootstrap,
                    "security.protocol": "SSL",
                    "ssl.certificate.location": str(client.cert),
                    "ssl.key.location": str(client.key),
                },
                "SASL_SSL SCRAM-SHA-512": ssl_conf | {
                    "bootstrap.servers": f"127.0.0.1:{broker.listener_ports['SASL_SSL']}",
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": scram_user("SCRAM-SHA-512", 8192),
                    "sasl.password": PASSWORD,
                },
            }  # fmt: skip
            admin = AdminClient(confs["PLAINTEXT"])
            results: dict[str, tuple[float, float]] = {}
            # Rounds alternate the listeners (the machine's noise falls on all);
            # each listener's best round counts.
            for _ in range(args.rounds):
                for name, conf in confs.items():
                    topic = f"{name.split()[0].lower()}-{time.time_ns()}"
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
                    produce(conf, topic, min(n, 20_000))  # warm-up: connections, page cache
                    p, c = produce(conf, topic, n), consume(conf, topic, n)
                    best = results.get(name, (0.0, 0.0))
                    results[name] = (max(best[0], p), max(best[1], c))
            times = connection_setup(broker, certs, setups(iterations), args.connections)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    load_after = os.getloadavg()[0]
    costs = scram_costs(iterations)
    plain = results["PLAINTEXT"]
    lines = [
        f"## {datetime.date.today().isoformat()}: TLS and SASL against PLAINTEXT "
        "(bench/security.py)",
        "",
        f"Machine: {machine()}. Load average {load_before:.1f} before the run, "
        f"{load_after:.1f} after (other work shares the two cores). One broker listening "
        "on PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL; TLS 1.3, ECDSA P-256, client "
        "certificates on SSL.",
        "",
        f"Throughput: one partition, one confluent-kafka producer then one consumer, {n:,} "
        f"records of 1 KiB, the best of {args.rounds} alternating rounds; SASL_SSL logs in "
        "with SCRAM-SHA-512 (8192 iterations).",
        "",
        "| listener | produce records/s | / PLAINTEXT | consume records/s | / PLAINTEXT |",
        "|---|---|---|---|---|",
    ]
    for name, (p, c) in results.items():
        lines.append(
            f"| {name} | {p:,.0f} | {p / plain[0]:.2f}x | {c:,.0f} | {c / plain[1]:.2f}x |"
        )
    base = statistics.median(times["PLAINTEXT"])
    lines += [
        "",
        f"Connection setup: connect, ApiVersions, SaslHandshake and SaslAuthenticate, until "
        f"the first Metadata answer; {args.connections} connections of each kind, one at a "
        "time, the kinds taking turns; a Python asyncio client (the client's own cost is "
        "in the figures). Beside, per SCRAM login, the client's PBKDF2 and the broker's whole "
        "SCRAM exchange, each the median of 50 in one process.",
        "",
        "| listener, login | median ms | p99 ms | median / PLAINTEXT | client PBKDF2 ms "
        "| broker SCRAM ms |",
        "|---|---|---|---|---|---|",
    ]
    for name, values in times.items():
        med, p99 = statistics.median(values), percentile(values, 0.99)
        scram = next((ms for k, ms in costs.items() if k in name), None)
        cost = "| | |" if scram is None else f"| {scram[0]:.2f} | {scram[1]:.3f} |"
        lines.append(f"| {name} | {med * 1000:.2f} | {p99 * 1000:.2f} | {med / base:.1f}x {cost}")
    publish("\n".join(lines), args.record)


if __name__ == "__main__":
    main()
