"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer: one message
`authzid NUL authcid NUL password`, checked against the `user_<name>="<password>"`
options of the listener's PlainLoginModule (PlainServerCallbackHandler)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from moldau.protocol.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UndisclosedSaslFailureError,
)

MECHANISM = "PLAIN"
JAAS_USER_PREFIX = "user_"


def users_from_jaas(options: Mapping[str, str]) -> dict[str, str]:
    """user name -> password from PlainLoginModule's options."""
    return {
        k[len(JAAS_USER_PREFIX) :]: v for k, v in options.items() if k.startswith(JAAS_USER_PREFIX)
    }


class PlainServer:
    mechanism = MECHANISM

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._principal: str | None = None

    @property
    def complete(self) -> bool:
        return self._principal is not None

    @property
    def principal(self) -> str:
        if self._principal is None:
            raise IllegalSaslStateError("Authentication exchange has not completed")
        return self._principal

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslStateError("Authentication exchange has completed")
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise UndisclosedSaslFailureError("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise UndisclosedSaslFailureError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}"
            )
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationFailedError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailedError("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compare_digest: the time taken must not tell how much of a password matched.
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationFailedError(
                "Authentication failed: Invalid username or password"
            )
        if authzid and authzid != username:
            raise SaslAuthenticationFailedError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self._principal = f"User:{username}"
        return b""
