"""SCRAM credentials (RFC 5802) as Kafka keeps them: per user and mechanism, the salt,
StoredKey, ServerKey and iteration count, never the password. Kafka's string form
(ScramCredentialUtils) is what /config/users/<user> holds per mechanism key."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

MIN_ITERATIONS = 4096
# The most AlterUserScramCredentials accepts (Kafka's bound, against slow logins).
MAX_ITERATIONS = 16384


class ScramMechanism(Enum):
    """Kafka's ScramMechanism: the mechanism name, its hash, and the type byte that
    Describe/AlterUserScramCredentials use on the wire."""

    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256", 1)
    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512", 2)

    @property
    def mechanism_name(self) -> str:
        return self.value[0]

    @property
    def hash_name(self) -> str:
        return self.value[1]

    @property
    def type_id(self) -> int:
        return self.value[2]

    @classmethod
    def by_name(cls, name: str) -> ScramMechanism | None:
        return _BY_NAME.get(name)

    @classmethod
    def by_type(cls, type_id: int) -> ScramMechanism | None:
        return _BY_TYPE.get(type_id)


_BY_NAME = {m.mechanism_name: m for m in ScramMechanism}
_BY_TYPE = {m.type_id: m for m in ScramMechanism}
SCRAM_MECHANISMS = tuple(_BY_NAME)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_string(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_string(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(
                base64.b64decode(fields["salt"], validate=True),
                base64.b64decode(fields["stored_key"], validate=True),
                base64.b64decode(fields["server_key"], validate=True),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as e:
            raise ValueError(f"invalid SCRAM credential {text!r}: {e}") from e


def hmac_(mechanism: ScramMechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, mechanism.hash_name).digest()


def digest(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, data).digest()


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    """Hi() of RFC 5802: PBKDF2 with the mechanism's HMAC. (SASLprep of the password is
    skipped, as Kafka skips it.)"""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def credential_from_salted(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    client_key = hmac_(mechanism, salted, b"Client Key")
    server_key = hmac_(mechanism, salted, b"Server Key")
    return ScramCredential(salt, digest(mechanism, client_key), server_key, iterations)


def new_credential(
    mechanism: ScramMechanism, password: str, iterations: int, salt: bytes | None = None
) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


class CredentialCache:
    """The SCRAM credentials this broker knows, by user then mechanism name; kept
    current from /config/users by the config change notifications."""

    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(c) for u, c in self._users.items() if c}

    def update_user(self, user: str, config: Mapping[str, str]) -> None:
        """A user's /config/users entry (mechanism name -> credential string) replaces
        what was known; keys that are not SCRAM mechanisms (quotas) are not ours."""
        creds: dict[str, ScramCredential] = {}
        for name, value in config.items():
            if name in _BY_NAME:
                creds[name] = ScramCredential.from_string(value)
        if creds:
            self._users[user] = creds
        else:
            self._users.pop(user, None)

    def remove_user(self, user: str) -> None:
        self._users.pop(user, None)
