"""`moldau configs` for users' SCRAM credentials, through confluent-kafka's
AdminClient (Alter/DescribeUserScramCredentials), as kafka-configs.sh:

    moldau configs --bootstrap-server H:P --alter --user alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'

prints "Completed updating config for user alice."; --describe prints
"SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

# Exported by confluent_kafka.admin, though its stubs do not say so.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from moldau.cli.common import BrokerWatch, error_text, kafka_error, wait_result
from moldau.cli.errors import CliError

#: kafka-configs' default when --add-config names no iterations.
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096
_MECHANISMS = {m.name.replace("_", "-"): m for m in (ScramMechanism.SCRAM_SHA_256,
                                                     ScramMechanism.SCRAM_SHA_512)}  # fmt: skip
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.S)


def scram_entries(added: Mapping[str, str]) -> list[tuple[str, int, str]]:
    """(mechanism, iterations, password) of each SCRAM entry of --add-config, whose
    value (brackets gone) reads `iterations=8192,password=secret`."""
    out = []
    for name, value in added.items():
        if name not in _MECHANISMS:
            continue
        m = _CREDENTIAL.fullmatch(value)
        if m is None:
            raise CliError(f"Invalid credential property {name.replace('-', '_')}={value}")
        given = m.group(1)
        iterations = int(given) if given and given != "-1" else DEFAULT_ITERATIONS
        if iterations < MIN_ITERATIONS:
            raise CliError(
                f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} "
                f"required for {name}"
            )
        out.append((name, iterations, m.group(2)))
    return out


def _fail(e: KafkaException) -> CliError:
    err = kafka_error(e)
    return CliError(error_text(err) if err is not None else str(e))


def describe(admin: Any, watch: BrokerWatch, users: list[str]) -> list[str]:
    """The credential lines of these users (all users when none is named)."""
    try:
        if not users:
            found = wait_result(admin, watch, admin.describe_user_scram_credentials(),
                                "the credentials")  # fmt: skip
        else:
            found = {}
            for user, future in admin.describe_user_scram_credentials(users).items():
                try:
                    found[user] = wait_result(admin, watch, future, "the credentials")
                except KafkaException as e:
                    err = kafka_error(e)
                    if err is None or err.code() != KafkaError.RESOURCE_NOT_FOUND:
                        raise
                    # kafka-configs prints nothing for a user without any
    except KafkaException as e:
        raise _fail(e) from None
    lines = []
    for name, description in sorted(found.items()):
        infos = ", ".join(
            f"{i.mechanism.name.replace('_', '-')}=iterations={i.iterations}"
            for i in description.scram_credential_infos
        )
        lines.append(f"SCRAM credential configs for user-principal '{name}' are {infos}")
    return lines


def alter(admin: Any, watch: BrokerWatch, user: str, added: Mapping[str, str],
          deleted: list[str]) -> None:  # fmt: skip
    alterations: list[Any] = [
        UserScramCredentialUpsertion(
            user, ScramCredentialInfo(_MECHANISMS[mech], iterations), password.encode()
        )
        for mech, iterations, password in scram_entries(added)
    ]
    alterations += [UserScramCredentialDeletion(user, _MECHANISMS[name]) for name in deleted]
    try:
        futures = admin.alter_user_scram_credentials(alterations)
        wait_result(admin, watch, futures[user], "the change")
    except KafkaException as e:
        raise _fail(e) from None
