"""TLS and SASL for the raw requests of `moldau` tools (cli/admin_call.py), from the
librdkafka-named settings of their --command-config, the same file their
confluent-kafka clients take: security.protocol, sasl.mechanism(s), sasl.username,
sasl.password, ssl.ca.location (or ssl.ca.pem), ssl.certificate.location and
ssl.key.location (or ssl.certificate.pem and ssl.key.pem), ssl.key.password,
ssl.endpoint.identification.algorithm, enable.ssl.certificate.verification,
ssl.cipher.suites.

The TLS context is the broker's own client context (server/tls.py), given these
settings under Kafka's names; the SASL login is the broker's own sans-IO client
(security/sasl_client.py). A setting these cannot honour is a CliError naming it.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moldau.cli.errors import CliError
from moldau.protocol.errors import InvalidConfigError
from moldau.security.listeners import SASL_PROTOCOLS, SECURITY_PROTOCOLS, TLS_PROTOCOLS
from moldau.security.sasl import SUPPORTED_MECHANISMS
from moldau.security.sasl_client import SaslClient, login_factory
from moldau.server.tls import client_context

#: librdkafka's default sasl.mechanisms.
_LIBRDKAFKA_MECHANISM = "GSSAPI"
#: Settings librdkafka honours and these requests cannot: what to give instead.
_UNSUPPORTED_TLS = {
    "ssl.keystore.location": "give the key and certificate in PEM as ssl.key.location and "
    "ssl.certificate.location",
    "ssl.engine.location": "give the key in PEM as ssl.key.location",
    "ssl.engine.id": "give the key in PEM as ssl.key.location",
    "ssl.providers": "leave it unset",
    "ssl.crl.location": "leave it unset",
}


@dataclass(frozen=True)
class ClientSecurity:
    """How a tool's connection to a broker is made: TLS (a context) and SASL (a
    new sans-IO client per connection), each None where the protocol has none."""

    protocol: str
    ssl_context: ssl.SSLContext | None
    login: Callable[[], SaslClient] | None


def client_security(settings: Mapping[str, str], flag: str = "--command-config") -> ClientSecurity:
    """The TLS and SASL of `settings` (librdkafka names), or a CliError of one line."""
    protocol = settings.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise CliError(
            f"{flag}: security.protocol={settings['security.protocol']} is not one of "
            f"{', '.join(SECURITY_PROTOCOLS)}"
        )
    context = _tls_context(settings, flag) if protocol in TLS_PROTOCOLS else None
    login = _sasl_login(settings, flag) if protocol in SASL_PROTOCOLS else None
    return ClientSecurity(protocol, context, login)


def _sasl_login(settings: Mapping[str, str], flag: str) -> Callable[[], SaslClient]:
    given = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")
    mechanism = (given or _LIBRDKAFKA_MECHANISM).strip().upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        what = f"sasl.mechanism={mechanism}" + ("" if given else " (librdkafka's default)")
        raise CliError(
            f"{flag}: {what} is not supported; give sasl.mechanism "
            f"{', '.join(SUPPORTED_MECHANISMS)}"
        )
    username, password = settings.get("sasl.username"), settings.get("sasl.password")
    if not username or password is None:
        raise CliError(f"{flag}: SASL {mechanism} needs sasl.username and sasl.password")
    return login_factory(mechanism, username, password)


def _tls_context(settings: Mapping[str, str], flag: str) -> ssl.SSLContext:
    for key, instead in _UNSUPPORTED_TLS.items():
        if settings.get(key):
            raise CliError(f"{flag}: {key} is not supported; {instead}")
    kafka_names = _kafka_tls_settings(settings, flag)
    try:
        context = client_context(kafka_names.get)
    except InvalidConfigError as e:
        raise CliError(f"{flag}: {e}") from None
    if settings.get("enable.ssl.certificate.verification", "true").strip().lower() == "false":
        # librdkafka's switch for a test cluster's self-signed certificates.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _kafka_tls_settings(settings: Mapping[str, str], flag: str) -> dict[str, Any]:
    """librdkafka's TLS settings under the Kafka names server/tls.py reads."""
    ca = settings.get("ssl.ca.location")
    identification = settings.get("ssl.endpoint.identification.algorithm", "https")
    suites = settings.get("ssl.cipher.suites", "")
    out: dict[str, Any] = {
        "ssl.enabled.protocols": ["TLSv1.2", "TLSv1.3"],
        "ssl.cipher.suites": [s for s in suites.split(":") if s.strip()],
        # "probe": the system's store, as with nothing given.
        "ssl.truststore.location": ca if ca and ca != "probe" else None,
        "ssl.truststore.certificates": settings.get("ssl.ca.pem"),
        "ssl.endpoint.identification.algorithm": (
            "" if identification.strip().lower() == "none" else "https"
        ),
        "ssl.key.password": settings.get("ssl.key.password"),
    }
    certificate = _pem(settings, "ssl.certificate", flag)
    key = _pem(settings, "ssl.key", flag)
    if bool(certificate) != bool(key):
        raise CliError(f"{flag}: ssl.certificate.location and ssl.key.location go together")
    if certificate:
        out["ssl.keystore.certificate.chain"] = certificate
        out["ssl.keystore.key"] = key
    return out


def _pem(settings: Mapping[str, str], name: str, flag: str) -> str | None:
    """`<name>.pem` as given, or the text of the file at `<name>.location`."""
    if settings.get(f"{name}.pem"):
        return settings[f"{name}.pem"]
    location = settings.get(f"{name}.location")
    if not location:
        return None
    try:
        return Path(location).read_text()
    except OSError as e:
        raise CliError(f"{flag}: {name}.location: cannot read {location}: {e.strerror}") from None
