"""Consumer groups for the console: the list with each group's lag, one group's
members and offsets, resetting and deleting offsets, deleting a group.

What `moldau groups` computes is reused, not written again: its GroupCommand
describes groups, reads offsets and plans resets (cli/groups.py); here it runs on
the console's AdminClient and its notes are kept for the page instead of printed.
The functions are blocking (librdkafka's calls): the routes run them with
`ClusterClient.run`.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from moldau.cli.common import (
    TIMEOUT_S,
    BrokerWatch,
    fetch_metadata,
    kafka_error,
    wait_result,
)
from moldau.cli.errors import CliError
from moldau.cli.groups import (
    LATEST,
    SCENARIOS,
    GroupCommand,
    Partition,
    parse_topic_partitions,
    reset_refusal,
    state_name,
)
from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode
from moldau.ui.json import kafka_message

if TYPE_CHECKING:
    from moldau.ui.cluster import ClusterClient

#: The reset choices by the CLI's flag names (without --), and whether each takes a value.
RESET_CHOICES: dict[str, bool] = {
    "to-earliest": False,
    "to-latest": False,
    "to-current": False,
    "to-offset": True,
    "shift-by": True,
    "to-datetime": True,
    "by-duration": True,
}


class GroupNotFound(CliError):
    """The group does not exist (Kafka's GROUP_ID_NOT_FOUND)."""

    def __init__(self, group: str) -> None:
        super().__init__(f"GROUP_ID_NOT_FOUND: Consumer group '{group}' does not exist.")


class ConsoleGroups(GroupCommand):
    """`moldau groups`' service on the console's AdminClient; what the CLI would
    print as warnings or failures is kept in `notes` for the page."""

    def __init__(self, admin: Any, bootstrap: str, args: argparse.Namespace | None = None) -> None:
        # The console's AdminClient reports no errors to a watch: its waits end by
        # their own timeouts.
        super().__init__(args or argparse.Namespace(), (admin, BrokerWatch(bootstrap)))
        self.notes: list[str] = []

    def warn(self, message: str) -> None:
        self.notes.append(message)

    def fail(self, message: str) -> None:
        self.notes.append(message)
        self.failed = True


# -- pure ----------------------------------------------------------------------------


def total_lag(committed: Mapping[Partition, int], log_end: Mapping[Partition, int | None]) -> int:
    """A group's lag: over the partitions it has committed offsets for and whose
    log end is known, how many records it has still to read."""
    return sum(
        max(0, end - offset)
        for tp, offset in committed.items()
        if (end := log_end.get(tp)) is not None
    )


def reset_args(body: Mapping[str, Any]) -> argparse.Namespace:
    """The arguments `moldau groups --reset-offsets` would have for a console request:
    {"scenario": "to-offset", "value": "5", "topics": ["t", "u:0,1"]} (no topics:
    every partition the group has an offset for, as --all-topics)."""
    scenario = body.get("scenario")
    if scenario not in RESET_CHOICES:
        raise CliError(f"scenario must be one of {', '.join(RESET_CHOICES)}, got {scenario!r}")
    values: dict[str, Any] = dict.fromkeys(SCENARIOS)
    dest = str(scenario).replace("-", "_")
    if RESET_CHOICES[scenario]:
        value = str(body.get("value", "")).strip()
        if not value:
            raise CliError(f"--{scenario} needs a value")
        if dest in ("to_offset", "shift_by"):
            try:
                values[dest] = int(value)
            except ValueError:
                raise CliError(f"--{scenario} expects an integer, got {value!r}") from None
        else:
            values[dest] = value
    else:
        values[dest] = True
    topics = [str(t).strip() for t in body.get("topics") or [] if str(t).strip()]
    for text in topics:
        parse_topic_partitions(text)  # a CliError for a malformed one, before any request
    return argparse.Namespace(**values, topic=topics, all_topics=not topics)


def offset_delete_fields(group: str, partitions: Iterable[Partition]) -> dict[str, Any]:
    """OffsetDelete's request for `partitions` of `group`."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(set(partitions)):
        by_topic.setdefault(topic, []).append(partition)
    return {
        "group_id": group,
        "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in ps]}
            for t, ps in by_topic.items()
        ],
    }


def offset_delete_errors(response: Any) -> dict[str, str]:
    """The partitions OffsetDelete refused (`t-0` -> Kafka's error name); a refusal
    of the whole request is a CliError."""
    code = ErrorCode(response.error_code)
    if code != ErrorCode.none:
        raise CliError(f"{code.name.upper()}: the offsets could not be deleted")
    return {
        f"{t.name}-{p.partition_index}": ErrorCode(p.error_code).name.upper()
        for t in response.topics
        for p in t.partitions
        if p.error_code != ErrorCode.none
    }


# -- from the cluster ----------------------------------------------------------------


def group_summaries(groups: ConsoleGroups) -> list[dict[str, Any]]:
    """Every group: state, protocol type, assignor, members and total lag."""
    listings = groups.listings()
    ids = [str(g.group_id) for g in listings]
    described = groups.describe_groups(ids)
    committed, log_end = _offsets(groups, ids)
    out = []
    for listing in listings:
        group = str(listing.group_id)
        d = described.get(group)
        out.append(
            {
                "group": group,
                "state": state_name(d.state if d is not None else listing.state),
                "protocolType": "" if listing.is_simple_consumer_group else "consumer",
                "assignor": (d.partition_assignor if d is not None else "") or "",
                "members": len(d.members) if d is not None else 0,
                "partitions": len(committed[group]),
                "lag": total_lag(committed[group], log_end),
            }
        )
    return out


def group_lags(groups: ConsoleGroups) -> dict[str, int]:
    """Each group's total lag now (for the lag history)."""
    committed, log_end = _offsets(groups, [str(g.group_id) for g in groups.listings()])
    return {g: total_lag(offsets, log_end) for g, offsets in committed.items()}


def group_detail(groups: ConsoleGroups, group: str) -> dict[str, Any]:
    """One group: its coordinator, members and, per partition, the committed offset,
    the log end offset and the lag (describe's rows)."""
    d = _description(groups, group)
    metadata = fetch_metadata(groups.admin, groups.watch)
    rows = groups.offset_rows(d, metadata)
    node = d.coordinator
    return {
        "group": group,
        "state": state_name(d.state),
        "assignor": d.partition_assignor or "",
        "protocolType": "" if d.is_simple_consumer_group else "consumer",
        "coordinator": {"id": node.id, "host": node.host, "port": node.port},
        "members": [
            {
                "memberId": m.member_id,
                "groupInstanceId": m.group_instance_id,
                "clientId": m.client_id,
                "host": m.host,
                "partitions": sorted(
                    f"{tp.topic}-{tp.partition}" for tp in m.assignment.topic_partitions
                ),
            }
            for m in d.members
        ],
        "partitions": [
            {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "logEndOffset": r.log_end_offset,
                "lag": r.lag,
                "memberId": None if r.consumer_id in (None, "-") else r.consumer_id,
                "clientId": None if r.client_id in (None, "-") else r.client_id,
            }
            for r in rows
        ],
        "lag": sum(r.lag for r in rows if r.lag is not None),
    }


def reset_offsets(groups: ConsoleGroups, group: str, execute: bool) -> dict[str, Any]:
    """The plan of a reset (the CLI's, with `groups.args`' scenario), committed when
    `execute`. Refused, with Kafka's message, while the group has members."""
    refusal = reset_refusal(group, groups.describe_groups([group])[group])
    if refusal is not None:
        raise CliError(refusal)
    metadata = fetch_metadata(groups.admin, groups.watch)
    plan = groups.plan(group, metadata)
    current = groups.committed(group)
    if execute:
        groups.commit(group, plan)
    return {
        "group": group,
        "executed": execute,
        "plan": [
            {"topic": t, "partition": p, "current": current.get((t, p)), "new": plan[(t, p)]}
            for t, p in sorted(plan)
        ],
        "notes": groups.notes,
    }


def delete_group(groups: ConsoleGroups, group: str) -> None:
    """DeleteGroups; a group with members is refused by the broker (NON_EMPTY_GROUP)."""
    future = groups.admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group]
    try:
        wait_result(groups.admin, groups.watch, future, f"group '{group}' to be deleted")
    except KafkaException as e:
        err = kafka_error(e)
        if err is not None and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
            raise GroupNotFound(group) from None
        raise CliError(kafka_message(e)) from None


def coordinator_of(groups: ConsoleGroups, group: str) -> tuple[str, int]:
    """The address of the group's coordinator (for OffsetDelete, which goes to it)."""
    node = _description(groups, group).coordinator
    return (str(node.host), int(node.port))


async def delete_offsets(
    cluster: ClusterClient, group: str, partitions: Sequence[Partition]
) -> dict[str, str]:
    """OffsetDelete (47) to the group's coordinator: `partitions`' committed offsets
    go; returns the partitions refused (a member still reads the topic:
    GROUP_SUBSCRIBED_TO_TOPIC), as kafka-consumer-groups --delete-offsets."""
    if not partitions:
        raise CliError("no partitions to delete offsets of")
    address = await cluster.run(coordinator_of, console_groups(cluster), group)
    response = await cluster.call(
        address, ApiKey.OFFSET_DELETE, 0, offset_delete_fields(group, partitions)
    )
    return offset_delete_errors(response)


def console_groups(cluster: ClusterClient, args: argparse.Namespace | None = None) -> ConsoleGroups:
    """The groups service of the console's cluster (a ClusterClient)."""
    return ConsoleGroups(cluster.admin, cluster.bootstrap, args)


def _description(groups: ConsoleGroups, group: str) -> Any:
    d = groups.describe_groups([group])[group]
    if d is None:
        raise GroupNotFound(group)
    return d


def _offsets(
    groups: ConsoleGroups, ids: Sequence[str]
) -> tuple[dict[str, dict[Partition, int]], dict[Partition, int | None]]:
    """Each group's committed offsets, and the log end offset of every partition
    any of them has one for (one ListOffsets for all)."""
    committed = {g: groups.committed(g) for g in ids}
    wanted = {tp for offsets in committed.values() for tp in offsets}
    if not wanted:
        return committed, {}
    metadata = fetch_metadata(groups.admin, groups.watch)
    return committed, groups.log_offsets(metadata, wanted, LATEST)
