"""`moldau groups`: list, describe and delete consumer groups and reset their
committed offsets, as kafka-consumer-groups.sh does, through the Kafka admin API
(confluent-kafka's AdminClient).

The action is a word (`moldau groups ... describe --group g`) or, as with
kafka-consumer-groups, a flag (`--describe`). The tables are Kafka's: the same
columns, widths and order, '-' where a value is unknown, a blank line before
each table. Kafka's notes about a group ("has no active members", "is
rebalancing") go to stderr, where Kafka prints them. Unlike Kafka's tool, which
prints "Error: ..." and exits 0, a group that does not exist, a group that
cannot be reset or deleted, or a failed reset is a line on stderr and a non-zero
exit.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

# The import confluent-kafka documents; its admin module re-exports these without
# an `__all__`, which strict mypy does not count as exporting them.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ConsumerGroupDescription,
    MemberDescription,
    OffsetSpec,
)

from moldau.cli.common import (
    TIMEOUT_S,
    BrokerWatch,
    add_action_arguments,
    add_bootstrap_argument,
    admin_client,
    check_valid_with,
    chosen_action,
    error_text,
    fetch_metadata,
    flag_name,
    given,
    kafka_error,
    wait_result,
)
from moldau.cli.errors import CliError

ACTIONS = ("list", "describe", "delete", "reset-offsets")

#: What kafka-consumer-groups prints where a value is unknown.
MISSING = "-"

#: A topic partition, as the tables show it and sort it.
Partition = tuple[str, int]

#: The reset scenarios; reset-offsets takes exactly one.
SCENARIOS = (
    "to_offset",
    "to_earliest",
    "to_latest",
    "to_current",
    "shift_by",
    "to_datetime",
    "by_duration",
)

#: The actions each option is valid with, as kafka-consumer-groups checks them.
_VALID_WITH: dict[str, frozenset[str]] = {
    "group": frozenset({"describe", "delete", "reset-offsets"}),
    "all_groups": frozenset({"list", "describe", "delete", "reset-offsets"}),
    "topic": frozenset({"reset-offsets"}),
    "all_topics": frozenset({"reset-offsets"}),
    "members": frozenset({"describe"}),
    "offsets": frozenset({"describe"}),
    "state": frozenset({"describe", "list"}),
    "dry_run": frozenset({"reset-offsets"}),
    "execute": frozenset({"reset-offsets"}),
    "export": frozenset({"reset-offsets"}),
    **{scenario: frozenset({"reset-offsets"}) for scenario in SCENARIOS},
}

#: Group states by the names Kafka prints (and `--state` accepts).
STATE_NAMES: dict[ConsumerGroupState, str] = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}

#: The offsets ListOffsets is asked for (confluent-kafka leaves these untyped).
EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]

#: The states in which reset-offsets may change a group's offsets.
_INACTIVE = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD})
_REBALANCING = frozenset(
    {ConsumerGroupState.PREPARING_REBALANCING, ConsumerGroupState.COMPLETING_REBALANCING}
)

#: A group's coordinator moving or loading: asked again (Kafka's retriable errors).
_COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
_RETRY_S = 0.2

_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "groups",
        help="list, describe and delete consumer groups, reset their offsets",
        description="List, describe and delete consumer groups and reset their offsets, "
        "as kafka-consumer-groups.sh.",
    )
    add_bootstrap_argument(p)
    add_action_arguments(p, ACTIONS)
    p.add_argument("--group", action="append", default=[], help="the consumer group (repeatable)")
    p.add_argument(
        "--all-groups", action="store_true", help="describe, delete or reset every group"
    )
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC[:P,...]",
        help="reset-offsets: a topic, or some of its partitions (orders:0,1); repeatable",
    )
    p.add_argument(
        "--all-topics",
        action="store_true",
        help="reset-offsets: every partition the group has an offset for",
    )
    p.add_argument(
        "--members", action="store_true", help="describe: the members and their partition counts"
    )
    p.add_argument(
        "--offsets", action="store_true", help="describe: partitions, offsets and lag (default)"
    )
    p.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="STATES",
        help="describe: the group's state and coordinator; list: with states, or only "
        "groups in these states (e.g. stable,empty)",
    )
    p.add_argument("--dry-run", action="store_true", help="reset-offsets: only show (default)")
    p.add_argument("--execute", action="store_true", help="reset-offsets: commit the offsets")
    p.add_argument("--export", action="store_true", help="reset-offsets: print the plan as CSV")
    p.add_argument("--to-offset", type=int, metavar="N", help="reset to this offset")
    p.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    p.add_argument("--to-latest", action="store_true", help="reset to the log-end offset")
    p.add_argument(
        "--to-current",
        action="store_true",
        help="reset to the committed offset (the log-end offset where there is none)",
    )
    p.add_argument(
        "--shift-by", type=int, metavar="N", help="move the committed offset by N (may be < 0)"
    )
    p.add_argument(
        "--to-datetime",
        metavar="DATETIME",
        help="reset to the first record at or after this time: YYYY-MM-DDTHH:mm:SS.sss, "
        "UTC unless it has an offset (+02:00)",
    )
    p.add_argument(
        "--by-duration",
        metavar="DURATION",
        help="reset to the first record of this long ago: PnDTnHnMnS (e.g. PT1H30M)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    action = chosen_action(args, ACTIONS)
    _check_options(args, action)
    command = GroupCommand(args)
    if action == "list":
        return command.list_groups()
    if action == "describe":
        return command.describe()
    if action == "delete":
        return command.delete()
    return command.reset_offsets()


def _check_options(args: argparse.Namespace, action: str) -> None:
    check_valid_with(args, action, _VALID_WITH)
    if args.group and args.all_groups:
        raise CliError("--group and --all-groups cannot be used together")
    if action in ("describe", "delete", "reset-offsets") and not (args.group or args.all_groups):
        raise CliError(f"{action} needs --group or --all-groups")
    if any(not g for g in args.group):
        raise CliError("--group expects a group id")
    if action == "describe":
        views = [args.members, args.offsets, args.state is not None]
        if sum(views) > 1:
            raise CliError("describe takes at most one of --members, --offsets and --state")
        if args.state:
            raise CliError("describe does not take a value for --state")
    if action == "reset-offsets":
        chosen = [dest for dest in SCENARIOS if given(getattr(args, dest))]
        if len(chosen) != 1:
            raise CliError(
                "reset-offsets needs exactly one of "
                + ", ".join(flag_name(dest) for dest in SCENARIOS)
                + (f" (got {', '.join(flag_name(dest) for dest in chosen)})" if chosen else "")
            )
        if args.dry_run and args.execute:
            raise CliError("reset-offsets takes one of --dry-run and --execute, not both")
        if bool(args.topic) == args.all_topics:
            raise CliError("reset-offsets needs one scope: --topic or --all-topics")


# -- parsing ---------------------------------------------------------------------------


def parse_topic_partitions(text: str) -> tuple[str, list[int] | None]:
    """`orders` -> all of its partitions (None); `orders:0,2` -> partitions 0 and 2."""
    topic, sep, partitions = text.partition(":")
    if not topic:
        raise CliError(f"invalid --topic {text!r}: expected a topic name, then :partitions")
    if not sep:
        return topic, None
    parsed: list[int] = []
    for item in partitions.split(","):
        try:
            partition = int(item.strip())
        except ValueError:
            raise CliError(
                f"invalid partition {item.strip()!r} in --topic {text!r}: expected "
                "TOPIC:P,P,... with partition numbers"
            ) from None
        if partition < 0:
            raise CliError(f"invalid partition {partition} in --topic {text!r}")
        if partition not in parsed:
            parsed.append(partition)
    return topic, parsed


def parse_datetime(text: str) -> int:
    """Kafka's `--to-datetime` (YYYY-MM-DDTHH:mm:SS.sss, in UTC unless it has a
    zone) as milliseconds since the epoch. Any ISO 8601 form is accepted."""
    value = text.strip()
    try:
        moment = datetime.fromisoformat(value[:-1] + "+00:00" if value[-1:] in "zZ" else value)
    except ValueError:
        raise CliError(
            f"--to-datetime expects a date and time such as 2024-05-01T12:00:00.000 "
            f"(UTC unless it has an offset such as +02:00), got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_duration(text: str) -> timedelta:
    """An ISO 8601 duration as Java's `Duration.parse` reads it: PnDTnHnMn.nS."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or (m.group(2, 3, 4, 5) == (None, None, None, None)):
        raise CliError(f"--by-duration expects a duration such as PT1H or P1DT2H30M, got {text!r}")
    sign, days, hours, minutes, seconds, fraction = m.groups()
    seconds_text = (seconds or "0") + "." + (fraction or "0")
    if seconds_text.startswith("-"):
        seconds_value = -float(seconds_text[1:])
    else:
        seconds_value = float(seconds_text.lstrip("+"))
    duration = timedelta(
        days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0)
    ) + timedelta(seconds=seconds_value)
    return -duration if sign == "-" else duration


def parse_states(text: str) -> set[ConsumerGroupState]:
    """`--state stable,empty` for list, by Kafka's state names, in any case."""
    by_name = {
        name.lower(): state
        for state, name in STATE_NAMES.items()
        if state != ConsumerGroupState.UNKNOWN
    }
    states: set[ConsumerGroupState] = set()
    for item in text.split(","):
        state = by_name.get(item.strip().lower())
        if state is None:
            valid = ", ".join(STATE_NAMES[s] for s in by_name.values())
            raise CliError(f"invalid state list {text!r}; valid states are: {valid}")
        states.add(state)
    return states


def state_name(state: object) -> str:
    """A group state as Kafka prints it: Stable, Empty, PreparingRebalance, ..."""
    if isinstance(state, ConsumerGroupState):
        return STATE_NAMES[state]
    return "Unknown"


def reset_refusal(group: str, description: ConsumerGroupDescription | None) -> str | None:
    """Kafka's refusal to reset the offsets of a group with members; None if it may."""
    state = ConsumerGroupState.DEAD if description is None else description.state
    if state in _INACTIVE:
        return None
    return (
        f"Assignments can only be reset if the group '{group}' is inactive, "
        f"but the current state is {state_name(state)}."
    )


def partition_text(tp: Partition) -> str:
    """A partition as Kafka writes one in messages: `orders-0`."""
    return f"{tp[0]}-{tp[1]}"


# -- the tables ------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionRow:
    """One row of describe's offsets table (Kafka's PartitionAssignmentState)."""

    group: str
    topic: str
    partition: int
    offset: int | None
    log_end_offset: int | None
    consumer_id: str | None = None
    host: str | None = None
    client_id: str | None = None

    @property
    def lag(self) -> int | None:
        if self.offset is None or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.offset

    def cells(self) -> list[str]:
        values = (
            self.group,
            self.topic,
            self.partition,
            self.offset,
            self.log_end_offset,
            self.lag,
            self.consumer_id,
            self.host,
            self.client_id,
        )
        return [MISSING if v is None else str(v) for v in values]


def _line(widths: Sequence[int], cells: Sequence[str]) -> str:
    """Cells padded to their widths, one space apart, as Java's `%-Ns` does; the
    padding at the end of the line is left off."""
    return " ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def partition_rows(
    group: str,
    members: Sequence[MemberDescription],
    committed: Mapping[Partition, int],
    log_end: Mapping[Partition, int | None],
) -> list[PartitionRow]:
    """Kafka's rows: the members with partitions, most partitions first, each
    partition with its committed offset (if any); then the partitions with a
    committed offset that no member has, with '-' for the member."""
    rows: list[PartitionRow] = []
    assigned: set[Partition] = set()
    owners = [m for m in members if m.assignment.topic_partitions]
    for member in sorted(owners, key=lambda m: -len(m.assignment.topic_partitions)):
        tps = sorted({(tp.topic, tp.partition) for tp in member.assignment.topic_partitions})
        assigned.update(tps)
        rows += [
            PartitionRow(
                group,
                t,
                p,
                committed.get((t, p)),
                log_end.get((t, p)),
                member.member_id,
                member.host,
                member.client_id,
            )
            for t, p in tps
        ]
    rows += [
        PartitionRow(group, t, p, committed[(t, p)], log_end.get((t, p)), MISSING, MISSING, MISSING)
        for t, p in sorted(set(committed) - assigned)
    ]
    return rows


def offsets_table(rows: Sequence[PartitionRow]) -> list[str]:
    widths = (
        max([15] + [len(r.group) for r in rows]),
        max([15] + [len(r.topic) for r in rows]),
        10,
        15,
        15,
        15,
        max([15] + [len(r.consumer_id or MISSING) for r in rows]),
        max([15] + [len(r.host or MISSING) for r in rows]),
        0,
    )
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "HOST", "CLIENT-ID"]  # fmt: skip
    return [_line(widths, header)] + [_line(widths, r.cells()) for r in rows]


def members_table(group: str, members: Sequence[MemberDescription]) -> list[str]:
    """Kafka's `--members` table; GROUP-INSTANCE-ID only when a member is static."""
    static = any(m.group_instance_id for m in members)
    rows = [
        [group, m.member_id]
        + ([m.group_instance_id or ""] if static else [])
        + [m.host, m.client_id, str(len(m.assignment.topic_partitions))]
        for m in members
    ]
    header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if static else [])
    header += ["HOST", "CLIENT-ID", "#PARTITIONS"]
    minimums = [15, 15] + ([17] if static else []) + [15, 15, 15]
    widths = [max([w] + [len(row[i]) for row in rows]) for i, w in enumerate(minimums)]
    return [_line(widths, header)] + [_line(widths, row) for row in rows]


def state_table(description: ConsumerGroupDescription) -> list[str]:
    node = description.coordinator
    coordinator = f"{node.host}:{node.port}  ({node.id})"
    widths = (max(15, len(description.group_id)), max(25, len(coordinator)), 20, 20, 0)
    row = [
        description.group_id,
        coordinator,
        description.partition_assignor or MISSING,
        state_name(description.state),
        str(len(description.members)),
    ]
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    return [_line(widths, header), _line(widths, row)]


def reset_table(plan: Mapping[str, Mapping[Partition, int]]) -> list[str]:
    widths = (
        max([15] + [len(g) for g in plan]),
        max([15] + [len(t) for offsets in plan.values() for t, _ in offsets]),
        10,
        0,
    )
    lines = [_line(widths, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"])]
    for group, offsets in plan.items():
        lines += [
            _line(widths, [group, t, str(p), str(offsets[(t, p)])]) for t, p in sorted(offsets)
        ]
    return lines


def reset_csv(plan: Mapping[str, Mapping[Partition, int]], with_group: bool) -> list[str]:
    """`--export`: Kafka's CSV, `topic,partition,offset` (the group first when
    several groups were reset), ready for Kafka's `--from-file`."""
    return [
        ",".join(([group] if with_group else []) + [t, str(p), str(offsets[(t, p)])])
        for group, offsets in plan.items()
        for t, p in sorted(offsets)
    ]


def _print_table(lines: Sequence[str]) -> None:
    """As Kafka prints its tables: a blank line, then the lines."""
    print()
    print("\n".join(lines))


# -- the command -----------------------------------------------------------------------


class GroupCommand:
    """One run of `moldau groups` against one cluster (kafka-consumer-groups'
    ConsumerGroupService)."""

    def __init__(
        self, args: argparse.Namespace, client: tuple[Any, BrokerWatch] | None = None
    ) -> None:
        """`client`: an AdminClient and its watch to use (the console's) instead of
        one made from `args`' --bootstrap-server and --command-config."""
        self.args = args
        self.admin, self.watch = client if client is not None else admin_client(args)
        self.failed = False

    def fail(self, message: str) -> None:
        """Report one problem and go on with the other groups; the exit code is 1."""
        print(f"moldau groups: {message}", file=sys.stderr)
        self.failed = True

    def warn(self, message: str) -> None:
        """A note on a value the command changed (an offset moved into range), on
        stderr where Kafka prints it; the reset goes on."""
        print(message, file=sys.stderr)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    # -- the actions ------------------------------------------------------------

    def list_groups(self) -> int:
        fetch_metadata(self.admin, self.watch)
        states = parse_states(self.args.state) if self.args.state else None
        listings = self.listings(states)
        if self.args.state is None:
            for listing in listings:
                print(listing.group_id)
            return self.exit_code
        width = max([15] + [len(g.group_id) for g in listings]) + 10
        widths = (width, 20)
        print(_line(widths, ["GROUP", "STATE"]))
        for listing in listings:
            state = getattr(listing, "state", ConsumerGroupState.UNKNOWN)
            print(_line(widths, [listing.group_id, state_name(state)]))
        return self.exit_code

    def describe(self) -> int:
        args = self.args
        metadata = fetch_metadata(self.admin, self.watch)
        descriptions = self.describe_groups(self._groups())
        for group in sorted(descriptions):
            description = descriptions[group]
            if description is None:
                self.fail(f"Consumer group '{group}' does not exist.")
                continue
            if args.members:
                self._note_state(description)
                lines = members_table(group, description.members)
            elif args.state is not None:
                self._note_state(description)
                lines = state_table(description)
            else:
                lines = self._offsets_lines(description, metadata)
            if lines:
                _print_table(lines)
        return self.exit_code

    def delete(self) -> int:
        fetch_metadata(self.admin, self.watch)
        groups = self._groups()
        if not groups:
            print("Deletion of requested consumer groups () was successful.")
            return self.exit_code
        futures = self._call(self.admin.delete_consumer_groups, groups, request_timeout=TIMEOUT_S)
        deleted: list[str] = []
        failures: list[str] = []
        for group in groups:
            try:
                wait_result(
                    self.admin, self.watch, futures[group], f"group '{group}' to be deleted"
                )
            except KafkaException as e:
                err = kafka_error(e)
                if err is not None and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
                    self.fail(f"Consumer group '{group}' does not exist.")
                else:
                    reason = err.name() if err is not None else str(e)
                    failures.append(f"* Group '{group}' could not be deleted due to: {reason}")
                continue
            deleted.append(group)
        quoted = ", ".join(f"'{g}'" for g in deleted)
        if not self.failed and not failures:
            print(f"Deletion of requested consumer groups ({quoted}) was successful.")
            return 0
        if deleted:
            print(f"These consumer groups were deleted successfully: {quoted}")
        if failures:
            self.fail("Deletion of some consumer groups failed: " + " ".join(failures))
        return self.exit_code

    def reset_offsets(self) -> int:
        args = self.args
        if not args.dry_run and not args.execute:
            print(
                "WARN: No action will be performed as the --execute option is missing. "
                "Add --dry-run to plan a reset without this warning.",
                file=sys.stderr,
            )
        metadata = fetch_metadata(self.admin, self.watch)
        groups = self._groups()
        descriptions = self.describe_groups(groups)
        plan: dict[str, dict[Partition, int]] = {}
        for group in groups:
            description = descriptions[group]
            refusal = reset_refusal(group, description)
            if refusal is not None:
                self.fail(refusal)
                continue
            try:
                offsets = self.plan(group, metadata)
                if args.execute:
                    self.commit(group, offsets)
            except CliError as e:
                self.fail(str(e))
                continue
            plan[group] = offsets
        if args.export:
            lines = reset_csv(plan, with_group=len(args.group) != 1)
            if lines:
                print("\n".join(lines))
        elif plan:
            _print_table(reset_table(plan))
        return self.exit_code

    # -- describe ---------------------------------------------------------------

    def _note_state(self, description: ConsumerGroupDescription) -> None:
        """Kafka's notes on a group that is not stable, on stderr."""
        group = description.group_id
        if description.state == ConsumerGroupState.EMPTY:
            print(f"Consumer group '{group}' has no active members.", file=sys.stderr)
        elif description.state in _REBALANCING:
            print(f"Warning: Consumer group '{group}' is rebalancing.", file=sys.stderr)

    def _offsets_lines(self, description: ConsumerGroupDescription, metadata: Any) -> list[str]:
        rows = self.offset_rows(description, metadata)
        self._note_state(description)
        return offsets_table(rows) if rows else []

    def offset_rows(
        self, description: ConsumerGroupDescription, metadata: Any
    ) -> list[PartitionRow]:
        """describe's rows: each assigned or committed partition, its offsets and lag."""
        group = description.group_id
        committed = self.committed(group)
        assigned = {
            (tp.topic, tp.partition)
            for m in description.members
            for tp in m.assignment.topic_partitions
        }
        log_end = self.log_offsets(metadata, assigned | set(committed), LATEST)
        return partition_rows(group, description.members, committed, log_end)

    # -- reset-offsets ----------------------------------------------------------

    def plan(self, group: str, metadata: Any) -> dict[Partition, int]:
        """The new offsets of `group`, as the chosen scenario computes them."""
        args = self.args
        committed: dict[Partition, int] | None = None
        if args.all_topics:
            committed = self.committed(group)
            partitions = sorted(committed)
        else:
            partitions = self._partitions(args.topic, metadata)
        if not partitions:
            return {}
        if args.to_earliest:
            return self._required(metadata, partitions, EARLIEST, "starting offset")
        if args.to_latest:
            return self._required(metadata, partitions, LATEST, "ending offset")
        if args.to_offset is not None:
            return self._clamped(metadata, dict.fromkeys(partitions, int(args.to_offset)))
        if committed is None:
            committed = self.committed(group)
        if args.shift_by is not None:
            missing = [tp for tp in partitions if tp not in committed]
            if missing:
                raise CliError(
                    f"Cannot shift offset for partition {partition_text(missing[0])} of group "
                    f"'{group}' since there is no current committed offset"
                )
            return self._clamped(
                metadata, {tp: committed[tp] + int(args.shift_by) for tp in partitions}
            )
        if args.to_current:
            rest = [tp for tp in partitions if tp not in committed]
            ends = self._required(metadata, rest, LATEST, "ending offset")
            return {tp: committed[tp] if tp in committed else ends[tp] for tp in partitions}
        if args.to_datetime is not None:
            timestamp = parse_datetime(args.to_datetime)
        else:
            since = datetime.now(UTC) - parse_duration(args.by_duration)
            timestamp = int(since.timestamp() * 1000)
        return self._by_time(metadata, partitions, timestamp)

    def _partitions(self, topics: Iterable[str], metadata: Any) -> list[Partition]:
        """The partitions `--topic` names; each must exist and have a leader."""
        chosen: list[Partition] = []
        for text in topics:
            topic, wanted = parse_topic_partitions(text)
            t = metadata.topics.get(topic)
            if t is None or (t.error is not None and not t.partitions):
                raise CliError(f"topic '{topic}' does not exist")
            existing = sorted(int(p) for p in t.partitions)
            for partition in existing if wanted is None else wanted:
                if partition not in t.partitions:
                    raise CliError(
                        f"topic '{topic}' has no partition {partition} "
                        f"(it has {len(existing)}: 0..{len(existing) - 1})"
                    )
                if t.partitions[partition].leader < 0:
                    raise CliError(f"partition {topic}-{partition} has no leader")
                if (topic, partition) not in chosen:
                    chosen.append((topic, partition))
        return chosen

    def _required(
        self, metadata: Any, partitions: Sequence[Partition], spec: OffsetSpec, what: str
    ) -> dict[Partition, int]:
        offsets = self.log_offsets(metadata, partitions, spec)
        result: dict[Partition, int] = {}
        for tp in partitions:
            offset = offsets.get(tp)
            if offset is None:
                raise CliError(f"Error getting {what} of topic partition: {partition_text(tp)}")
            result[tp] = offset
        return result

    def _clamped(self, metadata: Any, wanted: Mapping[Partition, int]) -> dict[Partition, int]:
        """Offsets moved into [log start, log end], as Kafka's checkOffsetsRange does."""
        partitions = sorted(wanted)
        starts = self._required(metadata, partitions, EARLIEST, "starting offset")
        ends = self._required(metadata, partitions, LATEST, "ending offset")
        result: dict[Partition, int] = {}
        for tp in partitions:
            offset = wanted[tp]
            if offset > ends[tp]:
                self.warn(
                    f"WARN: New offset ({offset}) is higher than latest offset for topic "
                    f"partition {partition_text(tp)}. Value will be set to {ends[tp]}",
                )
                offset = ends[tp]
            elif offset < starts[tp]:
                self.warn(
                    f"WARN: New offset ({offset}) is lower than earliest offset for topic "
                    f"partition {partition_text(tp)}. Value will be set to {starts[tp]}",
                )
                offset = starts[tp]
            result[tp] = offset
        return result

    def _by_time(
        self, metadata: Any, partitions: Sequence[Partition], timestamp: int
    ) -> dict[Partition, int]:
        """The first offset at or after `timestamp`; the log end where there is none."""
        found = self.log_offsets(metadata, partitions, OffsetSpec.for_timestamp(timestamp))
        empty = [tp for tp in partitions if found.get(tp) is None]
        for t, p in empty:
            self.warn(
                f"Warn: Partition {p} from topic {t} is empty. Falling back to latest known offset."
            )
        ends = self._required(metadata, empty, LATEST, "ending offset")
        result: dict[Partition, int] = {}
        for tp in partitions:
            offset = found.get(tp)
            result[tp] = ends[tp] if offset is None else offset
        return result

    def commit(self, group: str, offsets: Mapping[Partition, int]) -> None:
        if not offsets:
            return
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, offsets[(t, p)]) for t, p in sorted(offsets)]
        )
        futures = self._call(
            self.admin.alter_consumer_group_offsets, [request], request_timeout=TIMEOUT_S
        )
        result = self._result(futures[group], f"the offsets of group '{group}' to be committed")
        for tp in result.topic_partitions or []:
            if tp.error is not None:
                raise CliError(
                    f"could not commit the offsets of group '{group}': "
                    f"{partition_text((tp.topic, tp.partition))}: {error_text(tp.error)}"
                    f" ({tp.error.name()})"
                )

    # -- helpers ----------------------------------------------------------------

    def listings(self, states: set[ConsumerGroupState] | None = None) -> list[Any]:
        kwargs: dict[str, Any] = {"request_timeout": TIMEOUT_S}
        if states:
            kwargs["states"] = states
        future = self._call(self.admin.list_consumer_groups, **kwargs)
        result = self._result(future, "the list of consumer groups")
        for error in result.errors or []:
            err = kafka_error(error)
            self.fail(error_text(err) if err is not None else str(error))
        return sorted(result.valid or [], key=lambda g: str(g.group_id))

    def _groups(self) -> list[str]:
        """The groups `--group` names (in order, once each), or all with `--all-groups`."""
        if self.args.all_groups:
            return [str(g.group_id) for g in self.listings()]
        return list(dict.fromkeys(self.args.group))

    def describe_groups(self, groups: Sequence[str]) -> dict[str, ConsumerGroupDescription | None]:
        """Each group's description; None for a group that does not exist (Kafka
        describes it as Dead; newer brokers answer GROUP_ID_NOT_FOUND). A
        coordinator that is moving or loading is asked again until the timeout, as
        Kafka's admin client does (librdkafka gives up: on a new Kafka cluster the
        first describe meets the offsets topic being created)."""
        deadline = time.monotonic() + TIMEOUT_S
        described: dict[str, ConsumerGroupDescription | None] = {}
        pending = list(dict.fromkeys(groups))
        while pending:
            futures = self._call(
                self.admin.describe_consumer_groups, pending, request_timeout=TIMEOUT_S
            )
            again: list[str] = []
            for group in pending:
                try:
                    description = wait_result(
                        self.admin, self.watch, futures[group], f"group '{group}' to be described"
                    )
                except KafkaException as e:
                    err = kafka_error(e)
                    code = err.code() if err is not None else None
                    if code == KafkaError.GROUP_ID_NOT_FOUND:
                        described[group] = None
                    elif code in _COORDINATOR_MOVING and time.monotonic() < deadline:
                        again.append(group)
                    else:
                        raise self._error(e) from None
                    continue
                dead = getattr(description, "state", None) in (None, ConsumerGroupState.DEAD)
                described[group] = None if dead else description
            pending = again
            if pending:
                time.sleep(_RETRY_S)
        return described

    def committed(self, group: str) -> dict[Partition, int]:
        """The offsets `group` has committed, by partition."""
        futures = self._call(
            self.admin.list_consumer_group_offsets,
            [ConsumerGroupTopicPartitions(group)],
            request_timeout=TIMEOUT_S,
        )
        result = self._result(futures[group], f"the offsets of group '{group}'")
        return {
            (str(tp.topic), int(tp.partition)): int(tp.offset)
            for tp in result.topic_partitions or []
            if tp.error is None and tp.offset >= 0
        }

    def log_offsets(
        self, metadata: Any, partitions: Iterable[Partition], spec: OffsetSpec
    ) -> dict[Partition, int | None]:
        """ListOffsets for each partition that exists and has a leader; None where
        the broker has no answer (or, for a timestamp, no record that late)."""
        offsets: dict[Partition, int | None] = {}
        request: dict[TopicPartition, OffsetSpec] = {}
        for t, p in partitions:
            topic = metadata.topics.get(t)
            partition = topic.partitions.get(p) if topic is not None else None
            if partition is None or partition.leader < 0:
                offsets[(t, p)] = None
            else:
                request[TopicPartition(t, p)] = spec
        if not request:
            return offsets
        futures = self._call(self.admin.list_offsets, request, request_timeout=TIMEOUT_S)
        for tp, future in futures.items():
            key = (str(tp.topic), int(tp.partition))
            try:
                info = wait_result(self.admin, self.watch, future, "the offsets of the partitions")
            except KafkaException:
                offsets[key] = None
                continue
            offsets[key] = int(info.offset) if info.offset >= 0 else None
        return offsets

    @staticmethod
    def _call(method: Any, *args: Any, **kwargs: Any) -> Any:
        """Start an admin operation; arguments it rejects up front are user errors."""
        try:
            return method(*args, **kwargs)
        except KafkaException as e:
            raise GroupCommand._error(e) from None
        except (TypeError, ValueError) as e:
            raise CliError(str(e)) from None

    def _result(self, future: Any, what: str) -> Any:
        try:
            return wait_result(self.admin, self.watch, future, what)
        except KafkaException as e:
            raise self._error(e) from None

    @staticmethod
    def _error(exc: KafkaException) -> CliError:
        err = kafka_error(exc)
        return CliError(error_text(err) if err is not None else str(exc))
