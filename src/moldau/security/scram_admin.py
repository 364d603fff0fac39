"""The checks of DescribeUserScramCredentials and AlterUserScramCredentials, as
Kafka's ZooKeeper-mode admin applies them, as pure functions over the users'
/config/users entries (user -> {mechanism name: credential string, ...})."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from moldau.protocol.errors import ErrorCode
from moldau.security.credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    ScramMechanism,
    credential_from_salted,
)


@dataclass(frozen=True, slots=True)
class UserResult:
    user: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    # (mechanism type id, iterations) of each credential (Describe only).
    credentials: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: int


def _infos(config: Mapping[str, str]) -> tuple[tuple[int, int], ...]:
    out = []
    for name in SCRAM_MECHANISMS:
        if name in config:
            mech = ScramMechanism.by_name(name)
            assert mech is not None
            out.append((mech.type_id, ScramCredential.from_string(config[name]).iterations))
    return tuple(out)


def describe(
    users: Sequence[str] | None, configs: Mapping[str, Mapping[str, str]]
) -> list[UserResult]:
    """`users` None or empty: every user with a SCRAM credential."""
    if not users:
        return [
            UserResult(u, credentials=_infos(c)) for u, c in sorted(configs.items()) if _infos(c)
        ]
    counts = Counter(users)
    out = []
    for user in dict.fromkeys(users):
        infos = _infos(configs.get(user, {}))
        if counts[user] > 1:
            out.append(UserResult(
                user, ErrorCode.duplicate_resource,
                f"Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {user}",
            ))  # fmt: skip
        elif not infos:
            out.append(UserResult(
                user, ErrorCode.resource_not_found,
                f"Attempt to describe a user credential that does not exist: {user}",
            ))  # fmt: skip
        else:
            out.append(UserResult(user, credentials=infos))
    return out


def alter(
    deletions: Sequence[Deletion],
    upsertions: Sequence[Upsertion],
    configs: Mapping[str, Mapping[str, str]],
) -> tuple[list[UserResult], dict[str, dict[str, str]]]:
    """One result per user named; and the new entries of the users to write (a user
    with any failed alteration is not changed at all, as Kafka)."""
    pairs = Counter((d.user, d.mechanism) for d in deletions)
    pairs.update((u.user, u.mechanism) for u in upsertions)
    failed: dict[str, tuple[ErrorCode, str]] = {}

    def fail(user: str, error: ErrorCode, message: str) -> None:
        failed.setdefault(user, (error, message))

    for (user, _), n in pairs.items():
        if n > 1:
            fail(user, ErrorCode.duplicate_resource,
                 "A user credential cannot be altered twice in the same request")  # fmt: skip
    items: list[Deletion | Upsertion] = [*deletions, *upsertions]
    for item in items:
        mech = ScramMechanism.by_type(item.mechanism)
        if not item.user:
            fail(item.user, ErrorCode.unacceptable_credential, "Username must not be empty")
        elif mech is None:
            fail(item.user, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        elif isinstance(item, Upsertion):
            if item.iterations < MIN_ITERATIONS:
                fail(item.user, ErrorCode.unacceptable_credential, "Too few iterations")
            elif item.iterations > MAX_ITERATIONS:
                fail(item.user, ErrorCode.unacceptable_credential, "Too many iterations")
            elif not item.salt or not item.salted_password:
                fail(item.user, ErrorCode.unacceptable_credential,
                     "Salt and salted password must not be empty")  # fmt: skip
        elif mech.mechanism_name not in configs.get(item.user, {}):
            fail(item.user, ErrorCode.resource_not_found,
                 "Attempt to delete a user credential that does not exist")  # fmt: skip
    changed: dict[str, dict[str, str]] = {}
    for d in deletions:
        if d.user not in failed:
            entry = changed.setdefault(d.user, dict(configs.get(d.user, {})))
            mech = ScramMechanism.by_type(d.mechanism)
            assert mech is not None
            entry.pop(mech.mechanism_name, None)
    for u in upsertions:
        if u.user not in failed:
            entry = changed.setdefault(u.user, dict(configs.get(u.user, {})))
            mech = ScramMechanism.by_type(u.mechanism)
            assert mech is not None
            cred = credential_from_salted(mech, u.salted_password, u.salt, u.iterations)
            entry[mech.mechanism_name] = cred.to_string()
    users = dict.fromkeys([*(d.user for d in deletions), *(u.user for u in upsertions)])
    results = [
        UserResult(user, *failed[user]) if user in failed else UserResult(user) for user in users
    ]
    return results, changed
