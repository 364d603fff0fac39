"""`moldau configs`: kafka-configs.sh (Kafka 4.1's ConfigCommand) with its flags,
checks and output, for topics, brokers and the brokers' defaults, users and
clients (quotas, and users' SCRAM credentials):

    moldau configs --bootstrap-server H:P --describe --topic t [--all]
    moldau configs --bootstrap-server H:P --alter --broker-defaults \\
        --add-config log.retention.ms=86400000 --delete-config log.segment.bytes
    moldau configs --bootstrap-server H:P --alter --user alice --client c1 \\
        --add-config producer_byte_rate=1048576
    moldau configs --bootstrap-server H:P --alter --user alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'

The flags and their checks are configs_args.py's; topics and brokers go through
configs_resources.py, quotas configs_quotas.py, SCRAM credentials configs_scram.py.
`--zookeeper HOST:PORT[/CHROOT]` instead of --bootstrap-server writes users' SCRAM
credentials to ZooKeeper directly, before any broker runs (configs_zookeeper.py),
and nothing else. (Kafka's broker-loggers, ips, client-metrics and groups are not
here: Moldau's broker keeps none of them.)
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from moldau.cli import configs_scram, configs_zookeeper
from moldau.cli.admin_call import tool_calls
from moldau.cli.common import add_admin_arguments, admin_client, fetch_metadata
from moldau.cli.configs_args import (
    BROKERS,
    CLIENTS,
    QUOTA_CONFIGS,
    SCRAM_CONFIGS,
    TOPICS,
    USERS,
    Entities,
    check_args,
    configs_to_add,
    configs_to_delete,
    scala_collection,
)
from moldau.cli.configs_quotas import Quotas
from moldau.cli.configs_resources import Resources
from moldau.cli.errors import CliError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "configs",
        help="describe or alter configs of topics, brokers, users and clients, as kafka-configs.sh",
        description="Describe or alter the configs of topics, brokers, the brokers' defaults, "
        "users and clients (quotas, SCRAM credentials), as kafka-configs.sh does.",
    )
    add_admin_arguments(
        p,
        {"alter": "alter the configuration of the entity",
         "describe": "list the configs of the given entity"},
        bootstrap_required=False,
    )  # fmt: skip
    p.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="write users' SCRAM credentials to ZooKeeper directly (before brokers start), "
        "as Kafka 3's kafka-configs.sh --zookeeper; nothing else",
    )
    p.add_argument("--all", action="store_true",
                   help="with --describe: every config of the entity, static ones too")  # fmt: skip
    p.add_argument("--entity-type", action="append", choices=None, metavar="TYPE",
                   help="topics, brokers, users or clients (users and clients together: "
                   "a user's clients)")  # fmt: skip
    p.add_argument("--entity-name", dest="entity_names", action="append", metavar="NAME",
                   help="the topic, broker id, user principal or client id")  # fmt: skip
    p.add_argument("--entity-default", dest="entity_names", action="append_const", const="",
                   help="the default entity of users, clients or brokers")  # fmt: skip
    for flag, what in (("topic", "the topic"), ("client", "the client id"),
                       ("user", "the user principal"), ("broker", "the broker id")):  # fmt: skip
        p.add_argument(f"--{flag}", help=f"{what} (the same as --entity-type and --entity-name)")
    for flag, what in (("client", "clients"), ("user", "users"), ("broker", "brokers")):
        p.add_argument(f"--{flag}-defaults", action="store_true",
                       help=f"the config defaults of all {what}")  # fmt: skip
    p.add_argument(
        "--add-config",
        metavar="CONFIGS",
        help="k1=v1,k2=[v1,v2],k3=v3 (brackets group values that contain commas)",
    )
    p.add_argument("--add-config-file", metavar="FILE",
                   help="a properties file of configs to add")  # fmt: skip
    p.add_argument("--delete-config", metavar="NAMES", help="config keys to remove: k1,k2")
    p.set_defaults(run=run)


def user_client_is_quota(found: Entities, added: Mapping[str, str], deleted: list[str]) -> bool:
    """Kafka's checks of what `--alter` may change on users and clients; whether it
    changes quotas (else SCRAM credentials)."""
    scram_added = [k for k in added if k in SCRAM_CONFIGS]
    unknown_added = [k for k in added if k not in SCRAM_CONFIGS and k not in QUOTA_CONFIGS]
    scram_deleted = [k for k in deleted if k in SCRAM_CONFIGS]
    unknown_deleted = [k for k in deleted if k not in SCRAM_CONFIGS and k not in QUOTA_CONFIGS]
    quota = any(k in QUOTA_CONFIGS for k in added) or any(k in QUOTA_CONFIGS for k in deleted)
    if found.head == CLIENTS or len(found.types) == 2:
        if unknown_added or scram_added:
            raise CliError(
                f"Only quota configs can be added for '{CLIENTS}' using --bootstrap-server. "
                f"Unexpected config names: {scala_collection('Set', unknown_added + scram_added)}"
            )
        if unknown_deleted or scram_deleted:
            names = [k for k in deleted if k not in QUOTA_CONFIGS]
            raise CliError(
                f"Only quota configs can be deleted for '{CLIENTS}' using --bootstrap-server. "
                f"Unexpected config names: {scala_collection('ArrayBuffer', names)}"
            )
        return True
    if unknown_added:
        raise CliError(
            f"Only quota and SCRAM credential configs can be added for '{USERS}' using "
            "--bootstrap-server. Unexpected config names: "
            f"{scala_collection('Set', unknown_added)}"
        )
    if unknown_deleted:
        raise CliError(
            f"Only quota and SCRAM credential configs can be deleted for '{USERS}' using "
            "--bootstrap-server. Unexpected config names: "
            f"{scala_collection('ArrayBuffer', unknown_deleted)}"
        )
    if scram_added or scram_deleted:
        if "" in found.names:
            raise CliError(
                "The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                "Credentials using --bootstrap-server."
            )
        if quota:
            raise CliError(
                f"Cannot alter both quota and SCRAM credential configs simultaneously for "
                f"'{USERS}' using --bootstrap-server."
            )
    return quota


def completed(found: Entities) -> str:
    name = found.names[0]
    if name:
        return f"Completed updating config for {found.head[:-1]} {name}."
    return f"Completed updating default config for {found.head} in the cluster."


def run(args: argparse.Namespace) -> int:
    found = check_args(args)
    added = configs_to_add(args)
    deleted = configs_to_delete(args)
    if args.zookeeper is not None:
        return _run_zookeeper(args, found, added)
    admin, watch = admin_client(args)
    md = fetch_metadata(admin, watch)
    brokers = {int(i): (b.host, int(b.port)) for i, b in md.brokers.items()}
    if not brokers:
        raise CliError(f"no brokers known at {args.bootstrap_server}")
    lines: list[str] = []
    with tool_calls(args, "configs-tool") as calls:
        if found.head in (TOPICS, BROKERS):
            resources = Resources(calls, brokers)
            if args.describe:
                lines = resources.describe(found, args.all, [str(t) for t in md.topics])
            else:
                resources.alter(found, added, deleted)
                lines = [completed(found)]
        else:
            quotas = Quotas(calls, brokers[min(brokers)])
            if args.describe:
                lines = quotas.describe_lines(found.quota_pairs)
                # Credentials are users', and no default user has any.
                if CLIENTS not in found.types and "" not in found.names:
                    lines += configs_scram.describe(admin, watch, list(found.names))
            elif user_client_is_quota(found, added, deleted):
                pairs = [(t, n) for t, n in zip(found.types, found.names, strict=True)]
                quotas.alter(pairs, added, deleted)
                lines = [completed(found)]
            else:
                configs_scram.alter(admin, watch, found.names[0], added, deleted)
                lines = [completed(found)]
    for line in lines:
        print(line)
    return 0


def _run_zookeeper(args: argparse.Namespace, found: Entities, added: dict[str, str]) -> int:
    others = [k for k in added if k not in SCRAM_CONFIGS]
    others += [k for k in configs_to_delete(args) if k not in SCRAM_CONFIGS]
    if others:
        raise CliError(
            "User configuration updates using ZooKeeper are only supported for SCRAM "
            f"credential updates; use --bootstrap-server for {','.join(others)}"
        )
    return configs_zookeeper.run(args, found.name, configs_scram.scram_entries(added))
