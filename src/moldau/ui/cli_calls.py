"""The CLI's code run for the console: blocking (librdkafka), so on the cluster's
threads; its CliError, a refusal or a mistake worded as Kafka's tools word it, is
an answer the page shows (400, or 404 for a group that does not exist)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from moldau.cli.errors import CliError
from moldau.ui.cluster import ClusterClient
from moldau.ui.groups import GroupNotFound
from moldau.ui.json import UiError

T = TypeVar("T")


async def run_cli(cluster: ClusterClient, fn: Callable[..., T], *args: Any) -> T:
    try:
        return await cluster.run(fn, *args)
    except GroupNotFound as e:
        raise UiError(404, str(e)) from None
    except CliError as e:
        raise UiError(400, str(e)) from None


def partitions_of(items: Any) -> list[tuple[str, int]]:
    """[{"topic": "t", "partition": 0}, ...] from a request body."""
    if not isinstance(items, list) or not items:
        raise UiError(400, "partitions must be a non-empty list of {topic, partition}")
    try:
        return [(str(i["topic"]), int(i["partition"])) for i in items]
    except (KeyError, TypeError, ValueError):
        raise UiError(400, "partitions must be a list of {topic, partition}") from None
