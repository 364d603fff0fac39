"""SASL/PLAIN and SCRAM-SHA-256/512 servers: RFC 7677's exchange, and a client
computed here independently with hashlib/hmac."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from moldau.protocol.errors import IllegalSaslStateError, SaslAuthenticationFailedError
from moldau.security.credentials import (
    CredentialCache,
    ScramCredential,
    ScramMechanism,
    new_credential,
)
from moldau.security.plain import PlainServer, users_from_jaas
from moldau.security.scram import ScramServer

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512


# -- PLAIN ------------------------------------------------------------------------------


def test_plain_logs_in_a_jaas_user() -> None:
    users = users_from_jaas({"username": "admin", "password": "a", "user_alice": "alice-pw"})
    assert users == {"alice": "alice-pw"}
    server = PlainServer(users)
    assert not server.complete
    assert server.evaluate(b"\0alice\0alice-pw") == b""
    assert server.complete and server.principal == "User:alice"
    with pytest.raises(IllegalSaslStateError):
        server.evaluate(b"\0alice\0alice-pw")


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (b"\0alice\0wrong", "Invalid username or password"),
        (b"\0bob\0alice-pw", "Invalid username or password"),
        (b"\0\0alice-pw", "username not specified"),
        (b"\0alice\0", "password not specified"),
        (b"alice\0alice-pw", "expected 3 tokens, got 2"),
        (b"\0alice\0alice-pw\0x", "expected 3 tokens, got 4"),
        (b"bob\0alice\0alice-pw", "authorization id that is different"),
        (b"\xff\xfe\0alice\0pw", "not UTF-8"),
    ],
)
def test_plain_refuses(token: bytes, why: str) -> None:
    server = PlainServer({"alice": "alice-pw"})
    with pytest.raises(SaslAuthenticationFailedError, match=why):
        server.evaluate(token)
    assert not server.complete


def test_plain_accepts_an_authzid_equal_to_the_user() -> None:
    server = PlainServer({"alice": "alice-pw"})
    server.evaluate(b"alice\0alice\0alice-pw")
    assert server.principal == "User:alice"


# -- SCRAM: RFC 7677 -------------------------------------------------------------------

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def test_scram_sha_256_rfc7677_exchange() -> None:
    cache = CredentialCache()
    cred = new_credential(SHA256, "pencil", 4096, RFC_SALT)
    cache.update_user("user", {"SCRAM-SHA-256": cred.to_string()})
    server = ScramServer(SHA256, cache, nonce=lambda: RFC_SERVER_NONCE)
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.principal == "User:user"
    with pytest.raises(IllegalSaslStateError):
        server.evaluate(b"c=biws")


# -- SCRAM: an independent client ---------------------------------------------------


def _h(mech: ScramMechanism) -> str:
    return {SHA256: "sha256", SHA512: "sha512"}[mech]


def client_final(
    mech: ScramMechanism,
    password: str,
    client_first_bare: str,
    server_first: str,
    gs2: str = "n,,",
    nonce: str | None = None,
) -> tuple[str, bytes]:
    """(client-final message, expected server signature), RFC 5802 section 3;
    `nonce` in place of the server's (what a faulty client sends back)."""
    fields = dict(f.split("=", 1) for f in server_first.split(","))
    salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
    salted = hashlib.pbkdf2_hmac(_h(mech), password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", _h(mech)).digest()
    stored_key = hashlib.new(_h(mech), client_key).digest()
    without_proof = f"c={base64.b64encode(gs2.encode()).decode()},r={nonce or fields['r']}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth, _h(mech)).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.new(salted, b"Server Key", _h(mech)).digest()
    server_sig = hmac.new(server_key, auth, _h(mech)).digest()
    return f"{without_proof},p={base64.b64encode(proof).decode()}", server_sig


def _cache(mech: ScramMechanism, user: str = "alice", pw: str = "alice-secret") -> CredentialCache:
    cache = CredentialCache()
    cache.update_user(user, {mech.mechanism_name: new_credential(mech, pw, 4096).to_string()})
    return cache


@pytest.mark.parametrize("mech", [SHA256, SHA512])
def test_scram_logs_in_an_independent_client(mech: ScramMechanism) -> None:
    server = ScramServer(mech, _cache(mech))
    bare = "n=alice,r=clientnonce123"
    server_first = server.evaluate(f"n,,{bare}".encode()).decode()
    assert server_first.startswith("r=clientnonce123") and len(server_first.split(",")) == 3
    final, expected = client_final(mech, "alice-secret", bare, server_first)
    answer = server.evaluate(final.encode())
    assert answer == b"v=" + base64.b64encode(expected)
    assert server.principal == "User:alice"


@pytest.mark.parametrize("mech", [SHA256, SHA512])
def test_scram_refuses_a_wrong_password(mech: ScramMechanism) -> None:
    server = ScramServer(mech, _cache(mech))
    bare = "n=alice,r=abc"
    server_first = server.evaluate(f"n,,{bare}".encode()).decode()
    final, _ = client_final(mech, "not-her-password", bare, server_first)
    with pytest.raises(SaslAuthenticationFailedError, match="Invalid client credentials"):
        server.evaluate(final.encode())
    assert not server.complete
    with pytest.raises(IllegalSaslStateError):
        server.evaluate(final.encode())


def test_scram_credentials_are_per_mechanism() -> None:
    # alice has a SCRAM-SHA-256 credential only: SCRAM-SHA-512 does not know her.
    server = ScramServer(SHA512, _cache(SHA256))
    with pytest.raises(SaslAuthenticationFailedError, match="Invalid user credentials"):
        server.evaluate(b"n,,n=alice,r=abc")


@pytest.mark.parametrize(
    ("first", "why"),
    [
        (b"n,,n=bob,r=abc", "Invalid user credentials"),
        (b"n,,n=alice,r=abc,tokenauth=true", "Unsupported SCRAM extensions"),
        (b"y,,n=alice,r=abc", "format"),
        (b"p=tls-unique,,n=alice,r=abc", "format"),
        (b"n,a=bob,n=alice,r=abc", "authorization id that is different"),
        (b"garbage", "format"),
        (b"", "format"),
        (b"\x00\xff\xfe", "UTF-8"),
        (b"n,,n=alice", "format"),
    ],
)
def test_scram_refuses_a_bad_client_first(first: bytes, why: str) -> None:
    server = ScramServer(SHA256, _cache(SHA256))
    with pytest.raises(SaslAuthenticationFailedError, match=why):
        server.evaluate(first)


def test_scram_refuses_a_changed_nonce_or_binding() -> None:
    for tamper in ("nonce", "binding", "garbage"):
        server = ScramServer(SHA256, _cache(SHA256))
        bare = "n=alice,r=abc"
        server_first = server.evaluate(f"n,,{bare}".encode()).decode()
        final, _ = client_final(SHA256, "alice-secret", bare, server_first)
        if tamper == "nonce":
            final = final.replace("r=abc", "r=abd")
        elif tamper == "binding":
            final = final.replace("c=biws", "c=eSws")  # "y,," claims binding support
        else:
            final = "p=AAAA"
        with pytest.raises(SaslAuthenticationFailedError):
            server.evaluate(final.encode())


def test_scram_takes_librdkafkas_doubled_client_nonce_as_kafka_3_9() -> None:
    """librdkafka before 2.6.1 sends its own nonce again in front of the server's
    (client + client + server); Kafka 3.8.1 to 3.9 accept a final nonce that ends
    with the server's, so that kcat and older confluent-kafka log in. Anything
    else around it is still refused."""
    for sent, accepted in (("abc{full}", True), ("{full}x", False), ("abcabc", False)):
        server = ScramServer(SHA256, _cache(SHA256))
        bare = "n=alice,r=abc"
        server_first = server.evaluate(f"n,,{bare}".encode()).decode()
        full = server_first.split(",")[0].removeprefix("r=")
        final, _ = client_final(
            SHA256, "alice-secret", bare, server_first, nonce=sent.format(full=full)
        )
        if accepted:
            server.evaluate(final.encode())
            assert server.principal == "User:alice"
        else:
            with pytest.raises(SaslAuthenticationFailedError, match="nonce"):
                server.evaluate(final.encode())


def test_scram_refuses_a_credential_below_the_minimum_iterations() -> None:
    cache = CredentialCache()
    weak = new_credential(SHA256, "pw", 1024)
    cache.update_user("alice", {"SCRAM-SHA-256": weak.to_string()})
    with pytest.raises(SaslAuthenticationFailedError, match="less than the minimum 4096"):
        ScramServer(SHA256, cache).evaluate(b"n,,n=alice,r=abc")


def test_scram_user_names_are_unescaped() -> None:
    cache = _cache(SHA256, user="a,b=c")
    server = ScramServer(SHA256, cache)
    bare = "n=a=2Cb=3Dc,r=abc"
    server_first = server.evaluate(f"n,,{bare}".encode()).decode()
    final, _ = client_final(SHA256, "alice-secret", bare, server_first)
    server.evaluate(final.encode())
    assert server.principal == "User:a,b=c"


def test_server_nonces_differ() -> None:
    firsts = {ScramServer(SHA256, _cache(SHA256)).evaluate(b"n,,n=alice,r=x") for _ in range(3)}
    assert len(firsts) == 3


# -- credentials ------------------------------------------------------------------------


def test_credential_string_form_round_trips() -> None:
    cred = new_credential(SHA512, "pw", 8192, b"0123456789abcdef")
    text = cred.to_string()
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=")
    assert text.endswith(",iterations=8192")
    assert ScramCredential.from_string(text) == cred
    with pytest.raises(ValueError):
        ScramCredential.from_string("salt=AAAA,iterations=4096")


def test_cache_keeps_only_scram_keys_and_forgets_removed_users() -> None:
    cache = CredentialCache()
    cred = new_credential(SHA256, "pw", 4096)
    cache.update_user("alice", {"SCRAM-SHA-256": cred.to_string(), "producer_byte_rate": "10"})
    assert cache.get("alice", "SCRAM-SHA-256") == cred
    assert cache.get("alice", "SCRAM-SHA-512") is None
    cache.update_user("alice", {"producer_byte_rate": "10"})
    assert cache.get("alice", "SCRAM-SHA-256") is None
    assert cache.users() == {}


# -- the client side (inter-broker) -----------------------------------------------------


def _run(client: object, server: object) -> None:
    challenge = None
    while True:
        token = client.respond(challenge)  # type: ignore[attr-defined]
        if token is None:
            return
        challenge = server.evaluate(token)  # type: ignore[attr-defined]


@pytest.mark.parametrize("mech", [SHA256, SHA512])
def test_scram_client_logs_in_to_the_server(mech: ScramMechanism) -> None:
    from moldau.security.sasl_client import ScramClient

    server = ScramServer(mech, _cache(mech, user="broker,1"))
    _run(ScramClient(mech, "broker,1", "alice-secret"), server)
    assert server.principal == "User:broker,1"


def test_scram_client_refuses_a_server_that_does_not_know_the_password() -> None:
    from moldau.security.sasl_client import ScramClient

    client = ScramClient(SHA256, "alice", "alice-secret")
    first = client.respond(None)
    assert first is not None
    server = ScramServer(SHA256, _cache(SHA256))
    client.respond(server.evaluate(first))
    with pytest.raises(SaslAuthenticationFailedError, match="invalid server signature"):
        client.respond(b"v=" + base64.b64encode(b"\0" * 32))


def test_plain_client_logs_in_to_the_server() -> None:
    from moldau.security.sasl_client import PlainClient

    server = PlainServer({"broker": "b-pw"})
    _run(PlainClient("broker", "b-pw"), server)
    assert server.principal == "User:broker"
