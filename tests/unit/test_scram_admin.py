"""Describe/AlterUserScramCredentials' checks and results (Kafka's errors)."""

from __future__ import annotations

from moldau.protocol.errors import ErrorCode
from moldau.security.credentials import (
    CredentialCache,
    ScramCredential,
    ScramMechanism,
    credential_from_salted,
    new_credential,
    salted_password,
)
from moldau.security.scram import ScramServer
from moldau.security.scram_admin import Deletion, Upsertion, UserResult, alter, describe

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def upsert(user: str, mech: ScramMechanism = SHA256, iterations: int = 8192) -> Upsertion:
    salt = b"salt-" + user.encode()
    return Upsertion(user, mech.type_id, iterations, salt,
                     salted_password(mech, f"{user}-pw", salt, iterations))  # fmt: skip


def test_upsert_stores_a_credential_a_login_accepts() -> None:
    results, changed = alter([], [upsert("alice")], {})
    assert results == [UserResult("alice")]
    stored = ScramCredential.from_string(changed["alice"]["SCRAM-SHA-256"])
    assert stored.iterations == 8192 and stored.salt == b"salt-alice"
    # The same credential as one made from the password: the salted password given
    # by the client is what the server derives its keys from.
    assert stored == new_credential(SHA256, "alice-pw", 8192, b"salt-alice")
    cache = CredentialCache()
    cache.update_user("alice", changed["alice"])
    assert ScramServer(SHA256, cache).evaluate(b"n,,n=alice,r=x").startswith(b"r=x")


def test_upsert_keeps_the_users_other_keys() -> None:
    old = {"SCRAM-SHA-512": new_credential(SHA512, "x", 4096).to_string(), "quota": "1"}
    _, changed = alter([], [upsert("alice")], {"alice": old})
    assert set(changed["alice"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512", "quota"}


def test_kafkas_errors() -> None:
    existing = {"carol": {"SCRAM-SHA-256": new_credential(SHA256, "c", 4096).to_string()}}
    results, changed = alter(
        [Deletion("dave", SHA256.type_id), Deletion("carol", SHA256.type_id)],
        [
            upsert("few", iterations=4095),
            upsert("many", iterations=16385),
            Upsertion("unknown", 0, 8192, b"s", b"p"),
            Upsertion("", SHA256.type_id, 8192, b"s", b"p"),
            upsert("twice"),
            upsert("twice"),
            upsert("ok", SHA512, 4096),
        ],
        existing,
    )
    by_user = {r.user: (r.error, r.message) for r in results}
    assert by_user == {
        "dave": (ErrorCode.resource_not_found,
                 "Attempt to delete a user credential that does not exist"),
        "carol": (ErrorCode.none, None),
        "few": (ErrorCode.unacceptable_credential, "Too few iterations"),
        "many": (ErrorCode.unacceptable_credential, "Too many iterations"),
        "unknown": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        "twice": (ErrorCode.duplicate_resource,
                  "A user credential cannot be altered twice in the same request"),
        "ok": (ErrorCode.none, None),
    }  # fmt: skip
    assert set(changed) == {"carol", "ok"}
    assert changed["carol"] == {}


def test_a_user_with_one_bad_alteration_is_not_changed() -> None:
    results, changed = alter([], [upsert("alice"), upsert("alice", SHA512, 100)], {})
    assert results[0].error == ErrorCode.unacceptable_credential
    assert changed == {}


def test_describe() -> None:
    configs = {
        "alice": {
            "SCRAM-SHA-512": credential_from_salted(SHA512, b"k", b"s", 4096).to_string(),
            "SCRAM-SHA-256": credential_from_salted(SHA256, b"k", b"s", 8192).to_string(),
        },
        "quota-only": {"producer_byte_rate": "10"},
    }
    alice = UserResult("alice", credentials=((1, 8192), (2, 4096)))
    assert describe(None, configs) == [alice]
    assert describe([], configs) == [alice]
    results = describe(["alice", "bob", "quota-only", "dup", "dup"], configs)
    assert results[0] == alice
    assert [(r.user, r.error) for r in results[1:]] == [
        ("bob", ErrorCode.resource_not_found),
        ("quota-only", ErrorCode.resource_not_found),
        ("dup", ErrorCode.duplicate_resource),
    ]
