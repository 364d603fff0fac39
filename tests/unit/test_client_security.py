"""The TLS and SASL of a tool's raw requests from librdkafka-named settings
(cli/client_security.py): what they give, and the settings they refuse in one line."""

from __future__ import annotations

import ssl

import pytest

from moldau.cli.client_security import client_security
from moldau.cli.errors import CliError
from moldau.testing.certs import Certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.create(tmp_path_factory.mktemp("certs"))


def test_plaintext_by_default() -> None:
    security = client_security({})
    assert (security.protocol, security.ssl_context, security.login) == ("PLAINTEXT", None, None)


def test_sasl_ssl_with_scram_verifies_the_broker_and_logs_in(certs: Certificates) -> None:
    security = client_security({
        "security.protocol": "sasl_ssl",  # librdkafka takes any case
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "secret",
    })  # fmt: skip
    ctx = security.ssl_context
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert security.login is not None
    client = security.login()
    assert client.mechanism == "SCRAM-SHA-512"
    first = client.respond(None)
    assert first is not None and first.startswith(b"n,,n=alice,r=")


def test_sasl_plaintext_plain_has_no_tls() -> None:
    security = client_security({
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "bob",
        "sasl.password": "pw",
    })  # fmt: skip
    assert security.ssl_context is None and security.login is not None
    assert security.login().respond(None) == b"\0bob\0pw"


def test_host_name_check_and_verification_can_be_turned_off(certs: Certificates) -> None:
    base = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca)}
    ctx = client_security(base | {"ssl.endpoint.identification.algorithm": "none"}).ssl_context
    assert ctx is not None and not ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    ctx = client_security(base | {"enable.ssl.certificate.verification": "false"}).ssl_context
    assert ctx is not None and ctx.verify_mode == ssl.CERT_NONE


def test_a_client_certificate_from_files_or_inline_pem(certs: Certificates) -> None:
    client = certs.client("carol")
    files = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(client.cert),
        "ssl.key.location": str(client.key),
    }
    assert client_security(files).ssl_context is not None
    inline = {
        "security.protocol": "SSL",
        "ssl.ca.pem": certs.ca.read_text(),
        "ssl.certificate.pem": client.cert.read_text(),
        "ssl.key.pem": client.key.read_text(),
    }
    assert client_security(inline).ssl_context is not None
    # The key of another certificate does not load.
    other = certs.client("dave")
    with pytest.raises(CliError, match="cannot load the keystore"):
        client_security(files | {"ssl.key.location": str(other.key)})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"security.protocol": "SASL_SSLX"}, "security.protocol=SASL_SSLX is not one of"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u", "sasl.password": "p"},
            "sasl.mechanism=GSSAPI (librdkafka's default) is not supported",
        ),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"},
            "sasl.mechanism=OAUTHBEARER is not supported; give sasl.mechanism PLAIN, "
            "SCRAM-SHA-256, SCRAM-SHA-512",
        ),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256"},
            "SASL SCRAM-SHA-256 needs sasl.username and sasl.password",
        ),
        (
            {"security.protocol": "SSL", "ssl.keystore.location": "client.p12"},
            "ssl.keystore.location is not supported; give the key and certificate in PEM",
        ),
        (
            {"security.protocol": "SSL", "ssl.certificate.location": "CA"},
            "ssl.certificate.location and ssl.key.location go together",
        ),
        (
            {"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
            "cannot read /nonexistent/ca.pem",
        ),
        (
            {"security.protocol": "SSL", "ssl.key.location": "/nonexistent/key.pem"},
            "ssl.key.location: cannot read /nonexistent/key.pem",
        ),
    ],
)
def test_what_cannot_be_honoured_is_one_line_naming_it(
    certs: Certificates, settings: dict[str, str], message: str
) -> None:
    settings = {k: v.replace("CA", str(certs.ca)) for k, v in settings.items()}
    with pytest.raises(CliError) as e:
        client_security(settings, "--command-config")
    text = str(e.value)
    assert text.startswith("--command-config: ") and message in text
    assert "\n" not in text


def test_the_tool_names_its_own_flag() -> None:
    with pytest.raises(CliError, match=r"^--producer\.config: "):
        client_security({"security.protocol": "nope"}, "--producer.config")
