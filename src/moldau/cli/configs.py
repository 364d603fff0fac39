"""`moldau configs`: the users part of kafka-configs.sh, SCRAM credentials through
confluent-kafka's AdminClient (Alter/DescribeUserScramCredentials):

    moldau configs --bootstrap-server H:P --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    moldau configs --bootstrap-server H:P --alter --entity-type users --entity-name alice \\
        --delete-config SCRAM-SHA-256
    moldau configs --bootstrap-server H:P --describe --entity-type users [--entity-name alice]

with kafka-configs' output ("Completed updating config for user alice.", "SCRAM
credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192").
`--zookeeper HOST:PORT[/CHROOT]` instead of --bootstrap-server writes them to
ZooKeeper directly, before any broker runs (configs_zookeeper.py).
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from confluent_kafka import KafkaError, KafkaException

# Exported by confluent_kafka.admin, though its stubs do not say so.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from moldau.cli import configs_zookeeper
from moldau.cli.common import (
    add_bootstrap_argument,
    add_command_config_argument,
    admin_client,
    error_text,
    kafka_error,
    wait_result,
)
from moldau.cli.errors import CliError

# kafka-configs' default when --add-config names no iterations.
DEFAULT_ITERATIONS = 4096
_MECHANISMS = {m.name.replace("_", "-"): m for m in (ScramMechanism.SCRAM_SHA_256,
                                                     ScramMechanism.SCRAM_SHA_512)}  # fmt: skip
# name=[k=v,...] or name=value, comma-separated (Kafka's bracketed config values).
_ENTRY = re.compile(r"\s*([^=,\[\]]+)=(\[[^\]]*\]|[^,\[\]]*)\s*(?:,|$)")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "configs",
        help="SCRAM credentials of users, as kafka-configs.sh --entity-type users",
        description="Add, delete or describe users' SCRAM credentials, as kafka-configs.sh.",
    )
    add_bootstrap_argument(p, required=False)
    p.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="write SCRAM credentials to ZooKeeper directly (before brokers start), "
        "as kafka-configs.sh --zookeeper",
    )
    add_command_config_argument(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="add or delete configs")
    action.add_argument("--describe", action="store_true", help="show configs")
    p.add_argument("--entity-type", help="users (the only type here)")
    p.add_argument("--entity-name", help="the user")
    p.add_argument("--user", help="the same as --entity-type users --entity-name USER")
    p.add_argument(
        "--add-config",
        metavar="CONFIGS",
        help="SCRAM-SHA-256=[iterations=8192,password=secret],SCRAM-SHA-512=[password=...]",
    )
    p.add_argument("--delete-config", metavar="NAMES", help="SCRAM-SHA-256,SCRAM-SHA-512")
    p.set_defaults(run=run)


def parse_add_config(text: str) -> list[tuple[Any, int, str]]:
    """(mechanism, iterations, password) of each SCRAM entry of --add-config."""
    out = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _ENTRY.match(text, pos)
        if m is None or m.end() == pos:
            raise CliError(f"--add-config: cannot parse {text[pos:]!r} (expected NAME=[k=v,...])")
        pos = m.end()
        name, value = m.group(1).strip(), m.group(2).strip()
        mech = _MECHANISMS.get(name)
        if mech is None:
            raise CliError(
                f"--add-config: {name} is not supported here; the users' configs are "
                f"{', '.join(_MECHANISMS)}"
            )
        fields: dict[str, str] = {}
        for item in value.strip("[]").split(","):
            key, sep, val = item.partition("=")
            if not sep:
                raise CliError(f"--add-config {name}: expected k=v, got {item!r}")
            fields[key.strip()] = val
        unknown = set(fields) - {"iterations", "password"}
        if unknown or "password" not in fields:
            raise CliError(f"--add-config {name}: give password= and optionally iterations=")
        try:
            iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        except ValueError:
            raise CliError(f"--add-config {name}: iterations must be a number") from None
        out.append((mech, iterations, fields["password"]))
    return out


def _user(args: argparse.Namespace) -> str | None:
    if args.user is not None:
        if args.entity_name is not None or args.entity_type not in (None, "users"):
            raise CliError("--user cannot be used with --entity-type/--entity-name")
        return str(args.user)
    if args.entity_type != "users":
        raise CliError("--entity-type users is the only entity type here (SCRAM credentials)")
    return args.entity_name  # type: ignore[no-any-return]


def _fail(e: KafkaException) -> CliError:
    err = kafka_error(e)
    return CliError(error_text(err) if err is not None else str(e))


def run(args: argparse.Namespace) -> int:
    if (args.bootstrap_server is None) == (args.zookeeper is None):
        raise CliError("Exactly one of --bootstrap-server and --zookeeper must be specified")
    user = _user(args)
    if args.describe and (args.add_config or args.delete_config):
        raise CliError("--add-config and --delete-config go with --alter")
    if args.alter and user is None:
        raise CliError("--alter needs --entity-name (the user)")
    if args.alter and not args.add_config and not args.delete_config:
        raise CliError("--alter needs --add-config or --delete-config")
    if args.zookeeper is not None:
        added = [
            (mech.name.replace("_", "-"), iterations, password)
            for mech, iterations, password in parse_add_config(args.add_config or "")
        ]
        return configs_zookeeper.run(args, user, added)
    admin, watch = admin_client(args)
    if args.describe:
        try:
            if user is None:
                found = wait_result(admin, watch, admin.describe_user_scram_credentials(),
                                    "the credentials")  # fmt: skip
            else:
                future = admin.describe_user_scram_credentials([user])[user]
                try:
                    found = {user: wait_result(admin, watch, future, "the credentials")}
                except KafkaException as e:
                    err = kafka_error(e)
                    if err is not None and err.code() == KafkaError.RESOURCE_NOT_FOUND:
                        return 0  # kafka-configs prints nothing for a user without any
                    raise
        except KafkaException as e:
            raise _fail(e) from None
        for name, description in sorted(found.items()):
            infos = ", ".join(
                f"{i.mechanism.name.replace('_', '-')}=iterations={i.iterations}"
                for i in description.scram_credential_infos
            )
            print(f"SCRAM credential configs for user-principal '{name}' are {infos}")
        return 0
    assert user is not None  # checked above
    alterations: list[Any] = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, iterations), pw.encode())
        for mech, iterations, pw in parse_add_config(args.add_config or "")
    ]
    for name in (args.delete_config or "").split(","):
        if name.strip():
            mech = _MECHANISMS.get(name.strip())
            if mech is None:
                raise CliError(f"--delete-config: {name.strip()} is not supported here")
            alterations.append(UserScramCredentialDeletion(user, mech))
    try:
        futures = admin.alter_user_scram_credentials(alterations)
        wait_result(admin, watch, futures[user], "the change")
    except KafkaException as e:
        raise _fail(e) from None
    print(f"Completed updating config for user {user}.")
    return 0
