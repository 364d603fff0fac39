"""kafka-reassign-partitions' file checks and output, as `moldau reassign-partitions`
prints them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from moldau.cli.errors import CliError
from moldau.cli.reassign_partitions import (
    list_lines,
    parse_reassignment,
    reassignment_json,
    status_lines,
)
from moldau.storage.partition_name import TopicPartition as TP


def plan(*entries: tuple[str, int, list[int]]) -> dict[str, object]:
    return {
        "version": 1,
        "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries],
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (plan(), "Partition reassignment list cannot be empty"),
        (plan(("a", 0, [])), "Partition replica list cannot be empty"),
        (plan(("a", 0, [1]), ("a", 0, [2])), "duplicate topic partitions: a-0"),
        (plan(("a", 0, [1, 1, 2])), "a-0 contains multiple entries for 1"),
        ({"version": 2, "partitions": []}, "Not supported version field value 2"),
        ({"partitions": [{"topic": "a"}]}, "expected"),
    ],
)
def test_bad_reassignment_files_are_refused_as_kafka_does(
    data: dict[str, object], message: str
) -> None:
    with pytest.raises(CliError, match=message):
        parse_reassignment(data)


def test_output_is_kafkas() -> None:
    targets = parse_reassignment(plan(("b", 1, [3, 2]), ("a", 0, [2, 3]), ("a", 1, [1])))
    assert reassignment_json({TP("a", 0): [2, 3]}) == (
        '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[2,3],'
        '"log_dirs":["any","any"]}]}'
    )
    ongoing = {TP("b", 1): SimpleNamespace(replicas=(3, 2, 1), adding_replicas=(3,),
                                            removing_replicas=(1,))}  # fmt: skip
    current = {TP("a", 0): [2, 3], TP("a", 1): [2]}
    assert status_lines(targets, ongoing, current) == [
        "Status of partition reassignment:",
        "Reassignment of partition a-0 is completed.",
        "There is no active reassignment of partition a-1, but replica set is 2 rather than 1.",
        "Reassignment of partition b-1 is still in progress.",
    ]
    assert list_lines(ongoing) == [
        "Current partition reassignments:",
        "b-1: replicas: 3,2,1. adding: 3. removing: 1.",
    ]
    assert list_lines({}) == ["No partition reassignments found."]
