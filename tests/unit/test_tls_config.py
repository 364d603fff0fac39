"""TLS contexts from Kafka's ssl.* configs: PEM keystores (a file, or inline), the
truststore, ssl.client.auth, versions; a JKS keystore or a bad setting is one
clear line."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from moldau.config.broker import BrokerConfig
from moldau.protocol.errors import InvalidConfigError
from moldau.server.tls import client_context, server_context
from moldau.testing.certs import Certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.create(tmp_path_factory.mktemp("certs"))


def lookup(**props: str) -> Any:
    config = BrokerConfig(props)
    return lambda name: config.for_listener("SSL", name)


def test_pem_keystore_file_with_client_auth_required(certs: Certificates) -> None:
    ctx = server_context("SSL", lookup(**{
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.broker()),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": "required", "ssl.enabled.protocols": "TLSv1.3",
    }))  # fmt: skip
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert len(ctx.get_ca_certs()) == 1


def test_inline_pem_and_an_encrypted_key(certs: Certificates, tmp_path: Path) -> None:
    pem = certs.broker("enc", key_password="s3cret").read_text()
    key = pem[: pem.index("-----END ENCRYPTED PRIVATE KEY-----") + 36]
    chain = pem[len(key) :]
    ctx = server_context("SSL", lookup(**{
        "ssl.keystore.type": "PEM", "ssl.keystore.key": key,
        "ssl.keystore.certificate.chain": chain, "ssl.key.password": "s3cret",
        "ssl.client.auth": "requested", "ssl.truststore.certificates": certs.ca.read_text(),
    }))  # fmt: skip
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    with pytest.raises(InvalidConfigError, match="cannot load the keystore"):
        server_context("SSL", lookup(**{
            "ssl.keystore.location": str(certs.directory / "enc.pem"),
            "ssl.key.password": "wrong",
        }))  # fmt: skip


def test_jks_keystore_says_how_to_convert(tmp_path: Path) -> None:
    jks = tmp_path / "server.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    with pytest.raises(
        InvalidConfigError, match=r"keytool -importkeystore .*ssl\.keystore\.type=PEM"
    ):
        server_context("SSL", lookup(**{"ssl.keystore.location": str(jks)}))
    with pytest.raises(InvalidConfigError, match="PKCS12 is not supported"):
        server_context("SSL", lookup(**{
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(jks),
        }))  # fmt: skip


@pytest.mark.parametrize(
    ("props", "error"),
    [
        ({}, "set ssl.keystore.location"),
        ({"ssl.keystore.location": "/nonexistent.pem"}, "cannot read /nonexistent.pem"),
        ({"ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols=SSLv3"),
        ({"ssl.cipher.suites": "NO-SUCH-CIPHER"}, "none of them is known"),
    ],
)
def test_bad_settings_are_one_clear_error(props: dict[str, str], error: str) -> None:
    with pytest.raises(InvalidConfigError, match=error):
        server_context("SSL", lookup(**props))


def test_client_side_checks_host_names_unless_disabled(certs: Certificates) -> None:
    trust = {"ssl.truststore.location": str(certs.ca), "ssl.keystore.location": str(certs.broker())}
    assert client_context(lookup(**trust)).check_hostname is True
    off = client_context(lookup(**trust, **{"ssl.endpoint.identification.algorithm": ""}))
    assert off.check_hostname is False
