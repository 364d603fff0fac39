"""TLS contexts from Kafka's ssl.* configs (per listener: listener.name.<l>.ssl.*
overrides the broker-wide value), for a listener's server side and for the
broker's own client side (inter-broker links). Keystores and truststores are PEM
(ssl.keystore.type=PEM); a JKS or PKCS12 one is refused with how to convert it.
Any problem is an InvalidConfigError with one clear line."""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from typing import Any

from moldau.protocol.errors import InvalidConfigError

# A config value for this listener (BrokerConfig.for_listener bound to one).
Lookup = Callable[[str], Any]

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
# TLS 1.3's suites: OpenSSL enables them apart from set_ciphers (Python cannot
# restrict them), so they are accepted and left as they are.
_TLS13_SUITES = frozenset({
    "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256",
})  # fmt: skip


def _convert_hint(kind: str, store_type: str, location: str | None) -> str:
    where = location or f"the {kind}"
    if kind == "keystore":
        how = (
            f"keytool -importkeystore -srckeystore {where} -destkeystore server.p12 "
            "-deststoretype PKCS12 && openssl pkcs12 -in server.p12 -nodes -out server.pem"
        )
    else:
        how = f"keytool -exportcert -rfc -keystore {where} -alias <alias> > ca.pem"
    return (
        f"ssl.{kind}.type={store_type} is not supported: Moldau reads PEM; convert it "
        f"with `{how}` and set ssl.{kind}.type=PEM"
    )


def _is_pem_file(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return b"-----BEGIN" in f.read(64 * 1024)
    except OSError as e:
        raise InvalidConfigError(f"cannot read {path}: {e.strerror}") from None


def _check_type(kind: str, get: Lookup, location: str | None) -> None:
    store_type = str(get(f"ssl.{kind}.type") or "PEM").upper()
    if store_type == "PEM":
        return
    # Kafka's default type is JKS: a PEM file with the type left unset is read as PEM.
    if location is not None and _is_pem_file(location):
        return
    if location is None and store_type == "JKS":
        return  # nothing given in that format (inline PEM, or no store at all)
    raise InvalidConfigError(_convert_hint(kind, store_type, location))


def _load_keystore(ctx: ssl.SSLContext, get: Lookup) -> bool:
    """The key and its certificate chain; False if none is configured."""
    location = get("ssl.keystore.location")
    chain = get("ssl.keystore.certificate.chain")
    key = get("ssl.keystore.key")
    password = get("ssl.key.password") or get("ssl.keystore.password")
    _check_type("keystore", get, location)
    if location is not None and (chain or key):
        raise InvalidConfigError(
            "give ssl.keystore.location or ssl.keystore.certificate.chain + ssl.keystore.key, "
            "not both"
        )
    try:
        if location is not None:
            ctx.load_cert_chain(location, password=password)
            return True
        if chain or key:
            if not (chain and key):
                raise InvalidConfigError(
                    "ssl.keystore.certificate.chain and ssl.keystore.key go together"
                )
            # load_cert_chain reads files only: a private file for the moment it loads.
            fd, path = tempfile.mkstemp(suffix=".pem")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(f"{key.strip()}\n{chain.strip()}\n")
                ctx.load_cert_chain(path, password=password)
            finally:
                os.unlink(path)
            return True
    except ssl.SSLError as e:
        raise InvalidConfigError(
            f"cannot load the keystore {location or '(inline PEM)'}: {e.reason or e} "
            "(a key and certificate chain in PEM; the right ssl.key.password?)"
        ) from None
    except OSError as e:
        raise InvalidConfigError(f"cannot read {location}: {e.strerror}") from None
    return False


def _load_truststore(ctx: ssl.SSLContext, get: Lookup) -> None:
    location = get("ssl.truststore.location")
    certificates = get("ssl.truststore.certificates")
    _check_type("truststore", get, location)
    try:
        if location is not None:
            ctx.load_verify_locations(cafile=location)
        elif certificates:
            ctx.load_verify_locations(cadata=certificates)
        else:
            ctx.load_default_certs()  # as Kafka falls back to the JVM's
    except ssl.SSLError as e:
        raise InvalidConfigError(
            f"cannot load the truststore {location or '(inline PEM)'}: {e.reason or e}"
        ) from None
    except OSError as e:
        raise InvalidConfigError(f"cannot read {location}: {e.strerror}") from None


def _versions_and_ciphers(ctx: ssl.SSLContext, get: Lookup) -> None:
    enabled = [str(v) for v in get("ssl.enabled.protocols") or []]
    unknown = [v for v in enabled if v not in _VERSIONS]
    if unknown or not enabled:
        raise InvalidConfigError(
            f"ssl.enabled.protocols={','.join(enabled)}: each one of {', '.join(_VERSIONS)}"
        )
    versions = sorted(_VERSIONS[v] for v in enabled)
    ctx.minimum_version = versions[0]
    ctx.maximum_version = versions[-1]
    suites = [s for s in get("ssl.cipher.suites") or [] if s not in _TLS13_SUITES]
    if suites:
        try:
            ctx.set_ciphers(":".join(suites))
        except ssl.SSLError:
            raise InvalidConfigError(
                f"ssl.cipher.suites={','.join(suites)}: none of them is known to OpenSSL "
                "(give OpenSSL names, e.g. ECDHE-RSA-AES128-GCM-SHA256)"
            ) from None


def server_context(listener: str, get: Lookup) -> ssl.SSLContext:
    """The context of an SSL or SASL_SSL listener."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions_and_ciphers(ctx, get)
    if not _load_keystore(ctx, get):
        raise InvalidConfigError(
            f"listener {listener} uses TLS: set ssl.keystore.location (key and certificate "
            "chain in PEM) or ssl.keystore.certificate.chain + ssl.keystore.key"
        )
    client_auth = str(get("ssl.client.auth"))
    ctx.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none":
        _load_truststore(ctx, get)
    return ctx


def client_context(get: Lookup) -> ssl.SSLContext:
    """The broker's own client side (its links to other brokers): trusts the
    truststore, checks host names unless ssl.endpoint.identification.algorithm is
    empty, and presents the keystore's certificate to a peer that asks for one."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions_and_ciphers(ctx, get)
    _load_truststore(ctx, get)
    ctx.check_hostname = bool(get("ssl.endpoint.identification.algorithm"))
    _load_keystore(ctx, get)
    return ctx
