"""`moldau reassign-partitions`: move partitions between brokers, as
kafka-reassign-partitions.sh does (KIP-455: AlterPartitionReassignments and
ListPartitionReassignments, sent to the active controller), with its JSON files,
its output and its exit codes:

    --generate --topics-to-move-json-file F --broker-list 1,2,3 [--disable-rack-aware]
    --execute  --reassignment-json-file F [--additional] [--throttle B/s]
    --verify   --reassignment-json-file F
    --cancel   --reassignment-json-file F
    --list
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from moldau.cli.admin_call import AdminCalls, CallError
from moldau.cli.common import (
    TIMEOUT_S,
    BrokerWatch,
    add_bootstrap_argument,
    add_command_config_argument,
    admin_client,
    error_text,
    fetch_metadata,
    kafka_error,
    read_config_file,
    wait_result,
)
from moldau.cli.errors import CliError
from moldau.controller.assignment import BrokerMetadata, assign_replicas_to_brokers
from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode, KafkaError
from moldau.storage.partition_name import TopicPartition

ACTIONS = ("generate", "execute", "verify", "cancel", "list")
_REQUIRED = {
    "generate": ("topics_to_move_json_file", "broker_list"),
    "execute": ("reassignment_json_file",),
    "verify": ("reassignment_json_file",),
    "cancel": ("reassignment_json_file",),
    "list": (),
}
_PERMITTED = {
    "generate": {"topics_to_move_json_file", "broker_list", "disable_rack_aware"},
    "execute": {"reassignment_json_file", "additional", "throttle"},
    "verify": {"reassignment_json_file", "preserve_throttles"},
    "cancel": {"reassignment_json_file", "preserve_throttles"},
    "list": set(),
}
_OPTIONS = {
    "topics_to_move_json_file", "broker_list", "disable_rack_aware", "reassignment_json_file",
    "additional", "preserve_throttles", "throttle",
}  # fmt: skip

CANNOT_EXECUTE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. "
    "The --additional flag can also be used to change the throttle by resubmitting the "
    "current reassignment."
)

YOU_MUST_RUN_VERIFY = (
    "Warning: You must run --verify periodically, until the reassignment completes, to "
    "ensure the throttle is removed."
)
TOPIC, BROKER = ResourceType.TOPIC, ResourceType.BROKER

Assignment = dict[TopicPartition, list[int]]
# (resource type, name) -> config -> value to set, or None to delete
ConfigChanges = Mapping[tuple[ResourceType, str], Mapping[str, str | None]]


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "reassign-partitions",
        help="move partitions between brokers, as kafka-reassign-partitions.sh",
        description="Move partitions between brokers, as kafka-reassign-partitions.sh does.",
    )
    add_bootstrap_argument(p)
    for action in ACTIONS:
        p.add_argument(f"--{action}", action="store_true", help=f"the {action} action")
    p.add_argument("--topics-to-move-json-file", type=Path, metavar="FILE",
                   help='--generate: {"version": 1, "topics": [{"topic": "t"}]}')  # fmt: skip
    p.add_argument("--broker-list", metavar="1,2,3", help="--generate: the brokers to use")
    p.add_argument("--disable-rack-aware", action="store_true",
                   help="--generate: place replicas without the brokers' racks")  # fmt: skip
    p.add_argument("--reassignment-json-file", type=Path, metavar="FILE",
                   help='{"version": 1, "partitions": [{"topic": "t", "partition": 0, '
                   '"replicas": [1, 2]}]}')  # fmt: skip
    p.add_argument("--additional", action="store_true",
                   help="--execute: while other reassignments are in progress")  # fmt: skip
    p.add_argument("--throttle", type=int, metavar="B/s",
                   help="--execute: limit the copying between brokers to this many bytes/s; "
                   "--verify removes the limit once the reassignment is done")  # fmt: skip
    p.add_argument("--preserve-throttles", action="store_true",
                   help="--verify, --cancel: leave the throttles in place")  # fmt: skip
    add_command_config_argument(p)
    p.set_defaults(run=run)


def _action(args: argparse.Namespace) -> str:
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise CliError(
            "Command must include exactly one action: " + ", ".join(f"--{a}" for a in ACTIONS)
        )
    action = chosen[0]
    for name in _REQUIRED[action]:
        if getattr(args, name) in (None, False):
            raise CliError(f"--{action} needs --{name.replace('_', '-')}")
    if args.throttle is not None and args.throttle < 0:
        raise CliError(f"--throttle {args.throttle} is not a rate in bytes/s")
    for name in _OPTIONS - _PERMITTED[action]:
        if getattr(args, name) not in (None, False):
            raise CliError(f'Option "--{name.replace("_", "-")}" can\'t be used with action '
                           f'"--{action}"')  # fmt: skip
    return action


# -- JSON files, as Kafka's tool reads and writes them ----------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None
    except ValueError:
        raise CliError("The input string is not a valid JSON") from None


def parse_reassignment(data: Any) -> Assignment:
    """Kafka's parsePartitionReassignmentData and its checks."""
    try:
        version = int(data.get("version", 1))
        if version != 1:
            raise CliError(f"Not supported version field value {version}")
        entries = [
            (TopicPartition(str(e["topic"]), int(e["partition"])), [int(r) for r in e["replicas"]])
            for e in data.get("partitions", [])
        ]
    except (AttributeError, KeyError, TypeError, ValueError):
        raise CliError(
            'expected {"version": 1, "partitions": [{"topic": "t", "partition": 0, '
            '"replicas": [1, 2]}]}'
        ) from None
    if not entries:
        raise CliError("Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in entries):
        raise CliError("Partition replica list cannot be empty")
    partitions = [tp for tp, _ in entries]
    twice = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if twice:
        raise CliError(
            "Partition reassignment contains duplicate topic partitions: "
            + ",".join(map(str, twice))
        )
    dups = [
        f"{tp} contains multiple entries for "
        + ",".join(str(r) for r in sorted({r for r in rs if rs.count(r) > 1}))
        for tp, rs in entries
        if len(set(rs)) != len(rs)
    ]
    if dups:
        raise CliError(
            "Partition replica lists may not contain duplicate entries: " + ". ".join(dups)
        )
    return dict(entries)


def parse_topics(data: Any) -> list[str]:
    try:
        version = int(data.get("version", 1))
        if version != 1:
            raise CliError(f"Not supported version field value {version}")
        topics = [str(t["topic"]) for t in data.get("topics", [])]
    except (AttributeError, KeyError, TypeError, ValueError):
        raise CliError('expected {"version": 1, "topics": [{"topic": "t"}]}') from None
    twice = sorted({t for t in topics if topics.count(t) > 1})
    if twice:
        raise CliError(f"List of topics to reassign contains duplicate entries: {twice}")
    return topics


def reassignment_json(assignment: Mapping[TopicPartition, Iterable[int]]) -> str:
    """Kafka's formatAsReassignmentJson (compact, partitions sorted)."""
    partitions = []
    for tp in sorted(assignment):
        replicas = list(assignment[tp])
        partitions.append({"topic": tp.topic, "partition": tp.partition, "replicas": replicas,
                           "log_dirs": ["any"] * len(replicas)})  # fmt: skip
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def _list(items: Iterable[object]) -> str:
    return ",".join(str(i) for i in items)


def status_lines(
    targets: Assignment, ongoing: Mapping[TopicPartition, Any], current: Assignment
) -> list[str]:
    """Kafka's partitionReassignmentStatesToString."""
    lines = ["Status of partition reassignment:"]
    for tp in sorted(targets):
        if tp in ongoing:
            lines.append(f"Reassignment of partition {tp} is still in progress.")
        elif current.get(tp, []) == targets[tp]:
            lines.append(f"Reassignment of partition {tp} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {tp}, but replica set is "
                f"{_list(current.get(tp, []))} rather than {_list(targets[tp])}."
            )
    return lines


def list_lines(ongoing: Mapping[TopicPartition, Any]) -> list[str]:
    """Kafka's curReassignmentsToString."""
    if not ongoing:
        return ["No partition reassignments found."]
    lines = ["Current partition reassignments:"]
    for tp in sorted(ongoing):
        r = ongoing[tp]
        line = f"{tp}: replicas: {_list(r.replicas)}."
        if r.adding_replicas:
            line += f" adding: {_list(r.adding_replicas)}."
        if r.removing_replicas:
            line += f" removing: {_list(r.removing_replicas)}."
        lines.append(line)
    return lines


# -- talking to the cluster -------------------------------------------------------------


class Cluster:
    def __init__(self, admin: Any, watch: BrokerWatch, settings: Mapping[str, str]) -> None:
        """`settings`: the client settings, for the raw requests' TLS and SASL (the
        admin client's own)."""
        self.admin, self.watch = admin, watch
        self.settings = settings

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Cluster:
        """The cluster of the tool's --bootstrap-server and --command-config."""
        admin, watch = admin_client(args)
        return cls(admin, watch, read_config_file(args.command_config, "--command-config"))

    def replicas(self, topics: Iterable[str]) -> Assignment:
        """Current replicas of every partition of `topics` (Kafka's order)."""
        md = fetch_metadata(self.admin, self.watch)
        out: Assignment = {}
        for topic in topics:
            t = md.topics.get(topic)
            if t is None or t.error is not None:
                raise CliError(f"Topic {topic} not found.")
            for p, pm in t.partitions.items():
                out[TopicPartition(topic, int(p))] = [int(r) for r in pm.replicas]
        return out

    def brokers(self) -> list[BrokerMetadata]:
        try:
            described = wait_result(
                self.admin, self.watch, self.admin.describe_cluster(), "the cluster's brokers"
            )
        except KafkaException as e:
            err = kafka_error(e)
            raise CliError(error_text(err) if err is not None else str(e)) from None
        return [BrokerMetadata(n.id, n.rack) for n in described.nodes]

    def ongoing(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, Any]:
        """Reassignments in progress (ListPartitionReassignments)."""
        wanted = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(partitions):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            wanted = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        response = self._call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                              {"timeout": TIMEOUT_S * 1000, "topics": wanted})  # fmt: skip
        return {
            TopicPartition(t.name, p.partition_index): p
            for t in response.topics
            for p in t.partitions
        }

    def alter(
        self, targets: Mapping[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, str]:
        """Start (or, with None, cancel) reassignments; the error of each that failed."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, replicas in sorted(targets.items()):
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "replicas": replicas}
            )
        response = self._call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {
            "timeout": TIMEOUT_S * 1000,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        })  # fmt: skip
        errors = {}
        for t in response.responses:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    code = ErrorCode(p.error_code)
                    errors[TopicPartition(t.name, p.partition_index)] = (
                        p.error_message or _describe(code)
                    )
        return errors

    def cancel(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, str]:
        """Cancel the reassignments of `partitions` (no target replicas: back to the
        replicas they had); the error of each that could not be cancelled."""
        return self.alter(dict.fromkeys(TopicPartition(t, p) for t, p in partitions))

    def alter_configs(self, changes: ConfigChanges) -> None:
        """IncrementalAlterConfigs: for each (resource type, name), set (or, None,
        delete) configs."""
        resources = []
        for (restype, name), configs in sorted(changes.items()):
            entries = [
                ConfigEntry(key, value, incremental_operation=(
                    AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
                ))
                for key, value in configs.items()
            ]  # fmt: skip
            resources.append(ConfigResource(restype, name, incremental_configs=entries))
        # One call per resource: a BROKER resource goes to that broker, alone.
        for resource in resources:
            future = self.admin.incremental_alter_configs([resource])[resource]
            try:
                wait_result(self.admin, self.watch, future, f"the configs of {resource.name}")
            except KafkaException as e:
                err = kafka_error(e)
                raise CliError(error_text(err) if err is not None else str(e)) from None

    def _call(self, api_key: ApiKey, version: int, fields: dict[str, Any]) -> Any:
        """One request to the active controller; on NOT_CONTROLLER or a lost
        connection, ask the cluster again who it is, until the timeout."""
        fields = {**fields, "timeout": _ms(fields["timeout"])}
        deadline = time.monotonic() + TIMEOUT_S
        problem = "no controller"
        with AdminCalls("reassign-partitions-tool", TIMEOUT_S, self.settings) as calls:
            while time.monotonic() < deadline:
                md = fetch_metadata(self.admin, self.watch)
                broker = md.brokers.get(md.controller_id)
                if broker is not None:
                    try:
                        response = calls.call((broker.host, broker.port), api_key, version, fields)
                    except CallError as e:
                        problem = e.reason
                    else:
                        code = ErrorCode(response.error_code)
                        if code != ErrorCode.not_controller:
                            if code != ErrorCode.none:
                                raise CliError(response.error_message or _describe(code))
                            return response
                        problem = "the broker asked is no longer the controller"
                time.sleep(0.2)
        raise CliError(f"cannot reach the controller: {problem}")


def _ms(value: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def _describe(code: ErrorCode) -> str:
    return code.name.upper()


# -- the actions ------------------------------------------------------------------------


def generate(cluster: Cluster, args: argparse.Namespace) -> int:
    topics = parse_topics(_read_json(args.topics_to_move_json_file))
    try:
        broker_ids = [int(b) for b in args.broker_list.split(",")]
    except ValueError:
        raise CliError(f"--broker-list {args.broker_list!r} is not a list of broker ids") from None
    twice = sorted({b for b in broker_ids if broker_ids.count(b) > 1})
    if twice:
        raise CliError(f"Broker list contains duplicate entries: {twice}")
    current = cluster.replicas(topics)
    wanted = set(broker_ids)
    brokers = [
        BrokerMetadata(b.id, None if args.disable_rack_aware else b.rack)
        for b in cluster.brokers()
        if b.id in wanted
    ]
    racks = sum(1 for b in brokers if b.rack is not None)
    if 0 < racks < len(brokers):
        raise CliError(
            "Not all brokers have rack information. Add --disable-rack-aware in command line "
            "to make replica assignment without rack information."
        )
    proposed: Assignment = {}
    for topic in topics:
        parts = sorted(tp for tp in current if tp.topic == topic)
        try:
            placed = assign_replicas_to_brokers(brokers, len(parts), len(current[parts[0]]))
        except KafkaError as e:
            raise CliError(e.message or str(e)) from None
        for p, replicas in placed.items():
            proposed[TopicPartition(topic, p)] = replicas
    print(f"Current partition replica assignment\n{reassignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{reassignment_json(proposed)}")
    return 0


BROKER_THROTTLES = (
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
)
TOPIC_THROTTLES = (
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
)


def throttled_replicas(
    targets: Assignment, current: Assignment, ongoing: Mapping[TopicPartition, Any]
) -> dict[str, tuple[str, str]]:
    """Per topic, the leader-side throttled replicas (every source replica) and the
    follower-side ones (every destination), as Kafka's calculateProposedMoveMap."""
    moves: dict[TopicPartition, tuple[set[int], set[int]]] = {}
    for tp, r in ongoing.items():
        moves[tp] = (set(r.replicas) - set(r.adding_replicas), set(r.adding_replicas))
    for tp, replicas in targets.items():
        sources = moves[tp][0] if tp in moves else set(current[tp])
        moves[tp] = (sources, set(replicas) - sources)
    out: dict[str, tuple[set[tuple[int, int]], set[tuple[int, int]]]] = {}
    for tp, (sources, destinations) in moves.items():
        leader, follower = out.setdefault(tp.topic, (set(), set()))
        leader |= {(tp.partition, b) for b in sources}
        follower |= {(tp.partition, b) for b in destinations}
    return {
        topic: (
            _list(f"{p}:{b}" for p, b in sorted(lead)),
            _list(f"{p}:{b}" for p, b in sorted(fol)),
        )
        for topic, (lead, fol) in out.items()
    }


def _brokers_of(throttles: Mapping[str, tuple[str, str]]) -> set[int]:
    return {
        int(item.split(":")[1]) for pair in throttles.values() for side in pair
        for item in side.split(",") if item
    }  # fmt: skip


def _set_throttles(
    cluster: Cluster, throttle: int, throttles: Mapping[str, tuple[str, str]]
) -> None:
    topics = {(TOPIC, t): {TOPIC_THROTTLES[0]: lead, TOPIC_THROTTLES[1]: fol}
              for t, (lead, fol) in throttles.items()}  # fmt: skip
    cluster.alter_configs(topics)
    rate = str(throttle)
    brokers = {(BROKER, str(b)): {BROKER_THROTTLES[0]: rate, BROKER_THROTTLES[1]: rate}
               for b in sorted(_brokers_of(throttles))}  # fmt: skip
    cluster.alter_configs(brokers)
    print(f"The inter-broker throttle limit was set to {throttle} B/s")


def _clear_throttles(cluster: Cluster, targets: Assignment) -> None:
    """Kafka's clearAllThrottles: every broker of the cluster and of the targets,
    every topic of the targets."""
    brokers = sorted({b.id for b in cluster.brokers()} | {r for rs in targets.values() for r in rs})
    plural = "" if len(brokers) == 1 else "s"
    print(f"Clearing broker-level throttles on broker{plural} {_list(brokers)}")
    cluster.alter_configs({(BROKER, str(b)): dict.fromkeys(BROKER_THROTTLES) for b in brokers})
    topics = sorted({tp.topic for tp in targets})
    plural = "" if len(topics) == 1 else "s"
    print(f"Clearing topic-level throttles on topic{plural} {_list(topics)}")
    cluster.alter_configs({(TOPIC, t): dict.fromkeys(TOPIC_THROTTLES) for t in topics})


def execute(cluster: Cluster, args: argparse.Namespace) -> int:
    targets = parse_reassignment(_read_json(args.reassignment_json_file))
    ongoing = cluster.ongoing()
    if not args.additional and ongoing:
        raise CliError(CANNOT_EXECUTE)
    known = {b.id for b in cluster.brokers()}
    unknown = sorted({r for rs in targets.values() for r in rs} - known)
    if unknown:
        raise CliError(f"Unknown broker id {unknown[0]}")
    current = cluster.replicas({tp.topic for tp in targets})
    missing = sorted(set(targets) - set(current))
    if missing:
        raise CliError("Unable to find partition: " + ", ".join(map(str, missing)))
    print("Current partition replica assignment\n")
    print(reassignment_json({tp: current[tp] for tp in targets}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    if args.throttle is not None:
        print(YOU_MUST_RUN_VERIFY)
        _set_throttles(cluster, args.throttle, throttled_replicas(targets, current, ongoing))
    errors = cluster.alter(dict(targets))
    if errors:
        return _failed("Error reassigning partition(s):", errors)
    plural = "" if len(targets) == 1 else "s"
    print(f"Successfully started partition reassignment{plural} for {_list(sorted(targets))}")
    return 0


def _failed(heading: str, errors: Mapping[TopicPartition, str]) -> int:
    """Kafka's TerseException: the heading, a line per partition, exit code 1."""
    print(heading)
    for tp in sorted(errors):
        print(f"{tp}: {errors[tp]}")
    return 1


def verify(cluster: Cluster, args: argparse.Namespace) -> int:
    targets = parse_reassignment(_read_json(args.reassignment_json_file))
    ongoing = cluster.ongoing()
    current = cluster.replicas({tp.topic for tp in targets if tp not in ongoing})
    print("\n".join(status_lines(targets, ongoing, current)))
    if not ongoing and not args.preserve_throttles:
        _clear_throttles(cluster, targets)
    return 0


def cancel(cluster: Cluster, args: argparse.Namespace) -> int:
    targets = parse_reassignment(_read_json(args.reassignment_json_file))
    active = sorted(cluster.ongoing(targets))
    if not active:
        print("None of the specified partition reassignments are active.")
    else:
        errors = cluster.cancel(active)
        if errors:
            plural = "" if len(errors) == 1 else "s"
            return _failed(f"Error cancelling partition reassignment{plural} for:", errors)
        plural = "" if len(active) == 1 else "s"
        print(f"Successfully cancelled partition reassignment{plural} for: {_list(active)}")
    if not args.preserve_throttles:
        _clear_throttles(cluster, targets)
    return 0


def list_reassignments(cluster: Cluster, args: argparse.Namespace) -> int:
    print("\n".join(list_lines(cluster.ongoing())))
    return 0


_RUN = {
    "generate": generate,
    "execute": execute,
    "verify": verify,
    "cancel": cancel,
    "list": list_reassignments,
}


def run(args: argparse.Namespace) -> int:
    action = _action(args)
    cluster = Cluster.from_args(args)
    return _RUN[action](cluster, args)
