"""`moldau configs --zookeeper`: users' SCRAM credentials written to and read from
/config/users in ZooKeeper directly, as Kafka 3.x's kafka-configs.sh --zookeeper
does, so that they exist before any broker starts (brokers that log in to each
other with SCRAM need theirs from the first connection):

    moldau configs --zookeeper localhost:2181/kafka --alter --entity-type users \\
        --entity-name admin --add-config 'SCRAM-SHA-512=[password=admin-secret]'

Only SCRAM credentials, as Kafka allows over ZooKeeper; running brokers learn the
change from the config change notification written with it."""

from __future__ import annotations

import argparse
import asyncio

from moldau.cli.errors import CliError
from moldau.metadata.client import MetadataClient
from moldau.metadata.store import StoreError
from moldau.metadata.zookeeper import ZooKeeperStore
from moldau.security.credentials import MIN_ITERATIONS, ScramMechanism, new_credential

_DEPRECATED = (
    "Warning: --zookeeper is deprecated and will be removed in a future version of Kafka.\n"
    "Use --bootstrap-server instead to specify a broker to connect to."
)


def _mechanism(name: str) -> ScramMechanism:
    mech = ScramMechanism.by_name(name)
    if mech is None:
        raise CliError(
            "User configuration updates using ZooKeeper are only supported for SCRAM "
            f"credential updates ({name} is not a SCRAM mechanism)"
        )
    return mech


def updated(
    current: dict[str, str], added: list[tuple[str, int, str]], deleted: list[str]
) -> dict[str, str]:
    """The user's new /config/users entry: `added` (mechanism, iterations, password)
    as fresh credentials, `deleted` mechanisms removed (each must be there)."""
    missing = [name for name in deleted if name not in current]
    if missing:
        raise CliError(f"Invalid config(s): {','.join(missing)}")
    config = dict(current)
    for name, iterations, password in added:
        if iterations < MIN_ITERATIONS:
            raise CliError(f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS}")
        config[name] = new_credential(_mechanism(name), password, iterations).to_string()
    for name in deleted:
        _mechanism(name)
        config.pop(name)
    return config


def run(args: argparse.Namespace, user: str | None, added: list[tuple[str, int, str]]) -> int:
    """`added`: --add-config's entries (mechanism name, iterations, password)."""
    print(_DEPRECATED)
    deleted = [n.strip() for n in (args.delete_config or "").split(",") if n.strip()]

    async def work() -> list[str]:
        store = ZooKeeperStore(args.zookeeper)
        await store.start()
        try:
            client = MetadataClient(store)
            if args.describe:
                users = [user] if user is not None else await client.get_config_users()
                return [
                    f"Configs for user-principal '{u}' are "
                    + ",".join(f"{k}={v}" for k, v in (await client.get_user_config(u)).items())
                    for u in users
                ]
            assert user is not None
            await client.create_top_level_paths()
            new = updated(await client.get_user_config(user), added, deleted)
            await client.set_user_config(user, new)
            return [f"Completed updating config for entity: user-principal '{user}'."]
        finally:
            await store.close()

    try:
        lines = asyncio.run(work())
    except StoreError as e:
        raise CliError(f"ZooKeeper {args.zookeeper}: {e}") from None
    for line in lines:
        print(line)
    return 0
