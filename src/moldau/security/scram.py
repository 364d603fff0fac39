"""The SCRAM-SHA-256/512 server (RFC 5802, RFC 7677) as Kafka's ScramSaslServer:

    client-first  n,[a=authzid],n=user,r=cnonce[,ext...]
    server-first  r=cnonce+snonce,s=salt,i=iterations
    client-final  c=base64(gs2 header),r=cnonce+snonce,p=proof
    server-final  v=server signature

States are data (_State); each step is a check of the message against what the
previous steps fixed. Channel binding is not supported (as Kafka), nor the
`tokenauth` extension (Moldau has no delegation tokens)."""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
from collections.abc import Callable
from enum import Enum

from moldau.protocol.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UndisclosedSaslFailureError,
)
from moldau.security.credentials import (
    MIN_ITERATIONS,
    CredentialCache,
    ScramCredential,
    ScramMechanism,
    digest,
    hmac_,
)

# Kafka's message grammar (ScramMessages), a printable value being anything but ','.
_CLIENT_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>[^,]*))?,"
    r"(?P<bare>n=(?P<name>[^,]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<ext>(?:,[^,]+=[^,]*)*))"
)
_CLIENT_FINAL = re.compile(
    r"(?P<without_proof>c=(?P<binding>[A-Za-z0-9+/=]+),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[^,]+=[^,]*)*?),p=(?P<proof>[A-Za-z0-9+/=]+)"
)


class _State(Enum):
    CLIENT_FIRST = "receive client-first"
    CLIENT_FINAL = "receive client-final"
    COMPLETE = "complete"
    FAILED = "failed"


def secure_nonce() -> str:
    """130 random bits in base 36, as Kafka's ScramFormatter.secureRandomString."""
    n = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out or "0"


def sasl_name_to_user(name: str) -> str:
    """RFC 5802's saslname escapes: '=2C' is ',' and '=3D' is '='."""
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    def __init__(
        self,
        mechanism: ScramMechanism,
        credentials: CredentialCache,
        nonce: Callable[[], str] = secure_nonce,
    ) -> None:
        self.mechanism = mechanism.mechanism_name
        self._mech = mechanism
        self._credentials = credentials
        self._nonce = nonce
        self._state = _State.CLIENT_FIRST
        self._user = ""
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._full_nonce = ""

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def principal(self) -> str:
        if not self.complete:
            raise IllegalSaslStateError("Authentication exchange has not completed")
        return f"User:{self._user}"

    def evaluate(self, token: bytes) -> bytes:
        if self._state in (_State.COMPLETE, _State.FAILED):
            raise IllegalSaslStateError(f"Unexpected SCRAM message in state {self._state.value}")
        try:
            text = token.decode()
            if self._state is _State.CLIENT_FIRST:
                return self._client_first(text).encode()
            return self._client_final(text).encode()
        except UnicodeDecodeError:
            self._state = _State.FAILED
            raise UndisclosedSaslFailureError("Invalid SCRAM message: not UTF-8") from None
        except SaslAuthenticationFailedError:
            self._state = _State.FAILED
            raise

    def _client_first(self, text: str) -> str:
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise UndisclosedSaslFailureError("Invalid SCRAM client first message format")
        extensions = dict(e.split("=", 1) for e in m["ext"].split(",")[1:])
        if extensions:
            # tokenauth (delegation tokens) is the only extension Kafka knows; Moldau
            # has no delegation tokens, so every extension is refused.
            raise UndisclosedSaslFailureError(f"Unsupported SCRAM extensions: {sorted(extensions)}")
        self._user = sasl_name_to_user(m["name"])
        credential = self._credentials.get(self._user, self.mechanism)
        if credential is None:
            # Kafka's message: it does not say whether the user exists.
            raise UndisclosedSaslFailureError("Authentication failed: Invalid user credentials")
        authzid = m["authzid"]
        if authzid and sasl_name_to_user(authzid) != self._user:
            raise SaslAuthenticationFailedError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        if credential.iterations < MIN_ITERATIONS:
            raise UndisclosedSaslFailureError(
                f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS}"
                f" for {self.mechanism}"
            )
        self._credential = credential
        self._gs2_header = text[: m.start("bare")]
        self._client_first_bare = m["bare"]
        self._full_nonce = m["nonce"] + self._nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._full_nonce},s={salt},i={credential.iterations}"
        self._state = _State.CLIENT_FINAL
        return self._server_first

    def _client_final(self, text: str) -> str:
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise UndisclosedSaslFailureError("Invalid SCRAM client final message format")
        # Kafka 3.8.1-3.9 check only the end: librdkafka before 2.6.1 (kcat, many
        # distributions' confluent-kafka) sends its own nonce again in front. The
        # proof covers the whole message, so the server's fresh part still counts.
        if not m["nonce"].endswith(self._full_nonce):
            raise UndisclosedSaslFailureError("Invalid client nonce in the final client message.")
        if m["binding"] != base64.b64encode(self._gs2_header.encode()).decode():
            raise UndisclosedSaslFailureError("Invalid channel binding in the final client message")
        try:
            proof = base64.b64decode(m["proof"], validate=True)
        except binascii.Error:
            raise UndisclosedSaslFailureError("Invalid client proof encoding") from None
        credential = self._credential
        assert credential is not None
        auth_message = ",".join(
            (self._client_first_bare, self._server_first, m["without_proof"])
        ).encode()
        signature = hmac_(self._mech, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise UndisclosedSaslFailureError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(digest(self._mech, client_key), credential.stored_key):
            raise UndisclosedSaslFailureError("Invalid client credentials")
        server_signature = hmac_(self._mech, credential.server_key, auth_message)
        # The keys are not needed any more; drop them as Kafka clears its credential.
        self._credential = None
        self._state = _State.COMPLETE
        return "v=" + base64.b64encode(server_signature).decode()
