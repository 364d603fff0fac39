"""`moldau log-dirs --describe`: each broker's log directories and the replicas in
them, as kafka-log-dirs.sh (LogDirsCommand) prints them: two lines, then one line of
JSON a script can read:

    Querying brokers for log directories information
    Received log directory information from brokers 1,2
    {"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"t-0","size":120,
    "offsetLag":0,"isFuture":false}],"error":null,"logDir":"/var/lib/moldau"}]}],"version":1}

(on one line; keys in the order Kafka's tool writes them). `--topic-list` keeps the
replicas of those topics, `--broker-list` asks those brokers only. DescribeLogDirs
(35) goes on the wire to each broker (cli/admin_call.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from typing import Any

from moldau.cli.admin_call import CallError, tool_calls
from moldau.cli.common import (
    add_bootstrap_argument,
    add_command_config_argument,
    cluster_metadata,
)
from moldau.cli.errors import CliError
from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode

DESCRIBE_LOG_DIRS_VERSION = 4  # the newest both Moldau and Kafka 4.x serve

# What Kafka's tool prints for a log dir's error: the Java exception's class.
_EXCEPTIONS = {
    ErrorCode.kafka_storage_error: "org.apache.kafka.common.errors.KafkaStorageException",
    ErrorCode.unknown_server_error: "org.apache.kafka.common.errors.UnknownServerException",
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "log-dirs",
        help="describe the brokers' log directories, as kafka-log-dirs.sh",
        description="Describe the log directories of brokers and the replicas in them, "
        "as kafka-log-dirs.sh does.",
    )
    add_bootstrap_argument(p)
    add_command_config_argument(p)
    p.add_argument("--describe", action="store_true", help="describe the log directories")
    p.add_argument(
        "--topic-list",
        default="",
        metavar="T1,T2",
        help="the topics whose replicas to show (default: all)",
    )
    p.add_argument(
        "--broker-list",
        default="",
        metavar="0,1,2",
        help="the brokers to ask (default: every broker of the cluster)",
    )
    p.set_defaults(run=run)


def _split(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def parse_brokers(text: str) -> set[int]:
    try:
        return {int(b) for b in _split(text)}
    except ValueError:
        raise CliError(f"--broker-list expects broker ids like 0,1,2, got {text!r}") from None


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in sorted(ids))


def run(args: argparse.Namespace) -> int:
    if not args.describe:
        raise CliError("--describe is required")
    topics = set(_split(args.topic_list))
    asked = parse_brokers(args.broker_list)
    md = cluster_metadata(args)
    cluster = set(md.brokers)
    missing = asked - cluster
    if missing:
        raise CliError(
            f"the given brokers do not exist from --broker-list: {_ids(missing)}. "
            f"Current existent brokers: {_ids(cluster)}"
        )
    brokers = sorted(asked or cluster)
    print("Querying brokers for log directories information")
    described = []
    with tool_calls(args, "log-dirs-tool") as calls:
        for broker_id in brokers:
            broker = md.brokers[broker_id]
            try:
                response = calls.call(
                    (broker.host, broker.port),
                    ApiKey.DESCRIBE_LOG_DIRS,
                    DESCRIBE_LOG_DIRS_VERSION,
                    {"topics": None},
                )
            except CallError as e:
                raise CliError(f"cannot reach broker {broker_id}: {e.reason}") from None
            if response.error_code != ErrorCode.none:
                raise CliError(f"broker {broker_id}: {ErrorCode(response.error_code).name.upper()}")
            described.append({"broker": broker_id, "logDirs": log_dirs(response, topics)})
    print(f"Received log directory information from brokers {_ids(brokers)}")
    print(json.dumps({"brokers": described, "version": 1}, separators=(",", ":")))
    return 0


def log_dirs(response: Any, topics: set[str]) -> list[dict[str, Any]]:
    """A DescribeLogDirs response as Kafka's tool prints it, keeping the replicas of
    `topics` (all when empty)."""
    dirs = []
    for result in response.results:
        partitions = [
            {
                "partition": f"{t.name}-{p.partition_index}",
                "size": int(p.partition_size),
                "offsetLag": int(p.offset_lag),
                "isFuture": bool(p.is_future_key),
            }
            for t in sorted(result.topics, key=lambda t: str(t.name))
            if not topics or t.name in topics
            for p in sorted(t.partitions, key=lambda p: int(p.partition_index))
        ]
        code = ErrorCode(result.error_code)
        error = None if code == ErrorCode.none else _EXCEPTIONS.get(code, code.name.upper())
        dirs.append({"partitions": partitions, "error": error, "logDir": result.log_dir})
    return dirs
