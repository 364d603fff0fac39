"""The console's groups, reassignments and security data: what a form becomes, how
lag and a reassignment's progress are counted,."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from moldau.cli.acls import binding, resource_to_entries
from moldau.cli.errors import CliError
from moldau.security.acl import AclOperation, PatternType, ResourceType
from moldau.storage.partition_name import TopicPartition
from moldau.ui import api_groups
from moldau.ui.groups import (
    offset_delete_errors,
    offset_delete_fields,
    reset_args,
    total_lag,
)
from moldau.ui.history import History
from moldau.ui.reassignments import Offsets, catch_up_fraction, progress_rows
from moldau.ui.security import (
    NO_AUTHORIZER,
    acl_args,
    acl_from_json,
    acl_json,
    acls_unreadable,
)


def test_total_lag_counts_only_partitions_with_a_known_end() -> None:
    committed = {("t", 0): 5, ("t", 1): 10, ("u", 0): 3}
    ends = {("t", 0): 8, ("t", 1): 10, ("u", 0): None}
    assert total_lag(committed, ends) == 3
    assert total_lag({}, {}) == 0


def test_reset_args_are_the_clis() -> None:
    args = reset_args({"scenario": "shift-by", "value": "-2", "topics": ["t:0,1"]})
    assert args.shift_by == -2 and args.to_earliest is None
    assert args.topic == ["t:0,1"] and not args.all_topics
    args = reset_args({"scenario": "to-earliest"})
    assert args.to_earliest is True and args.all_topics and args.topic == []
    assert reset_args({"scenario": "by-duration", "value": "PT1H"}).by_duration == "PT1H"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"scenario": "to-somewhere"}, "scenario must be one of"),
        ({"scenario": "to-offset"}, "--to-offset needs a value"),
        ({"scenario": "to-offset", "value": "x"}, "expects an integer"),
        ({"scenario": "to-latest", "topics": [":1"]}, "invalid --topic"),
    ],
)
def test_reset_args_refuse_what_the_cli_refuses(body: dict[str, object], message: str) -> None:
    with pytest.raises(CliError, match=message):
        reset_args(body)


def test_offset_delete_request_and_answer() -> None:
    fields = offset_delete_fields("g", [("t", 1), ("t", 0), ("u", 2), ("t", 0)])
    assert fields == {
        "group_id": "g",
        "topics": [
            {"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 1}]},
            {"name": "u", "partitions": [{"partition_index": 2}]},
        ],
    }
    part = SimpleNamespace
    response = part(
        error_code=0,
        topics=[part(name="t", partitions=[part(partition_index=0, error_code=0),
                                           part(partition_index=1, error_code=86)])],
    )  # fmt: skip
    assert offset_delete_errors(response) == {"t-1": "GROUP_SUBSCRIBED_TO_TOPIC"}
    with pytest.raises(CliError, match="GROUP_ID_NOT_FOUND"):
        offset_delete_errors(part(error_code=69, topics=[]))


def test_catch_up_fraction() -> None:
    assert catch_up_fraction(100, 200, None) == 0.0
    assert catch_up_fraction(100, 200, 150) == 0.5
    assert catch_up_fraction(100, 200, 250) == 1.0  # a follower a fetch ahead of the HW
    assert catch_up_fraction(100, 200, 0) == 0.0
    assert catch_up_fraction(7, 7, None) == 1.0  # an empty log: nothing to copy


def test_progress_rows_take_the_slowest_adding_replica() -> None:
    ongoing = {
        TopicPartition("t", 0): SimpleNamespace(
            replicas=[1, 2, 3], adding_replicas=[2, 3], removing_replicas=[1]
        )
    }
    offsets = Offsets({("t", 0): 0}, {("t", 0): 100}, {(2, ("t", 0)): 100, (3, ("t", 0)): 25})
    (row,) = progress_rows(ongoing, {("t", 0): 1}, offsets)
    assert row["leader"] == 1 and row["adding"] == [2, 3] and row["removing"] == [1]
    assert [p["fraction"] for p in row["progress"]] == [1.0, 0.25]
    assert row["fraction"] == 0.25
    (unknown,) = progress_rows(ongoing, {}, Offsets({}, {}, {}))
    assert unknown["fraction"] == 0.0 and unknown["leader"] == -1


def test_acl_form_becomes_the_tools_arguments() -> None:
    form = {
        "resourceType": "topic",
        "name": "orders",
        "patternType": "prefixed",
        "permission": "deny",
        "principal": "User:bob",
        "operations": ["Write", "Read"],
    }
    ((resource, entries),) = resource_to_entries(acl_args(form)).items()
    assert resource == (ResourceType.TOPIC, "orders", PatternType.PREFIXED)
    assert sorted(e.operation for e in entries) == [AclOperation.READ, AclOperation.WRITE]
    assert {(e.principal, e.host, e.permission.name) for e in entries} == {
        ("User:bob", "*", "DENY")
    }
    consumer = {"resourceType": "group", "name": "g", "principal": "User:a", "preset": "consumer"}
    ((group, entries),) = resource_to_entries(acl_args(consumer)).items()
    assert [e.operation for e in entries] == [AclOperation.READ]
    row = acl_json(binding(group, entries[0]))
    assert row == {"resourceType": "GROUP", "name": "g", "patternType": "LITERAL",
                   "principal": "User:a", "host": "*", "operation": "READ",
                   "permission": "ALLOW"}  # fmt: skip
    exact = acl_from_json(row)
    assert (exact.restype.name, exact.name, exact.operation.name) == ("GROUP", "g", "READ")


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"resourceType": "table", "name": "x"}, "resourceType must be one of"),
        ({"resourceType": "topic"}, "needs a resource name"),
        ({"resourceType": "topic", "name": "t", "principal": "alice"}, "Type:name"),
        ({"resourceType": "topic", "name": "t", "preset": "admin"}, "preset must be"),
    ],
)
def test_acl_form_mistakes(form: dict[str, object], message: str) -> None:
    with pytest.raises(CliError, match=message):
        resource_to_entries(acl_args(form))


class FakeCluster:
    """One broker that answers DescribeAcls with `code`."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.answer = SimpleNamespace(error_code=code, error_message=message)
        self.asked: list[tuple[object, ...]] = []

    async def metadata(self) -> object:
        return SimpleNamespace(brokers={1: SimpleNamespace(host="h", port=9092)})

    async def call(self, address: object, api_key: int, version: int, fields: object) -> object:
        self.asked.append((address, api_key))
        return self.answer


@pytest.mark.parametrize(
    ("code", "message", "note"),
    [
        (0, None, None),
        (54, "No Authorizer is configured", NO_AUTHORIZER),
        (
            31,
            "Cluster authorization failed.",
            "CLUSTER_AUTHORIZATION_FAILED: Cluster authorization failed.",
        ),
    ],
)
def test_why_the_acls_cannot_be_listed(code: int, message: str | None, note: str | None) -> None:
    cluster = FakeCluster(code, message)
    assert asyncio.run(acls_unreadable(cluster)) == note
    assert cluster.asked == [(("h", 9092), 29)]


def test_a_lag_sample_that_outlives_its_round_lands_late_and_is_not_doubled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    calls: list[int] = []

    def slow_lags(_: object) -> dict[str, int]:
        calls.append(1)
        assert release.wait(5)
        return {"g": 7}

    monkeypatch.setattr(api_groups.groups, "group_lags", slow_lags)
    monkeypatch.setattr(api_groups.groups, "console_groups", lambda cluster: None)
    monkeypatch.setattr(api_groups, "SAMPLE_WAIT_S", 0.05)

    class Cluster:  # what sample() uses of a ClusterClient
        history = History()
        run = staticmethod(asyncio.to_thread)

    cluster = Cluster()

    async def rounds() -> list[list[float]]:
        await api_groups.sample(cluster, 1_000)  # type: ignore[arg-type]
        await api_groups.sample(cluster, 3_000)  # type: ignore[arg-type]  # skipped: busy
        assert cluster.history.points_of("group.g.lag") == []
        release.set()
        for _ in range(200):
            if cluster.history.points_of("group.g.lag"):
                break
            await asyncio.sleep(0.01)
        return cluster.history.points_of("group.g.lag")

    assert asyncio.run(rounds()) == [[1_000, 7]]
    assert len(calls) == 1
