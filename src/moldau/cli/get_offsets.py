"""`moldau get-offsets`: the offsets of partitions at a point in time, as
kafka-get-offsets.sh (GetOffsetShell) prints them, one `topic:partition:offset` a line:

    orders:0:1042
    orders:1:998

Partitions are chosen by `--topic` (a regular expression) and `--partitions`, or by
`--topic-partitions` rules such as `orders:0-3,audit.*`; `--time` is -1 (latest, the
default), -2 (earliest), -3 (the record of the largest timestamp), -4 (earliest local),
-5 (latest tiered) or a timestamp in ms. A partition that has no offset for the time
(a timestamp past its last record, -5 with nothing tiered) prints no line, as Kafka's
tool; one whose leader answered an error is skipped with a line on stderr (after asking
again, while the error is a moved or missing leader: cli/leader_requests.py).

ListOffsets goes on the wire (cli/admin_call.py) because confluent-kafka has no
earliest-local or latest-tiered; Metadata comes through librdkafka.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from moldau.cli.admin_call import Address, AdminCalls, tool_calls
from moldau.cli.common import (
    TIMEOUT_S,
    add_bootstrap_argument,
    add_command_config_argument,
    admin_client,
    fetch_metadata,
)
from moldau.cli.errors import CliError
from moldau.cli.leader_requests import Answer, Partition, ask_leaders, error_answer
from moldau.cli.topics import INTERNAL_TOPICS
from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode

#: v9: the first that takes -5 (latest tiered); Moldau and Kafka 3.9+ serve it.
LIST_OFFSETS_VERSION = 9
#: The offset a broker answers for a time no record matches.
UNKNOWN_OFFSET = -1

_NAMED_TIMES = {
    "latest": -1,
    "earliest": -2,
    "max-timestamp": -3,
    "earliest-local": -4,
    "latest-tiered": -5,
}
# Kafka's rule syntax: TOPIC_REGEX(:N | :N-M | :N- | :-M)?, M exclusive.
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
_NO_UPPER = 2**31 - 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "get-offsets",
        help="print the offsets of partitions at a time, as kafka-get-offsets.sh",
        description="Print topic:partition:offset for each chosen partition, as "
        "kafka-get-offsets.sh does.",
    )
    add_bootstrap_argument(p)
    add_command_config_argument(p)
    p.add_argument(
        "--topic",
        help="the topic(s), a regular expression (default: all); not with --topic-partitions",
    )
    p.add_argument(
        "--partitions",
        metavar="IDS",
        help="comma-separated partition ids (default: all); not with --topic-partitions",
    )
    p.add_argument(
        "--topic-partitions",
        metavar="RULES",
        help="comma-separated rules TOPIC_REGEX:PARTITIONS, PARTITIONS being N, N-M "
        "(M exclusive), N- or -M, or left out for all: topic1:1,topic2:0-3,topic3",
    )
    p.add_argument(
        "--time",
        default="latest",
        help="-1 or latest (default), -2 or earliest, -3 or max-timestamp, "
        "-4 or earliest-local, -5 or latest-tiered, or a timestamp in ms",
    )
    p.add_argument(
        "--exclude-internal-topics",
        action="store_true",
        help="leave out internal topics (included by default)",
    )
    p.set_defaults(run=run)


def parse_time(text: str) -> int:
    """`--time` as the timestamp ListOffsets takes (-1..-5 name the special points)."""
    if text in _NAMED_TIMES:
        return _NAMED_TIMES[text]
    try:
        return int(text)
    except ValueError:
        raise CliError(
            f"malformed --time {text!r}: use -1 or latest, -2 or earliest, -3 or "
            "max-timestamp, -4 or earliest-local, -5 or latest-tiered, or a timestamp in ms"
        ) from None


@dataclass(frozen=True)
class Rule:
    """Partitions `low <= p < high` of the topics whose whole name `topic` matches."""

    topic: re.Pattern[str]
    low: int = 0
    high: int = _NO_UPPER

    def takes_topic(self, name: str) -> bool:
        return self.topic.fullmatch(name) is not None

    def takes(self, name: str, partition: int) -> bool:
        return self.takes_topic(name) and self.low <= partition < self.high


def _include_list(pattern: str, flag: str) -> re.Pattern[str]:
    # Kafka's include list: `,` separates alternatives, surrounding quotes dropped.
    text = pattern.strip().replace(",", "|").strip("\"'")
    try:
        return re.compile(text)
    except re.error as e:
        raise CliError(f"{flag} {pattern!r} is not a valid regular expression: {e}") from None


def parse_rules(
    topic: str | None, partitions: str | None, topic_partitions: str | None
) -> list[Rule]:
    """The partitions asked for, as rules any one of which takes a partition."""
    if topic_partitions is not None:
        if topic is not None or partitions is not None:
            raise CliError("--topic-partitions cannot be used with --topic or --partitions")
        return [_parse_rule(spec) for spec in topic_partitions.split(",")]
    regex = _include_list(topic if topic is not None else ".*", "--topic")
    if not partitions:
        return [Rule(regex)]
    try:
        ids = sorted({int(p) for p in partitions.split(",")})
    except ValueError:
        raise CliError(
            "--partitions expects a comma-separated list of numeric partition ids, "
            f"got {partitions!r}"
        ) from None
    return [Rule(regex, p, p + 1) for p in ids]


def _parse_rule(spec: str) -> Rule:
    m = _RULE.fullmatch(spec)
    if m is None:
        raise CliError(f"invalid --topic-partitions rule {spec!r}")
    topic = _include_list(m[1] or ".*", "--topic-partitions")
    if m[2]:
        return Rule(topic, int(m[2]), int(m[2]) + 1)
    return Rule(topic, int(m[3] or 0), int(m[4]) if m[4] else _NO_UPPER)


def chosen_partitions(
    topics: Mapping[str, Iterable[int]], rules: list[Rule], exclude_internal: bool
) -> list[tuple[str, int]]:
    """The (topic, partition)s of `topics` some rule takes, in Kafka's output order
    (by the text `topic-partition`, so `t-10` comes before `t-2`)."""
    chosen = [
        (name, p)
        for name, parts in topics.items()
        if not (exclude_internal and name in INTERNAL_TOPICS)
        for p in parts
        if any(r.takes(name, p) for r in rules)
    ]
    return sorted(chosen, key=lambda tp: f"{tp[0]}-{tp[1]}")


def run(args: argparse.Namespace) -> int:
    timestamp = parse_time(args.time)
    rules = parse_rules(args.topic, args.partitions, args.topic_partitions)
    admin, watch = admin_client(args)
    md = fetch_metadata(admin, watch)
    topics = {name: list(t.partitions) for name, t in md.topics.items() if t.error is None}
    chosen = chosen_partitions(topics, rules, args.exclude_internal_topics)
    if not chosen:
        raise CliError("could not match any topic-partitions with the specified filters")
    with tool_calls(args, "GetOffsetShell") as calls:
        answers = ask_leaders(
            lambda: fetch_metadata(admin, watch),
            functools.partial(_list_offsets, calls, timestamp),
            chosen,
            TIMEOUT_S,
            known=md,
        )
    for name, p in chosen:
        answer = answers[(name, p)]
        if answer.error is not None:
            # As Kafka's tool: the partition is left out, with a line on stderr.
            print(
                f"Skip getting offsets for topic-partition {name}-{p} due to error: {answer.error}",
                file=sys.stderr,
            )
        elif answer.value != UNKNOWN_OFFSET:
            print(f"{name}:{p}:{answer.value}")
    return 0


def _list_offsets(
    calls: AdminCalls, timestamp: int, address: Address, partitions: list[Partition]
) -> dict[Partition, Answer]:
    """One ListOffsets to one leader for some of its partitions."""
    request = list_offsets_fields(timestamp, partitions)
    response = calls.call(address, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, request)
    return list_offsets_answers(response)


def list_offsets_fields(
    timestamp: int, partitions: Iterable[Partition], replica_id: int = -1
) -> dict[str, Any]:
    """ListOffsets' request for `partitions` at `timestamp` (or -1 latest, -2
    earliest). `replica_id` -2 is Kafka's debugging replica, which a follower
    answers too (with its own offsets) where a consumer (-1) is sent to the leader."""
    grouped: dict[str, list[int]] = {}
    for name, p in partitions:
        grouped.setdefault(name, []).append(p)
    return {
        "replica_id": replica_id,
        "isolation_level": 0,
        "topics": [
            {
                "name": name,
                "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                    for p in ps
                ],
            }
            for name, ps in grouped.items()
        ],
    }


def list_offsets_answers(response: Any) -> dict[Partition, Answer]:
    """ListOffsets' answer per partition: an offset or an error."""
    return {
        (t.name, int(d.partition_index)): (
            error_answer(d.error_code) if d.error_code != ErrorCode.none else Answer(int(d.offset))
        )
        for t in response.topics
        for d in t.partitions
    }
