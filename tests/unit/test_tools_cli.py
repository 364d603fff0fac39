"""The parts of `moldau get-offsets`, `delete-records` and `broker-api-versions` that
need no broker: Kafka's `--topic-partitions` rules and `--time` words, the offsets file,
the "usable" version shown against brokers newer or older than Moldau, and asking a
moved leader again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from moldau.cli.admin_call import Address, CallError
from moldau.cli.broker_api_versions import api_name, version_lines
from moldau.cli.delete_records import parse_offsets
from moldau.cli.errors import CliError
from moldau.cli.get_offsets import chosen_partitions, parse_rules, parse_time
from moldau.cli.leader_requests import Answer, Partition, ask_leaders, error_answer
from moldau.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from moldau.protocol.errors import ErrorCode

TOPICS = {"orders": range(12), "audit": range(2), "__consumer_offsets": range(3)}


def chosen(
    topic: str | None = None,
    partitions: str | None = None,
    rules: str | None = None,
    exclude_internal: bool = False,
) -> list[tuple[str, int]]:
    return chosen_partitions(TOPICS, parse_rules(topic, partitions, rules), exclude_internal)


def test_topic_partition_rules_take_kafkas_ranges_and_regexes() -> None:
    # N-M is upper-exclusive; N- and -M are open; a bare regex takes every partition.
    assert chosen(rules="orders:2-4,audit") == [
        ("audit", 0),
        ("audit", 1),
        ("orders", 2),
        ("orders", 3),
    ]
    assert chosen(rules="orders:10-") == [("orders", 10), ("orders", 11)]
    assert chosen(rules="ord.*:-2,:1") == [
        ("__consumer_offsets", 1),
        ("audit", 1),
        ("orders", 0),
        ("orders", 1),
    ]
    # The regex matches the whole name; `,` in --topic separates alternatives.
    assert chosen(topic="ord") == []
    assert chosen(topic="audit,ord.*", partitions="1,11") == [
        ("audit", 1),
        ("orders", 1),
        ("orders", 11),
    ]
    assert {t for t, _ in chosen(exclude_internal=True)} == {"orders", "audit"}
    # Kafka's order: by the text `topic-partition`.
    assert [p for _, p in chosen(topic="orders")][:4] == [0, 1, 10, 11]


@pytest.mark.parametrize(
    ("topic", "partitions", "rules"),
    [
        (None, "1,x", None),
        ("t", None, "t:1"),
        (None, "1", "t:1"),
        (None, None, "t:a-b"),
        ("(", None, None),
    ],
)
def test_bad_partition_choices_are_cli_errors(
    topic: str | None, partitions: str | None, rules: str | None
) -> None:
    with pytest.raises(CliError):
        parse_rules(topic, partitions, rules)


def test_time_takes_the_words_and_the_numbers() -> None:
    assert [parse_time(w) for w in ("latest", "earliest", "max-timestamp")] == [-1, -2, -3]
    assert [parse_time(w) for w in ("earliest-local", "latest-tiered", "-5")] == [-4, -5, -5]
    assert parse_time("1700000000000") == 1700000000000
    with pytest.raises(CliError, match="--time"):
        parse_time("yesterday")


def test_the_offsets_file_keeps_its_order_and_refuses_duplicates() -> None:
    text = '{"partitions": [{"topic": "b", "partition": 1, "offset": 5}, '
    text += '{"topic": "a", "partition": 0, "offset": -1}]}'
    assert parse_offsets(text) == [(("b", 1), 5), (("a", 0), -1)]
    twice = '{"version": 1, "partitions": [{"topic": "a", "partition": 0, "offset": 1}, '
    twice += '{"topic": "a", "partition": 0, "offset": 2}]}'
    with pytest.raises(CliError, match="a-0"):
        parse_offsets(twice)
    with pytest.raises(CliError, match="partitions"):
        parse_offsets('{"version": 1}')


def test_usable_is_the_newest_version_both_sides_speak() -> None:
    produce_max = SUPPORTED_VERSIONS[ApiKey.PRODUCE][1]
    lines = version_lines(
        {
            ApiKey.PRODUCE: (3, produce_max + 2),  # a newer broker
            ApiKey.FETCH: (0, 4),  # an older one
            ApiKey.DESCRIBE_ACLS: (0, 0),  # only versions older than Moldau speaks
            ApiKey.OFFSET_DELETE: (1, 1),  # only versions newer than Moldau speaks
            34: (0, 2),  # AlterReplicaLogDirs: Kafka's, not Moldau's
            999: (0, 1),
        }
    )
    assert lines[:3] == [
        f"Produce(0): 3 to {produce_max + 2} [usable: {produce_max}]",
        "Fetch(1): 0 to 4 [usable: 4]",
        "ListOffsets(2): UNSUPPORTED",
    ]
    assert "DescribeAcls(29): 0 [unusable: node too old]" in lines
    assert "OffsetDelete(47): 1 [unusable: node too new]" in lines
    assert "AlterReplicaLogDirs(34): 0 to 2" in lines
    assert lines[-1] == "UNKNOWN(999): 0 to 1"
    # Requests between brokers are not a client's to miss.
    assert not any(line.startswith("LeaderAndIsr(4)") for line in lines)
    assert api_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"


class FakeCluster:
    """Metadata whose leaders a test moves, and leaders that answer from a script."""

    def __init__(self, leaders: dict[tuple[str, int], int]) -> None:
        self.leaders = leaders
        self.sent: list[tuple[Address, list[Partition]]] = []
        self.now = 0.0

    def metadata(self) -> Any:
        topics: dict[str, Any] = {}
        for (topic, p), leader in self.leaders.items():
            t = topics.setdefault(topic, SimpleNamespace(error=None, partitions={}))
            t.partitions[p] = SimpleNamespace(leader=leader)
        brokers = {i: SimpleNamespace(host="h", port=i) for i in (1, 2)}
        return SimpleNamespace(topics=topics, brokers=brokers)

    def pause(self, seconds: float) -> None:
        self.now += seconds


def test_leader_requests_follow_a_moved_leader_and_give_up_at_the_timeout() -> None:
    cluster = FakeCluster({("t", 0): 1, ("t", 1): 2, ("t", 2): -1})

    def send(address: Address, asked: list[Partition]) -> dict[Partition, Answer]:
        cluster.sent.append((address, asked))
        if address == ("h", 2):
            raise CallError(address, "connection refused")
        if len(cluster.sent) == 1:
            cluster.leaders[("t", 0)] = 2  # moved: broker 1 says so, broker 2 is down
            return {tp: error_answer(ErrorCode.not_leader_or_follower) for tp in asked}
        return {tp: Answer(7) for tp in asked}

    answers = ask_leaders(
        cluster.metadata,
        send,
        [("t", 0), ("t", 1), ("t", 2), ("gone", 0)],
        timeout_s=1.0,
        clock=lambda: cluster.now,
        pause=cluster.pause,
    )
    assert answers[("gone", 0)] == Answer(error="UNKNOWN_TOPIC_OR_PARTITION")
    assert answers[("t", 2)].error == "LEADER_NOT_AVAILABLE"
    assert (
        answers[("t", 0)].error
        == answers[("t", 1)].error
        == ("cannot reach broker at h:2: connection refused")
    )
    assert cluster.now >= 1.0  # asked until the timeout, not once
    # Broker 2 came back: the next attempt is answered, a non-retriable error at once.
    cluster.sent.clear()

    def send_ok(address: Address, asked: list[Partition]) -> dict[Partition, Answer]:
        cluster.sent.append((address, asked))
        return {tp: error_answer(ErrorCode.offset_out_of_range) for tp in asked}

    answers = ask_leaders(cluster.metadata, send_ok, [("t", 0)], 1.0, lambda: 0.0, cluster.pause)
    assert answers == {("t", 0): Answer(error="OFFSET_OUT_OF_RANGE")}
    assert cluster.sent == [(("h", 2), [("t", 0)])]


def test_leader_requests_use_the_metadata_the_tool_already_has_for_the_first_round() -> None:
    cluster = FakeCluster({("t", 0): 1})
    known = cluster.metadata()
    asked_for_metadata = []

    def metadata() -> Any:
        asked_for_metadata.append(1)
        return cluster.metadata()

    def send(address: Address, asked: list[Partition]) -> dict[Partition, Answer]:
        cluster.sent.append((address, asked))
        if len(cluster.sent) == 1:
            return {tp: error_answer(ErrorCode.not_leader_or_follower) for tp in asked}
        return {tp: Answer(3) for tp in asked}

    answers = ask_leaders(metadata, send, [("t", 0)], 1.0, lambda: 0.0, cluster.pause, known)
    assert answers == {("t", 0): Answer(3)}
    # One Metadata, for the second round only: the first used what the tool had.
    assert asked_for_metadata == [1]
