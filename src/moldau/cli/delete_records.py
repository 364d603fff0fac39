"""`moldau delete-records`: delete the records of partitions below an offset, as
kafka-delete-records.sh (DeleteRecordsCommand) does, from a JSON file

    {"partitions": [{"topic": "t", "partition": 0, "offset": 12}], "version": 1}

(offset -1: up to the high watermark), printing what each partition's log start became:

    Executing records delete operation
    Records delete operation completed:
    partition: t-0	low_watermark: 12
    partition: t-1	error: OFFSET_OUT_OF_RANGE

As Kafka's tool, a partition's error does not change the exit code; a file it cannot
use does. DeleteRecords (21) goes on the wire to each partition's leader
(cli/admin_call.py), again to the new one if it moved (cli/leader_requests.py). A
topic that does not exist is an error at once, where Kafka's tool waits out its admin
client's timeout for the topic to appear.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
from collections import Counter
from pathlib import Path
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
from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode

DELETE_RECORDS_VERSION = 2  # the newest both Moldau and Kafka 4.x serve


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "delete-records",
        help="delete records below an offset, as kafka-delete-records.sh",
        description="Delete the records of partitions below the offsets a JSON file gives, "
        "as kafka-delete-records.sh does.",
    )
    add_bootstrap_argument(p)
    add_command_config_argument(p)
    p.add_argument(
        "--offset-json-file",
        type=Path,
        required=True,
        metavar="FILE",
        help='the offset per partition: {"partitions": [{"topic": "foo", "partition": 1, '
        '"offset": 1}], "version": 1}; offset -1 means the high watermark',
    )
    p.set_defaults(run=run)


def parse_offsets(text: str) -> list[tuple[Partition, int]]:
    """The file's (partition, offset)s in its order; a partition named twice is an
    error, as in Kafka's tool."""
    try:
        data = json.loads(text)
        version = data.get("version", 1)
        if version != 1:
            raise CliError(f"version {version!r} is not supported (only 1)")
        if "partitions" not in data:
            raise CliError("the file has no partitions field")
        entries = [
            ((str(e["topic"]), int(e["partition"])), int(e["offset"])) for e in data["partitions"]
        ]
    except json.JSONDecodeError:
        raise CliError("the file is not valid JSON") from None
    except (AttributeError, KeyError, TypeError, ValueError):
        raise CliError(
            'the file is not like {"partitions": [{"topic": "foo", "partition": 1, '
            '"offset": 1}], "version": 1}'
        ) from None
    counts = Counter(tp for tp, _ in entries)
    duplicates = sorted(tp for tp, n in counts.items() if n > 1)
    if duplicates:
        names = ",".join(f"{t}-{p}" for t, p in duplicates)
        raise CliError(f"the file names partitions more than once: {names}")
    return entries


def run(args: argparse.Namespace) -> int:
    path: Path = args.offset_json_file
    try:
        text = path.read_text()
    except OSError as e:
        raise CliError(f"--offset-json-file: cannot read {path}: {e.strerror or e}") from None
    try:
        entries = parse_offsets(text)
    except CliError as e:
        raise CliError(f"--offset-json-file {path}: {e}") from None
    admin, watch = admin_client(args)
    offsets = dict(entries)
    print("Executing records delete operation")
    with tool_calls(args, "delete-records-tool") as calls:
        answers = ask_leaders(
            lambda: fetch_metadata(admin, watch),
            functools.partial(_delete, calls, offsets),
            list(offsets),
            TIMEOUT_S,
        )
    print("Records delete operation completed:")
    for (topic, p), _ in entries:
        answer = answers[(topic, p)]
        if answer.error is not None:
            print(f"partition: {topic}-{p}\terror: {answer.error}")
        else:
            print(f"partition: {topic}-{p}\tlow_watermark: {answer.value}")
    return 0


def _delete(
    calls: AdminCalls, offsets: dict[Partition, int], address: Address, asked: list[Partition]
) -> dict[Partition, Answer]:
    """One DeleteRecords to one leader for some of its partitions."""
    topics: dict[str, list[dict[str, int]]] = {}
    for topic, p in asked:
        topics.setdefault(topic, []).append({"partition_index": p, "offset": offsets[(topic, p)]})
    request = {
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        "timeout": datetime.timedelta(seconds=TIMEOUT_S),
    }
    response = calls.call(address, ApiKey.DELETE_RECORDS, DELETE_RECORDS_VERSION, request)
    return {
        (t.name, int(d.partition_index)): (
            error_answer(d.error_code)
            if d.error_code != ErrorCode.none
            else Answer(int(d.low_watermark))
        )
        for t in response.topics
        for d in t.partitions
    }
