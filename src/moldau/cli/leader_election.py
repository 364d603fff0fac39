"""`moldau leader-election`: preferred-replica or unclean leader elections on
demand, as kafka-leader-election.sh runs them (ElectLeaders through confluent-kafka's
AdminClient), with its output:

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: <reason>

A partition whose leader could not be elected makes the exit code 1, as Kafka's
tool fails with "N replica(s) could not be elected".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from moldau.cli.common import (
    BrokerWatch,
    add_bootstrap_argument,
    client_config,
    error_text,
    kafka_error,
    make_client,
    read_config_file,
    wait_result,
)
from moldau.cli.errors import CliError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "leader-election",
        help="elect preferred or unclean leaders, as kafka-leader-election.sh",
        description="Elect leaders of partitions, as kafka-leader-election.sh does.",
    )
    add_bootstrap_argument(p)
    p.add_argument(
        "--election-type",
        required=True,
        type=str.upper,
        choices=("PREFERRED", "UNCLEAN"),
        help="preferred: the first replica of the assignment, where it is live and in "
        "the ISR; unclean: any live replica of a partition that has no leader",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--all-topic-partitions", action="store_true", help="every partition of the cluster"
    )
    which.add_argument("--topic", help="the topic of the partition to elect (with --partition)")
    which.add_argument(
        "--path-to-json-file",
        type=Path,
        help='partitions as JSON: {"partitions": [{"topic": "t", "partition": 0}]}',
    )
    p.add_argument("--partition", type=int, help="the partition of --topic")
    p.add_argument("--admin.config", dest="admin_config", type=Path, help="client settings file")
    p.set_defaults(run=run)


def _partitions(args: argparse.Namespace) -> list[TopicPartition] | None:
    if args.all_topic_partitions:
        if args.partition is not None:
            raise CliError("--partition goes with --topic, not --all-topic-partitions")
        return None
    if args.topic is not None:
        if args.partition is None:
            raise CliError("--topic needs --partition")
        return [TopicPartition(args.topic, args.partition)]
    if args.partition is not None:
        raise CliError("--partition goes with --topic")
    try:
        data = json.loads(args.path_to_json_file.read_text())
        entries = data["partitions"]
        return [TopicPartition(str(e["topic"]), int(e["partition"])) for e in entries]
    except OSError as e:
        raise CliError(f"cannot read {args.path_to_json_file}: {e.strerror}") from None
    except (ValueError, KeyError, TypeError):
        raise CliError(
            f"{args.path_to_json_file} is not JSON like "
            '{"partitions": [{"topic": "t", "partition": 0}]}'
        ) from None


def run(args: argparse.Namespace) -> int:
    partitions = _partitions(args)
    election = ElectionType[args.election_type]
    watch = BrokerWatch(args.bootstrap_server)
    conf = client_config(
        args.bootstrap_server, watch, read_config_file(args.admin_config, "--admin.config")
    )
    admin = make_client(AdminClient, conf)
    try:
        results = wait_result(
            admin, watch, admin.elect_leaders(election, partitions), "the leader election"
        )
    except KafkaException as e:
        err = kafka_error(e)
        raise CliError(error_text(err) if err is not None else str(e)) from None
    name = args.election_type
    done, not_needed, failed = [], [], []
    for tp, error in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        label = f"{tp.topic}-{tp.partition}"
        # A KafkaError per partition (confluent-kafka's docs say KafkaException).
        err = error if isinstance(error, KafkaError) or error is None else kafka_error(error)
        if error is None:
            done.append(label)
        elif err is not None and err.code() == KafkaError.ELECTION_NOT_NEEDED:
            not_needed.append(label)
        else:
            failed.append((label, error_text(err) if err is not None else str(error)))
    if done:
        print(f"Successfully completed leader election ({name}) for partitions {', '.join(done)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for label, reason in failed:
        print(f"Error completing leader election ({name}) for partition: {label}: {reason}")
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0
