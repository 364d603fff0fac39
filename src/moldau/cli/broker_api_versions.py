"""`moldau broker-api-versions`: the API versions each broker of a cluster serves,
one block per broker as kafka-broker-api-versions.sh (BrokerApiVersionsCommand)
prints them:

    localhost:9092 (id: 1 rack: null isFenced: false) -> (
        Produce(0): 0 to 11 [usable: 11],
        ...
        ListTransactions(66): 0 to 1 [usable: 1]
    )

(each API line starts with a tab). "usable" is the newest version both the broker
and this tool (Moldau's own table) speak; an API this tool knows and the broker does
not advertise is UNSUPPORTED. The brokers come from DescribeCluster; ApiVersions goes on the wire
(cli/admin_call.py). A broker that does not answer prints `-> ERROR: <reason>`.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaException
from kio.schema.index import api_key_map

from moldau import __version__
from moldau.cli.admin_call import CallError, tool_calls
from moldau.cli.common import (
    add_bootstrap_argument,
    add_command_config_argument,
    admin_client,
    error_text,
    kafka_error,
    wait_result,
)
from moldau.cli.errors import CliError
from moldau.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from moldau.protocol.errors import ErrorCode

API_VERSIONS_VERSION = 3
# Requests of the ZooKeeper-era controller and AlterPartition go between brokers only:
# a client does not miss them (Kafka's tool lists only the APIs clients send).
_BROKER_ONLY = frozenset(
    {
        ApiKey.LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.ALTER_PARTITION,
    }
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "broker-api-versions",
        help="list the API versions each broker serves, as kafka-broker-api-versions.sh",
        description="List the API versions each broker of the cluster serves, as "
        "kafka-broker-api-versions.sh does.",
    )
    add_bootstrap_argument(p)
    add_command_config_argument(p)
    p.set_defaults(run=run)


def api_name(api_key: int) -> str:
    """Kafka's name of an API (`ListOffsets`); `UNKNOWN` for a key neither kio's
    schemas nor Moldau know, as Kafka's tool prints a key it does not know."""
    snake = api_key_map.get(api_key)
    if snake is None and api_key in ApiKey.__members__.values():
        snake = ApiKey(api_key).name.lower()
    if snake is None:
        return "UNKNOWN"
    return "".join(word.capitalize() for word in snake.split("_"))


def version_lines(advertised: dict[int, tuple[int, int]]) -> list[str]:
    """One line per API, by key: the broker's range and the version this tool would use."""
    lines: dict[int, str] = {}
    for key, (low, high) in advertised.items():
        text = f"{api_name(key)}({key}): " + (f"{low}" if low == high else f"{low} to {high}")
        ours = SUPPORTED_VERSIONS.get(key)  # type: ignore[call-overload]
        if ours is not None:
            if ours[1] < low:
                text += " [unusable: node too new]"
            elif high < ours[0]:
                text += " [unusable: node too old]"
            else:
                text += f" [usable: {min(ours[1], high)}]"
        lines[key] = text
    for key in SUPPORTED_VERSIONS:
        if key not in lines and key not in _BROKER_ONLY:
            lines[int(key)] = f"{api_name(key)}({int(key)}): UNSUPPORTED"
    return [lines[k] for k in sorted(lines)]


def block(node: str, lines: list[str]) -> str:
    """A broker's block as Kafka's tool prints it."""
    return f"{node} -> (\n\t" + ",\n\t".join(lines) + "\n)"


def run(args: argparse.Namespace) -> int:
    admin, watch = admin_client(args)
    try:
        cluster = wait_result(admin, watch, admin.describe_cluster(), "the cluster's brokers")
    except KafkaException as e:
        err = kafka_error(e)
        raise CliError(error_text(err) if err is not None else str(e)) from None
    request = {"client_software_name": "moldau", "client_software_version": __version__}
    with tool_calls(args, "broker-api-versions-tool") as calls:
        for node in sorted(cluster.nodes, key=lambda n: int(n.id)):
            rack = node.rack if node.rack else "null"
            name = f"{node.host}:{node.port} (id: {node.id} rack: {rack} isFenced: false)"
            try:
                response = calls.call(
                    (node.host, node.port), ApiKey.API_VERSIONS, API_VERSIONS_VERSION, request
                )
            except CallError as e:
                print(f"{name} -> ERROR: {e.reason}")
                continue
            if response.error_code != ErrorCode.none:
                print(f"{name} -> ERROR: {ErrorCode(response.error_code).name.upper()}")
                continue
            advertised = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
            }
            print(block(name, version_lines(advertised)))
    return 0
