"""SASL on a real broker process: SaslHandshake/SaslAuthenticate with PLAIN and
SCRAM (hand-built requests, the SCRAM client computed here), SCRAM credentials
managed with Describe/AlterUserScramCredentials (by hand and with confluent-kafka's
AdminClient), and bad input refused with Kafka's errors while the broker goes on."""

from __future__ import annotations

import base64
import hashlib
import re
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import build_batch
from moldau.storage.partition_name import TopicPartition
from moldau.testing.certs import Certificates
from moldau.testing.local import LocalCluster
from moldau.testing.process import BrokerProcess, wait_for
from moldau.testing.sasl import SaslUsers
from tests.integration import requests as rq
from tests.integration.kafka_wire import WireClient
from tests.integration.proxy import free_port
from tests.unit.test_sasl_mechanisms import SHA256, SHA512, client_final

pytestmark = pytest.mark.integration

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-pw";'
)
REAUTH_MS = 600_000


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(PLAINTEXT bootstrap, SASL_PLAINTEXT bootstrap) of one broker."""
    data = tmp_path_factory.mktemp("sasl") / "data"
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connections.max.reauth.ms": str(REAUTH_MS),
    }
    with BrokerProcess(data, overrides) as b:
        yield b.bootstrap, sasl_bootstrap(b)


def sasl_bootstrap(b: BrokerProcess) -> str:
    """The SASL listener's address, the second the broker says it listens on."""
    line = next(x for x in reversed(b._lines) if "listening on" in x)
    return "127.0.0.1:" + re.findall(r"127\.0\.0\.1:(\d+)", line)[1]


def handshake(c: WireClient, mechanism: str, version: int = 1) -> object:
    return c.request(rq.request(17, version, mechanism=mechanism), version)


def authenticate(c: WireClient, token: bytes, version: int = 2) -> object:
    return c.request(rq.request(36, version, auth_bytes=token), version)


def metadata_works(c: WireClient) -> bool:
    return len(c.request(rq.metadata(version=12, auto_create=False)).brokers) == 1


def upsert(bootstrap: str, user: str, password: str, mech: object = SHA256, iters: int = 8192):
    salt = hashlib.sha256(user.encode()).digest()[:16]
    salted = hashlib.pbkdf2_hmac(mech.hash_name, password.encode(), salt, iters)  # type: ignore[attr-defined]
    with WireClient(bootstrap) as c:
        return c.request(
            rq.request(
                51, 0, deletions=[],
                upsertions=[{"name": user, "mechanism": mech.type_id,  # type: ignore[attr-defined]
                             "iterations": iters, "salt": salt, "salted_password": salted}],
            )
        )  # fmt: skip


def scram_login(c: WireClient, mech: object, user: str, password: str) -> tuple[object, bytes]:
    """(the final SaslAuthenticate response, the server signature expected)."""
    assert handshake(c, mech.mechanism_name).error_code == ErrorCode.none  # type: ignore[attr-defined]
    bare = f"n={user},r=fyko+d2lbbFgONRv9qkxdawL"
    first = authenticate(c, f"n,,{bare}".encode())
    assert first.error_code == ErrorCode.none, first.error_message
    final, expected = client_final(mech, password, bare, first.auth_bytes.decode())  # type: ignore[arg-type]
    return authenticate(c, final.encode()), expected


def test_plaintext_listener_has_no_sasl(sasl_broker: tuple[str, str]) -> None:
    plain, _ = sasl_broker
    with WireClient(plain) as c:
        assert handshake(c, "PLAIN").error_code == ErrorCode.illegal_sasl_state
        assert authenticate(c, b"\0a\0b").error_code == ErrorCode.illegal_sasl_state
        assert metadata_works(c)  # the connection goes on


def test_nothing_but_api_versions_before_login(sasl_broker: tuple[str, str]) -> None:
    _, sasl = sasl_broker
    with WireClient(sasl) as c:
        r = c.request(rq.request(18, 3, client_software_name="t", client_software_version="1"))
        keys = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
        assert keys[17] == (0, 1) and keys[36] == (0, 2)
        assert keys[50] == (0, 0) and keys[51] == (0, 0)
        c.send_raw(c.encode(rq.metadata(version=12)))
        assert c.is_closed_by_peer()


def test_plain_login(sasl_broker: tuple[str, str]) -> None:
    _, sasl = sasl_broker
    with WireClient(sasl) as c:
        r = handshake(c, "PLAIN")
        assert r.error_code == ErrorCode.none
        assert list(r.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        r = authenticate(c, b"\0alice\0alice-pw")
        assert r.error_code == ErrorCode.none and r.auth_bytes == b""
        assert r.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        assert metadata_works(c)
        # KIP-368: with connections.max.reauth.ms set, the client logs in again.
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        assert authenticate(c, b"\0alice\0alice-pw").error_code == ErrorCode.none
        assert metadata_works(c)
        # ... but not as someone else.
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        r = authenticate(c, b"\0admin\0admin-secret")
        assert r.error_code == ErrorCode.sasl_authentication_failed
        assert "Cannot change principals" in r.error_message
        assert c.is_closed_by_peer()


def test_plain_login_on_v0_authenticate(sasl_broker: tuple[str, str]) -> None:
    _, sasl = sasl_broker
    with WireClient(sasl) as c:
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        assert authenticate(c, b"\0admin\0admin-secret", version=0).error_code == ErrorCode.none
        assert metadata_works(c)


def raw_token(c: WireClient, token: bytes) -> bytes:
    """A bare SASL token after a SaslHandshake v0, and the bare answer."""
    c.send_raw(struct.pack(">i", len(token)) + token)
    return c.read_frame()


def test_v0_handshake_then_raw_tokens(sasl_broker: tuple[str, str]) -> None:
    plain, sasl = sasl_broker
    with WireClient(sasl) as c:
        assert handshake(c, "PLAIN", version=0).error_code == ErrorCode.none
        assert raw_token(c, b"\0alice\0alice-pw") == b""
        assert metadata_works(c)
    assert upsert(plain, "raw-scram", "pw").results[0].error_code == ErrorCode.none
    deadline = time.monotonic() + 10
    while True:
        with WireClient(sasl) as c:
            assert handshake(c, "SCRAM-SHA-256", version=0).error_code == ErrorCode.none
            bare = "n=raw-scram,r=abcdef"
            c.send_raw(struct.pack(">i", len(bare) + 3) + b"n,," + bare.encode())
            try:
                server_first = c.read_frame().decode()
            except (ConnectionError, OSError):
                assert time.monotonic() < deadline  # not yet learned by the broker
                continue
            final, expected = client_final(SHA256, "pw", bare, server_first)
            assert raw_token(c, final.encode()) == b"v=" + base64.b64encode(expected)
            assert metadata_works(c)
            break
    with WireClient(sasl) as c:
        assert handshake(c, "PLAIN", version=0).error_code == ErrorCode.none
        c.send_raw(struct.pack(">i", 12) + b"\0alice\0wrong")
        assert c.is_closed_by_peer()


@pytest.mark.parametrize(
    "token", [b"\0alice\0wrong", b"\0mallory\0alice-pw", b"garbage", b"\xff" * 1000]
)
def test_plain_failed_login_is_answered_late_then_closed(
    sasl_broker: tuple[str, str], token: bytes
) -> None:
    _, sasl = sasl_broker
    with WireClient(sasl) as c:
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        started = time.monotonic()
        r = authenticate(c, token)
        assert time.monotonic() - started >= 0.09  # connection.failed.authentication.delay.ms
        assert r.error_code == ErrorCode.sasl_authentication_failed
        assert r.error_message
        assert c.is_closed_by_peer()


def test_unsupported_mechanism(sasl_broker: tuple[str, str]) -> None:
    _, sasl = sasl_broker
    with WireClient(sasl) as c:
        r = handshake(c, "GSSAPI")
        assert r.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(r.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert c.is_closed_by_peer()


def test_authenticate_without_handshake_is_refused(sasl_broker: tuple[str, str]) -> None:
    _, sasl = sasl_broker
    with WireClient(sasl) as c:
        assert authenticate(c, b"\0alice\0alice-pw").error_code == ErrorCode.illegal_sasl_state
        assert c.is_closed_by_peer()


@pytest.mark.parametrize("mech", [SHA256, SHA512])
def test_scram_login_with_credentials_altered_over_the_wire(
    sasl_broker: tuple[str, str], mech: object
) -> None:
    plain, sasl = sasl_broker
    user = f"scram-{mech.type_id}"  # type: ignore[attr-defined]
    r = upsert(plain, user, "s3cret", mech)
    assert [(x.user, x.error_code) for x in r.results] == [(user, ErrorCode.none)]
    with WireClient(sasl) as c:
        # The broker learns the credential from the change notification: try until then.
        deadline = time.monotonic() + 10
        while True:
            final, expected = scram_login(c, mech, user, "s3cret")
            if final.error_code == ErrorCode.none or time.monotonic() > deadline:
                break
            c.close()
            c.__init__(sasl)  # type: ignore[misc]
        assert final.error_code == ErrorCode.none, final.error_message
        assert final.auth_bytes == b"v=" + base64.b64encode(expected)
        assert metadata_works(c)
    with WireClient(sasl) as c:
        final, _ = scram_login(c, mech, user, "wrong")
        assert final.error_code == ErrorCode.sasl_authentication_failed
        assert c.is_closed_by_peer()
    with WireClient(sasl) as c:
        assert handshake(c, mech.mechanism_name).error_code == ErrorCode.none  # type: ignore[attr-defined]
        r = authenticate(c, b"n,,n=nobody,r=abc")
        assert r.error_code == ErrorCode.sasl_authentication_failed
        assert c.is_closed_by_peer()


def test_scram_garbage_tokens(sasl_broker: tuple[str, str]) -> None:
    plain, sasl = sasl_broker
    for token in (b"", b"\0\0\0", b"n,,n=x", b"x" * 100_000, b"n,,n=a,r=b,tokenauth=true"):
        with WireClient(sasl) as c:
            assert handshake(c, "SCRAM-SHA-256").error_code == ErrorCode.none
            r = authenticate(c, token)
            assert r.error_code == ErrorCode.sasl_authentication_failed
            assert c.is_closed_by_peer()
    with WireClient(plain) as c:
        assert metadata_works(c)


def test_a_request_above_socket_request_max_bytes_is_refused(sasl_broker: tuple[str, str]) -> None:
    plain, sasl = sasl_broker
    with WireClient(sasl) as c:
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        # A 100 MB SaslAuthenticate: its size alone (over 104857600) closes the connection.
        size = 100 * 1024 * 1024 + 64
        c.send_raw(struct.pack(">ihhih", size, 36, 2, 99, 1) + b"t" + b"\0" * 1000)
        assert c.is_closed_by_peer()
    with WireClient(plain) as c:
        assert metadata_works(c)


def test_a_large_token_before_login_is_refused(sasl_broker: tuple[str, str]) -> None:
    _, sasl = sasl_broker
    with WireClient(sasl) as c:
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        # Over sasl.server.max.receive.size (512 KiB), far below socket.request.max.bytes.
        c.send_raw(c.encode(rq.request(36, 2, auth_bytes=b"\0alice\0" + b"p" * 600_000)))
        assert c.is_closed_by_peer()


def test_a_session_not_renewed_in_time_ends(tmp_path: Path) -> None:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": PLAIN_JAAS,
        "connections.max.reauth.ms": "1000",
    }
    with BrokerProcess(tmp_path / "data", overrides) as b:
        sasl = sasl_bootstrap(b)
        with WireClient(sasl) as renewed, WireClient(sasl) as lapsed:
            for c in (renewed, lapsed):
                assert handshake(c, "PLAIN").error_code == ErrorCode.none
                r = authenticate(c, b"\0alice\0alice-pw")
                assert r.session_lifetime.total_seconds() == 1.0
                assert metadata_works(c)
            time.sleep(0.6)
            assert handshake(renewed, "PLAIN").error_code == ErrorCode.none
            assert authenticate(renewed, b"\0alice\0alice-pw").error_code == ErrorCode.none
            time.sleep(0.6)
            assert metadata_works(renewed)
            lapsed.send_raw(lapsed.encode(rq.metadata(version=12)))
            assert lapsed.is_closed_by_peer()


def test_scram_credentials_outlive_a_restart(tmp_path: Path) -> None:
    # Fixed ports: a restart keeps them (BrokerProcess passes the first as --port).
    port, sasl_port = free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }
    with BrokerProcess(tmp_path / "data", overrides, port=port) as b:
        assert upsert(b.bootstrap, "kept", "pw", SHA512).results[0].error_code == 0
        b.restart()
        with WireClient(sasl_bootstrap(b)) as c:
            final, _ = scram_login(c, SHA512, "kept", "pw")
            assert final.error_code == ErrorCode.none, final.error_message


def test_describe_and_alter_errors(sasl_broker: tuple[str, str]) -> None:
    plain, _ = sasl_broker
    assert upsert(plain, "described", "pw", SHA512, 4096).results[0].error_code == 0
    with WireClient(plain) as c:
        r = c.request(rq.request(50, 0, users=[{"name": "described"}, {"name": "nobody"}]))
        assert r.error_code == ErrorCode.none
        got = {x.user: x for x in r.results}
        assert got["described"].error_code == ErrorCode.none
        assert [(i.mechanism, i.iterations) for i in got["described"].credential_infos] == [
            (2, 4096)
        ]
        assert got["nobody"].error_code == ErrorCode.resource_not_found
        r = c.request(rq.request(50, 0, users=None))
        assert "described" in {x.user for x in r.results}
        r = c.request(
            rq.request(51, 0, upsertions=[],
                       deletions=[{"name": "nobody", "mechanism": 1},
                                  {"name": "described", "mechanism": 0}])
        )  # fmt: skip
        assert {x.user: x.error_code for x in r.results} == {
            "nobody": ErrorCode.resource_not_found,
            "described": ErrorCode.unsupported_sasl_mechanism,
        }
    for iters in (4095, 16385):
        r = upsert(plain, "weak", "pw", SHA256, iters)
        assert r.results[0].error_code == ErrorCode.unacceptable_credential


def test_confluent_admin_client_manages_scram_credentials(sasl_broker: tuple[str, str]) -> None:
    plain, sasl = sasl_broker
    admin = AdminClient({"bootstrap.servers": plain})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("carol", info, b"carol-pw")]
    )
    futures["carol"].result(10)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(10)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    # A real client logs in over SASL with what the AdminClient set.
    producer = Producer(
        {
            "bootstrap.servers": sasl,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "carol",
            "sasl.password": "carol-pw",
        }
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            producer.list_topics(timeout=5)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)]
    )
    futures["carol"].result(10)
    with pytest.raises(Exception, match="does not exist"):
        admin.describe_user_scram_credentials(["carol"])["carol"].result(10)


def test_start_up_refuses_gssapi(tmp_path: Path) -> None:
    listeners = "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
    r = moldau("serve", "--data-dir", str(tmp_path / "data"), "--override", listeners)
    assert r.returncode != 0
    assert r.stderr.splitlines()[-1] == (
        "moldau serve: Listener SASL_PLAINTEXT enables SASL mechanism(s) GSSAPI "
        "(sasl.enabled.mechanisms); Moldau supports PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"
    )


def moldau(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "moldau", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_moldau_configs_manages_users_as_kafka_configs(sasl_broker: tuple[str, str]) -> None:
    plain, sasl = sasl_broker
    base = ["configs", "--bootstrap-server", plain]
    user = ["--entity-type", "users", "--entity-name", "dora"]
    add = "SCRAM-SHA-256=[iterations=8192,password=dora-secret],SCRAM-SHA-512=[password=x]"
    r = moldau(*base, "--alter", *user, "--add-config", add)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Completed updating config for user dora.\n"
    r = moldau(*base, "--describe", *user)
    assert r.stdout == (
        "SCRAM credential configs for user-principal 'dora' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n"
    )
    # dora logs in with the password given to the tool.
    deadline = time.monotonic() + 10
    while True:
        with WireClient(sasl) as c:
            final, _ = scram_login(c, SHA256, "dora", "dora-secret")
        if final.error_code == ErrorCode.none or time.monotonic() > deadline:
            break
    assert final.error_code == ErrorCode.none, final.error_message
    r = moldau(*base, "--alter", *user, "--delete-config", "SCRAM-SHA-512")
    assert r.returncode == 0, r.stderr
    r = moldau(*base, "--describe", "--entity-type", "users")
    assert "user-principal 'dora' are SCRAM-SHA-256=iterations=8192\n" in r.stdout
    r = moldau(*base, "--alter", *user, "--delete-config", "SCRAM-SHA-512")
    assert r.returncode != 0 and "does not exist" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = moldau(*base, "--alter", *user, "--add-config", "SCRAM-SHA-256=[iterations=100,password=p]")
    # Refused by the tool before any request, as Kafka's kafka-configs does.
    assert r.returncode != 0 and "Iterations 100 is less than the minimum 4096" in r.stderr


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_brokers_replicate_over_a_sasl_inter_broker_listener(tmp_path: Path, protocol: str) -> None:
    """Followers fetch from their leader on the SASL listener, logged in with the
    inter-broker mechanism and the listener's JAAS username/password (over TLS
    first on SASL_SSL)."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="broker" password="broker-pw" user_broker="broker-pw";'
    )
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:0,{protocol}://127.0.0.1:0",
        "inter.broker.listener.name": protocol,
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        f"listener.name.{protocol.lower()}.plain.sasl.jaas.config": jaas,
    }
    if protocol == "SASL_SSL":
        overrides |= Certificates.create(tmp_path / "certs").broker_properties()
    with (
        LocalCluster(tmp_path / "cluster", 2, overrides) as cluster,
        WireClient(cluster.bootstrap_of(1)) as c,
    ):
        created = c.request(
            rq.request(
                19, 7, timeout=10_000,
                topics=[{"name": "replicated", "num_partitions": -1, "replication_factor": -1,
                         "assignments": [{"partition_index": 0, "broker_ids": [1, 2]}]}],
            )
        )  # fmt: skip
        assert created.topics[0].error_code == ErrorCode.none

        def replicated() -> bool:
            md = c.request(rq.metadata("replicated", auto_create=False))
            partitions = md.topics[0].partitions
            return bool(partitions and sorted(partitions[0].isr_nodes) == [1, 2])

        assert wait_for(replicated, 20)
        # Broker 1 leads (the first of the assignment); acks=all needs broker 2's fetch.
        r = c.request(rq.produce("replicated", 0, build_batch([(None, b"v")]), acks=-1))
        assert r.responses[0].partition_responses[0].error_code == ErrorCode.none
        follower = cluster.cluster.broker(2).log_manager.logs[TopicPartition("replicated", 0)]
        assert follower.log_end_offset == 1


def test_moldau_testing_local_cluster_with_scram_between_brokers(tmp_path: Path) -> None:
    """LocalCluster(sasl=...): SCRAM users in the store before the brokers start, so
    they replicate logged in to each other with SCRAM; users log in with each
    mechanism, and a wrong password is refused."""
    users = SaslUsers({"admin": "admin-pw", "alice": "alice-pw"},
                      inter_broker_mechanism="SCRAM-SHA-256")  # fmt: skip
    overrides = {"inter.broker.listener.name": "SASL_PLAINTEXT"}
    with LocalCluster(tmp_path / "cluster", 2, overrides, sasl=users) as cluster:
        admin = AdminClient(cluster.sasl_client_config())
        admin.create_topics([NewTopic("kept", 1, 2)])["kept"].result(30)
        for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            p = Producer(cluster.sasl_client_config("alice", mechanism) | {"acks": "all"})
            p.produce("kept", mechanism.encode())
            assert p.flush(20) == 0, mechanism
        # Both replicas hold them: the follower fetched, logged in with SCRAM.
        logs = [cluster.cluster.broker(i).log_manager.logs[TopicPartition("kept", 0)]
                for i in (1, 2)]  # fmt: skip
        assert [log.log_end_offset for log in logs] == [3, 3]
        wrong = cluster.sasl_client_config("alice", "SCRAM-SHA-512") | {"sasl.password": "x"}
        refused: list[KafkaError] = []
        p = Producer(wrong | {"error_cb": refused.append})

        def told() -> bool:
            p.poll(0.1)
            return any(e.code() == KafkaError._AUTHENTICATION for e in refused)

        assert wait_for(told, 10)


def test_moldau_testing_broker_process_with_sasl_ssl(tmp_path: Path) -> None:
    """BrokerProcess(tls=..., sasl=...): a SASL_SSL listener whose SCRAM users were
    written to the broker's own store before it started; they outlive a restart."""
    certs = Certificates.create(tmp_path / "certs")
    users = SaslUsers({"admin": "admin-pw", "bob": "bob-pw"})
    with BrokerProcess(tmp_path / "data", tls=certs, sasl=users) as b:
        for _ in range(2):
            conf = b.sasl_client_config("bob", "SCRAM-SHA-512")
            assert conf["security.protocol"] == "SASL_SSL"
            assert b.sasl_bootstrap in conf["bootstrap.servers"]
            p = Producer(conf)
            p.produce("t", b"v")
            assert p.flush(20) == 0
            b.restart()
