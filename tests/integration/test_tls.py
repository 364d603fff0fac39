"""TLS listeners with real clients (librdkafka, kcat, kafka-python) on a broker that listens on
PLAINTEXT and SSL at once, ssl.client.auth=required: produce, consume in a group,
admin; each client told the addresses of the listener it came in on; the
principal from the client's certificate; refused: another CA's certificate, no
certificate, a plaintext client on the SSL port; handshakes left half way do not
keep the broker from serving others; SCRAM-SHA-512 over a SASL_SSL listener (TLS and
SASL together)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from moldau.testing.certs import Certificates
from moldau.testing.process import BrokerProcess

KEY_PASSWORD = "key-secret"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.create(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_broker(
    tmp_path_factory: pytest.TempPathFactory, certs: Certificates
) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("tls") / "data"
    # Its key encrypted, as a careful operator keeps it.
    encrypted = {
        "ssl.keystore.location": str(certs.broker("encrypted", key_password=KEY_PASSWORD)),
        "ssl.key.password": KEY_PASSWORD,
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        # Its tests' groups form at once rather than after 3 s (as the shared broker's).
        "group.initial.rebalance.delay.ms": "0",
    }
    with BrokerProcess(data, encrypted, tls=certs, client_auth="required") as b:
        yield b


def ssl_conf(broker: BrokerProcess, certs: Certificates, cn: str = "alice") -> dict[str, Any]:
    client = certs.client(cn)
    return {
        "bootstrap.servers": broker.ssl_bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(client.cert),
        "ssl.key.location": str(client.key),
    }


def test_produce_consume_in_a_group_and_admin_over_ssl(
    tls_broker: BrokerProcess, certs: Certificates, topic_name: str
) -> None:
    conf = ssl_conf(tls_broker, certs)
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(timeout=30)
    p = Producer(conf | {"linger.ms": 5})
    # 3 MiB in one partition: fetches larger than the chunks TLS slices go out in.
    values = [f"{i:06d}".encode() * 171 for i in range(3000)]
    for v in values:
        p.produce(topic_name, v, partition=0)
    p.produce(topic_name, b"other", partition=1)
    assert p.flush(30) == 0
    c = Consumer(conf | {
        "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest",
        "max.partition.fetch.bytes": 8 << 20, "fetch.max.bytes": 16 << 20,
    })  # fmt: skip
    c.subscribe([topic_name])
    got: dict[int, list[bytes]] = {0: [], 1: []}
    deadline = time.monotonic() + 30
    while len(got[0]) + len(got[1]) < 3001 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got[m.partition()].append(m.value())
    c.commit(asynchronous=False)
    committed = c.committed([*c.assignment()], timeout=10)
    c.close()
    assert got == {0: values, 1: [b"other"]}
    assert sorted(tp.offset for tp in committed) == [1, 3000]
    # The principal is the certificate's subject (Kafka's default mapping).
    log = tls_broker.log_path.read_text()
    assert "on listener SSL is User:CN=alice,O=Moldau Test" in log


def test_each_client_gets_the_addresses_of_its_own_listener(
    tls_broker: BrokerProcess, certs: Certificates
) -> None:
    ssl_md = AdminClient(ssl_conf(tls_broker, certs)).list_topics(timeout=20)
    plain_md = AdminClient({"bootstrap.servers": tls_broker.bootstrap}).list_topics(timeout=20)
    assert [b.port for b in ssl_md.brokers.values()] == [tls_broker.listener_ports["SSL"]]
    assert [b.port for b in plain_md.brokers.values()] == [tls_broker.listener_ports["PLAINTEXT"]]


def test_kcat_over_ssl(tls_broker: BrokerProcess, certs: Certificates, topic_name: str) -> None:
    client = certs.client("kcat")
    args = [
        "-b", tls_broker.ssl_bootstrap, "-X", "security.protocol=SSL",
        "-X", f"ssl.ca.location={certs.ca}",
        "-X", f"ssl.certificate.location={client.cert}",
        "-X", f"ssl.key.location={client.key}", "-t", topic_name,
    ]  # fmt: skip
    subprocess.run(
        ["kcat", *args, "-P", "-p", "0"], input="a\nb\nc\n", text=True, check=True, timeout=30
    )
    out = subprocess.run(
        ["kcat", *args, "-C", "-p", "0", "-o", "beginning", "-c", "3", "-e", "-f", "%o:%s\n"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    assert out.stdout.splitlines() == ["0:a", "1:b", "2:c"]
    assert "on listener SSL is User:CN=kcat,O=Moldau Test" in tls_broker.log_path.read_text()


def test_describe_configs_never_shows_a_password(
    tls_broker: BrokerProcess, certs: Certificates
) -> None:
    admin = AdminClient(ssl_conf(tls_broker, certs))
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["ssl.client.auth"].value == "required"
    assert configs["ssl.truststore.location"].value == str(certs.ca)
    password = configs["ssl.key.password"]
    assert password.is_sensitive and password.value is None
    assert all(s.value is None for s in password.synonyms.values())
    assert KEY_PASSWORD not in repr(configs)


#: What librdkafka's error callback reports when the broker closes a TLS handshake.
LOST = (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


def refused(conf: dict[str, Any], reported: tuple[int, ...] = LOST) -> bool:
    """No metadata for a client with `conf`, and its first error `reported` (librdkafka's
    error callback: the handshake failed), which is known at once, rather than after a
    metadata request's timeout."""
    failures: list[KafkaError] = []
    admin = AdminClient(conf | {"error_cb": failures.append})
    deadline = time.monotonic() + 10
    while not failures and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.2)
        except KafkaException:
            admin.poll(0)  # serves the error callback
            continue
        return False
    return bool(failures) and failures[0].code() in reported


def test_certificate_of_another_ca_or_none_is_refused(
    tls_broker: BrokerProcess, certs: Certificates, tmp_path: Path
) -> None:
    other = Certificates.create(tmp_path / "other", org="Elsewhere")
    conf = ssl_conf(tls_broker, certs)
    stranger = other.client("mallory")
    assert refused(
        conf | {"ssl.certificate.location": str(stranger.cert),
                "ssl.key.location": str(stranger.key)}
    )  # fmt: skip
    without = {k: v for k, v in conf.items() if not k.startswith(("ssl.cert", "ssl.key"))}
    assert refused(without)
    assert "Elsewhere" not in tls_broker.log_path.read_text()


def api_versions_request() -> bytes:
    body = b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04test"  # ApiVersions v0, correlation 1
    return len(body).to_bytes(4, "big") + body


def test_plaintext_client_on_the_ssl_port_is_refused(tls_broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", tls_broker.listener_ports["SSL"]), 5) as s:
        s.settimeout(10)
        s.sendall(api_versions_request())
        answer = s.recv(1024)
    # Not a Kafka answer: TLS alert bytes at most, then the connection closes.
    assert not answer or answer[0] == 0x15  # a TLS alert record


def read_exactly(s: ssl.SSLSocket, n: int) -> bytes:
    """n bytes, or b"" if the connection closes first."""
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def read_frame(s: ssl.SSLSocket) -> bytes:
    head = read_exactly(s, 4)
    return read_exactly(s, int.from_bytes(head, "big")) if head else b""


def test_sasl_ssl_listener_serves_only_api_versions_before_authentication(
    tls_broker: BrokerProcess, certs: Certificates
) -> None:
    # TLS without a client certificate: ssl.client.auth=required is the SSL
    # listener's; a SASL_SSL listener takes it only from its own prefix (KIP-684).
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    address = ("127.0.0.1", tls_broker.listener_ports["SASL_SSL"])
    with ctx.wrap_socket(socket.create_connection(address, 5), server_hostname="127.0.0.1") as s:
        s.settimeout(10)
        s.sendall(api_versions_request())
        answer = read_frame(s)
        assert answer[:4] == b"\x00\x00\x00\x01"  # correlation id 1
        assert answer[4:6] == b"\x00\x00"  # no error
        metadata = b"\x00\x03\x00\x01\x00\x00\x00\x02\x00\x04test\xff\xff\xff\xff"
        s.sendall(len(metadata).to_bytes(4, "big") + metadata)
        assert read_frame(s) == b""  # closed, unanswered
    assert "Metadata before SASL authentication" in tls_broker.log_path.read_text()


def test_half_done_handshakes_do_not_stop_the_broker_serving_others(
    tls_broker: BrokerProcess, certs: Certificates, topic_name: str
) -> None:
    port = tls_broker.listener_ports["SSL"]
    stuck = []
    try:
        for i in range(200):
            s = socket.create_connection(("127.0.0.1", port), 5)
            if i % 2:
                # The start of a ClientHello record, then nothing more.
                s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
            stuck.append(s)
        started = time.monotonic()
        p = Producer(ssl_conf(tls_broker, certs))
        p.produce(topic_name, b"served")
        assert p.flush(20) == 0
        assert time.monotonic() - started < 10
    finally:
        for s in stuck:
            s.close()


def test_a_jks_keystore_stops_the_start_with_one_line_on_converting_it(tmp_path: Path) -> None:
    jks = tmp_path / "server.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    out = subprocess.run(
        [sys.executable, "-m", "moldau", "serve", "--data-dir", str(tmp_path / "data"),
         "--override", "listeners=SSL://127.0.0.1:0",
         "--override", f"ssl.keystore.location={jks}"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    errors = [line for line in out.stderr.splitlines() if "keytool" in line]
    assert len(errors) == 1, out.stderr
    assert "ssl.keystore.type=PEM" in errors[0]


def test_kafka_python_over_ssl(
    tls_broker: BrokerProcess, certs: Certificates, topic_name: str
) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    client = certs.client("kafka-python")
    conf: dict[str, Any] = {
        "bootstrap_servers": tls_broker.ssl_bootstrap,
        "security_protocol": "SSL",
        "ssl_cafile": str(certs.ca),
        "ssl_certfile": str(client.cert),
        "ssl_keyfile": str(client.key),
    }
    producer = KafkaProducer(**conf)
    for i in range(10):
        producer.send(topic_name, f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic_name, group_id=f"g-{topic_name}", auto_offset_reset="earliest",
        consumer_timeout_ms=10_000, **conf,
    )  # fmt: skip
    got = [m.value for _, m in zip(range(10), consumer, strict=False)]
    consumer.close()
    assert got == [f"v{i}".encode() for i in range(10)]


def test_scram_sha_512_over_sasl_ssl_produce_and_consume_in_a_group(
    tls_broker: BrokerProcess, certs: Certificates, topic_name: str
) -> None:
    admin = AdminClient({"bootstrap.servers": tls_broker.bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upsert = UserScramCredentialUpsertion("erin", info, b"erin-secret")
    admin.alter_user_scram_credentials([upsert])["erin"].result(10)
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(timeout=30)
    # No client certificate: the SASL_SSL listener does not ask for one (KIP-684).
    conf = {
        "bootstrap.servers": f"127.0.0.1:{tls_broker.listener_ports['SASL_SSL']}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "erin",
        "sasl.password": "erin-secret",
    }
    p = Producer(conf | {"linger.ms": 5})
    values = [f"sasl-ssl-{i}".encode() for i in range(200)]
    for v in values:
        p.produce(topic_name, v)
    assert p.flush(30) == 0
    c = Consumer(conf | {"group.id": f"g-{topic_name}", "auto.offset.reset": "earliest"})
    c.subscribe([topic_name])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.commit(asynchronous=False)
    committed = c.committed([*c.assignment()], timeout=10)
    c.close()
    assert got == values
    assert [tp.offset for tp in committed] == [200]
    # The login is real: a wrong password gets nowhere.
    assert refused(conf | {"sasl.password": "wrong"}, (KafkaError._AUTHENTICATION,))


def test_the_issues_sample_server_properties_work_unchanged(
    tmp_path: Path, certs: Certificates, topic_name: str
) -> None:
    """A broker configured as a Kafka user writes it (SASL_SSL only, PLAIN for the
    admin and between brokers, SCRAM-SHA-512 for users, AclAuthorizer with a super
    user, nothing allowed without an ACL), and clients with librdkafka's usual
    settings: the admin creates a SCRAM user, a topic and an ACL through the Admin
    API; the user then writes to the topic it was granted, and nothing else."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" user_admin="admin-secret";'
    )
    properties = {
        "listeners": f"SASL_SSL://127.0.0.1:{port}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.broker("sample")),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
    }
    client = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
    }
    with BrokerProcess(tmp_path / "data", properties, port=port):
        admin = AdminClient(
            client
            | {"sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"}
        )
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        upsert = UserScramCredentialUpsertion("alice", info, b"alice-secret")
        admin.alter_user_scram_credentials([upsert])["alice"].result(10)
        for topic in (topic_name, f"{topic_name}-other"):
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
        grant = AclBinding(
            ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.WRITE, AclPermissionType.ALLOW,
        )  # fmt: skip
        admin.create_acls([grant])[grant].result(10)
        alice = client | {
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
            "message.timeout.ms": 10_000,
        }
        outcome: dict[str, KafkaError | None] = {}
        p = Producer(alice)
        for topic in (topic_name, f"{topic_name}-other"):
            p.produce(topic, b"x", on_delivery=lambda e, m: outcome.__setitem__(m.topic(), e))
        p.flush(15)
        assert outcome[topic_name] is None
        refused = outcome[f"{topic_name}-other"]
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
