"""`moldau topics`: create, list, describe, alter and delete topics, as
kafka-topics.sh does, through the Kafka admin API (confluent-kafka's AdminClient).

The action is a word (`moldau topics ... create --topic t`) or, as with
kafka-topics, a flag (`--create`). As with kafka-topics, `--topic` is a regular
expression for list, describe, alter and delete (`--topic 'orders.*'`), matched
against whole topic names.
"""

from __future__ import annotations

import argparse
import base64
import re
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection

# The import confluent-kafka documents; its admin module re-exports most of these
# without an `__all__`, which strict mypy does not count as exporting them.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from moldau.cli.common import (
    TIMEOUT_S,
    add_action_arguments,
    add_bootstrap_argument,
    admin_client,
    check_valid_with,
    chosen_action,
    error_text,
    fetch_metadata,
    kafka_error,
    parse_key_values,
    wait_result,
)
from moldau.cli.errors import CliError

ACTIONS = ("create", "list", "describe", "alter", "delete")

#: Topics Kafka itself owns; `--exclude-internal` hides them, delete refuses them.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

#: How long the broker may wait for new partitions to get leaders (or a deleted
#: topic to go) before it answers; a little less than the request timeout.
OPERATION_TIMEOUT_S = TIMEOUT_S - 2.0

#: The actions each option is valid with, as kafka-topics checks them.
_VALID_WITH: dict[str, frozenset[str]] = {
    "partitions": frozenset({"create", "alter"}),
    "replication_factor": frozenset({"create"}),
    "replica_assignment": frozenset({"create", "alter"}),
    "config": frozenset({"create", "alter"}),
    "delete_config": frozenset({"alter"}),
    "if_not_exists": frozenset({"create"}),
    "if_exists": frozenset({"describe", "alter", "delete"}),
    "exclude_internal": frozenset({"list", "describe"}),
    "under_replicated_partitions": frozenset({"describe"}),
    "unavailable_partitions": frozenset({"describe"}),
    "under_min_isr_partitions": frozenset({"describe"}),
    "topics_with_overrides": frozenset({"describe"}),
}

_UINT64 = (1 << 64) - 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics",
        description="Create, list, describe, alter and delete topics, as kafka-topics.sh.",
    )
    add_bootstrap_argument(p)
    add_action_arguments(p, ACTIONS)
    p.add_argument(
        "--topic", help="the topic; a regular expression, except with create (e.g. 'orders.*')"
    )
    p.add_argument("--partitions", type=int, help="the partition count (create, or raise it)")
    p.add_argument("--replication-factor", type=int, help="replicas per partition (create)")
    p.add_argument(
        "--replica-assignment",
        metavar="B:B,B:B",
        help="broker ids per partition: partitions separated by ',', replicas by ':'",
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config to set (repeatable)",
    )
    p.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="a topic config to remove, back to its default (alter; repeatable)",
    )
    p.add_argument("--if-not-exists", action="store_true", help="create: fine if it exists")
    p.add_argument("--if-exists", action="store_true", help="alter, delete, describe: fine if not")
    p.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    p.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="describe: only partitions whose ISR is smaller than their replicas",
    )
    p.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="describe: only partitions without a live leader",
    )
    p.add_argument(
        "--under-min-isr-partitions",
        action="store_true",
        help="describe: only partitions whose ISR is smaller than min.insync.replicas",
    )
    p.add_argument(
        "--topics-with-overrides",
        action="store_true",
        help="describe: only topics with non-default configs",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    action = chosen_action(args, ACTIONS)
    _check_options(args, action)
    command = TopicCommand(args)
    if action == "create":
        return command.create()
    if action == "list":
        return command.list_topics()
    if action == "describe":
        return command.describe()
    if action == "alter":
        return command.alter()
    return command.delete()


def _check_options(args: argparse.Namespace, action: str) -> None:
    check_valid_with(args, action, _VALID_WITH)
    if action in ("create", "alter", "delete") and not args.topic:
        raise CliError(f"--topic is required for {action}")
    if args.partitions is not None and args.partitions < 1:
        raise CliError("--partitions must be at least 1")
    if args.replication_factor is not None and args.replication_factor < 1:
        raise CliError("--replication-factor must be at least 1")


def parse_replica_assignment(text: str) -> list[list[int]]:
    """Kafka's format: `1:2,3:4` is partition 0 on brokers 1 and 2, partition 1 on
    brokers 3 and 4 (the first broker of each is the preferred leader)."""
    assignment: list[list[int]] = []
    for partition, replicas in enumerate(text.split(",")):
        try:
            brokers = [int(b) for b in replicas.split(":")]
        except ValueError:
            raise CliError(
                f"invalid --replica-assignment {text!r}: partition {partition} is "
                f"{replicas.strip()!r}; give broker ids separated by ':', "
                "partitions separated by ','"
            ) from None
        if any(b < 0 for b in brokers):
            raise CliError(f"invalid --replica-assignment {text!r}: broker ids are not negative")
        duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
        if duplicates:
            raise CliError(
                f"invalid --replica-assignment {text!r}: partition {partition} lists broker "
                f"{', '.join(map(str, duplicates))} more than once"
            )
        if assignment and len(brokers) != len(assignment[0]):
            raise CliError(
                f"invalid --replica-assignment {text!r}: partition {partition} has "
                f"{len(brokers)} replicas, partition 0 has {len(assignment[0])}"
            )
        assignment.append(brokers)
    return assignment


def topic_id_text(uuid: Any) -> str:
    """A topic id as Kafka prints it: URL-safe base64 of its 16 bytes, unpadded."""
    msb = int(uuid.get_most_significant_bits()) & _UINT64
    lsb = int(uuid.get_least_significant_bits()) & _UINT64
    raw = msb.to_bytes(8, "big") + lsb.to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def matching_topics(
    topics: Sequence[str], pattern: str | None, exclude_internal: bool = False
) -> list[str]:
    """Topic names `pattern` matches whole, as kafka-topics' include list does
    (`,` separates alternatives; surrounding quotes are dropped)."""
    names = sorted(t for t in topics if not (exclude_internal and t in INTERNAL_TOPICS))
    if pattern is None:
        return names
    regex_text = pattern.strip().replace(",", "|").strip("\"'")
    try:
        regex = re.compile(regex_text)
    except re.error as e:
        raise CliError(f"--topic {pattern!r} is not a valid regular expression: {e}") from None
    return [t for t in names if regex.fullmatch(t)]


class TopicCommand:
    """One run of `moldau topics` against one cluster (kafka-topics' TopicService)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.admin, self.watch = admin_client(args)

    # -- the actions ------------------------------------------------------------

    def create(self) -> int:
        args = self.args
        topic: str = args.topic
        configs = parse_key_values(args.config, "--config")
        metadata = fetch_metadata(self.admin, self.watch)
        if args.replica_assignment is not None:
            if args.partitions is not None or args.replication_factor is not None:
                raise CliError(
                    "--replica-assignment cannot be used with --partitions or "
                    "--replication-factor; it gives both"
                )
            assignment = parse_replica_assignment(args.replica_assignment)
            self._check_brokers(assignment, metadata)
            new_topic = NewTopic(
                topic, len(assignment), replica_assignment=assignment, config=configs
            )
        else:
            new_topic = NewTopic(
                topic,
                args.partitions if args.partitions is not None else -1,
                args.replication_factor if args.replication_factor is not None else -1,
                config=configs,
            )
        futures = self._call(
            self.admin.create_topics,
            [new_topic],
            operation_timeout=OPERATION_TIMEOUT_S,
            request_timeout=TIMEOUT_S,
        )
        try:
            wait_result(self.admin, self.watch, futures[topic], f"topic '{topic}' to be created")
        except KafkaException as e:
            err = kafka_error(e)
            if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                if args.if_not_exists:
                    return 0
                raise CliError(f"topic '{topic}' already exists") from None
            if err is not None and err.code() == KafkaError.REQUEST_TIMED_OUT:
                raise CliError(
                    f"topic '{topic}' was created, but not all its partitions had a leader "
                    f"within {OPERATION_TIMEOUT_S:g}s"
                ) from None
            raise self._error(e, topic) from None
        print(f"Created topic {topic}.")
        return 0

    def list_topics(self) -> int:
        metadata = fetch_metadata(self.admin, self.watch)
        for name in matching_topics(
            list(metadata.topics), self.args.topic, self.args.exclude_internal
        ):
            print(name)
        return 0

    def describe(self) -> int:
        args = self.args
        metadata = fetch_metadata(self.admin, self.watch)
        names = self._existing(metadata, args.exclude_internal)
        if not names:
            return 0
        filtered = (
            args.under_replicated_partitions
            or args.unavailable_partitions
            or args.under_min_isr_partitions
        )
        describe_topics = not filtered
        describe_partitions = not args.topics_with_overrides
        descriptions = self._call(
            self.admin.describe_topics, TopicCollection(names), request_timeout=TIMEOUT_S
        )
        config_futures: dict[str, Any] = {}
        if describe_topics or args.under_min_isr_partitions:
            resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
            by_resource = self._call(
                self.admin.describe_configs, resources, request_timeout=TIMEOUT_S
            )
            config_futures = {r.name: f for r, f in by_resource.items()}
        live = {int(b) for b in metadata.brokers}
        lines: list[str] = []
        for name in names:
            description = self._result(descriptions[name], name, f"topic '{name}'")
            partitions = sorted(description.partitions, key=lambda p: int(p.id))
            if describe_topics:
                entries = self._result(config_futures[name], name, f"the configs of '{name}'")
                overrides = [
                    f"{key}={entry.value}"
                    for key, entry in entries.items()
                    if not entry.is_default and entry.value is not None
                ]
                if args.topics_with_overrides and not overrides:
                    continue
                replication = len(partitions[0].replicas) if partitions else 0
                lines.append(
                    f"Topic: {name}\tTopicId: {topic_id_text(description.topic_id)}\t"
                    f"PartitionCount: {len(partitions)}\tReplicationFactor: {replication}\t"
                    f"Configs: {','.join(overrides)}"
                )
            if not describe_partitions:
                continue
            min_isr = 1
            if args.under_min_isr_partitions:
                entries = self._result(config_futures[name], name, f"the configs of '{name}'")
                entry = entries.get("min.insync.replicas")
                min_isr = int(entry.value) if entry is not None and entry.value else 1
            for p in partitions:
                leader = p.leader.id if p.leader is not None else None
                replicas = [int(r.id) for r in p.replicas]
                isr = [int(r.id) for r in p.isr]
                if args.under_replicated_partitions and len(isr) >= len(replicas):
                    continue
                if args.unavailable_partitions and leader is not None and leader in live:
                    continue
                if args.under_min_isr_partitions and len(isr) >= min_isr:
                    continue
                line = (
                    f"\tTopic: {name}\tPartition: {p.id}\t"
                    f"Leader: {leader if leader is not None else 'none'}\t"
                    f"Replicas: {','.join(map(str, replicas))}\tIsr: {','.join(map(str, isr))}"
                )
                offline = [r for r in replicas if r not in live]
                if offline:
                    line += f"\tOffline: {','.join(map(str, offline))}"
                lines.append(line)
        if lines:
            print("\n".join(lines))
        return 0

    def alter(self) -> int:
        args = self.args
        configs = parse_key_values(args.config, "--config")
        deletes: list[str] = [k.strip() for k in args.delete_config]
        if any(not k for k in deletes):
            raise CliError("--delete-config expects a config name")
        if args.partitions is None and not configs and not deletes:
            raise CliError("alter needs --partitions, --config or --delete-config")
        assignment: list[list[int]] | None = None
        if args.replica_assignment is not None:
            if args.partitions is None:
                raise CliError("--replica-assignment with alter needs --partitions")
            assignment = parse_replica_assignment(args.replica_assignment)
            if len(assignment) != args.partitions:
                raise CliError(
                    f"--replica-assignment lists {len(assignment)} partitions, but "
                    f"--partitions is {args.partitions}"
                )
        metadata = fetch_metadata(self.admin, self.watch)
        names = self._existing(metadata)
        if not names:
            return 0
        if assignment is not None:
            self._check_brokers(assignment, metadata)
        if args.partitions is not None:
            new_partitions = [
                NewPartitions(name, args.partitions)
                if assignment is None
                else NewPartitions(
                    name,
                    args.partitions,
                    replica_assignment=assignment[len(metadata.topics[name].partitions) :],
                )
                for name in names
            ]
            futures = self._call(
                self.admin.create_partitions,
                new_partitions,
                operation_timeout=OPERATION_TIMEOUT_S,
                request_timeout=TIMEOUT_S,
            )
            for name in names:
                self._result(futures[name], name, f"the partitions of '{name}'")
        if configs or deletes:
            ops = [
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in configs.items()
            ] + [
                ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in deletes
            ]
            resources = [
                ConfigResource(ResourceType.TOPIC, name, incremental_configs=ops) for name in names
            ]
            by_resource = self._call(
                self.admin.incremental_alter_configs, resources, request_timeout=TIMEOUT_S
            )
            for resource, future in by_resource.items():
                self._result(future, resource.name, f"the configs of '{resource.name}'")
        return 0

    def delete(self) -> int:
        metadata = fetch_metadata(self.admin, self.watch)
        names = self._existing(metadata)
        for name in names:
            if name in INTERNAL_TOPICS:
                raise CliError(f"topic {name} is an internal topic and cannot be deleted")
        if not names:
            return 0
        futures = self._call(
            self.admin.delete_topics,
            names,
            operation_timeout=OPERATION_TIMEOUT_S,
            request_timeout=TIMEOUT_S,
        )
        for name in names:
            self._result(futures[name], name, f"topic '{name}' to be deleted")
        return 0

    # -- helpers ----------------------------------------------------------------

    def _existing(self, metadata: Any, exclude_internal: bool = False) -> list[str]:
        """The topics `--topic` names; an error if none, unless `--if-exists`."""
        names = matching_topics(list(metadata.topics), self.args.topic, exclude_internal)
        if not names and self.args.topic is not None and not self.args.if_exists:
            raise CliError(f"topic '{self.args.topic}' does not exist")
        return names

    @staticmethod
    def _check_brokers(assignment: list[list[int]], metadata: Any) -> None:
        known = {int(b) for b in metadata.brokers}
        unknown = sorted({b for replicas in assignment for b in replicas} - known)
        if unknown:
            raise CliError(
                f"--replica-assignment names broker {', '.join(map(str, unknown))}, "
                f"which is not in the cluster (brokers: {', '.join(map(str, sorted(known)))})"
            )

    @staticmethod
    def _call(method: Any, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        """Start an admin operation; arguments it rejects up front are user errors."""
        try:
            futures: dict[Any, Any] = method(*args, **kwargs)
        except KafkaException as e:
            raise TopicCommand._error(e, None) from None
        except (TypeError, ValueError) as e:
            raise CliError(str(e)) from None
        return futures

    def _result(self, future: Any, topic: str, what: str) -> Any:
        try:
            return wait_result(self.admin, self.watch, future, what)
        except KafkaException as e:
            raise self._error(e, topic) from None

    @staticmethod
    def _error(exc: KafkaException, topic: str | None) -> CliError:
        err = kafka_error(exc)
        if err is None:
            return CliError(str(exc))
        if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and topic is not None:
            return CliError(f"topic '{topic}' does not exist")
        return CliError(error_text(err))
