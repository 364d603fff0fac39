"""/api/groups: the consumer groups and their lag, one group's members and
offsets with its lag history, resetting and deleting offsets, deleting a group."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref

from aiohttp import web

from moldau.cli.errors import CliError
from moldau.ui import groups
from moldau.ui.cli_calls import partitions_of, run_cli
from moldau.ui.cluster import ClusterClient
from moldau.ui.json import UiError, body, ok


def lag_series(group: str) -> str:
    """The name of a group's lag in the cluster's history."""
    return f"group.{group}.lag"


#: How long a round of the UiServer's sampling waits for the lags: a cluster slow to
#: answer (a coordinator moving) must not hold up the other samplers (brokers shown
#: offline within seconds). A sample that takes longer lands when it is done.
SAMPLE_WAIT_S = 1.5
_sampling: weakref.WeakKeyDictionary[ClusterClient, threading.Lock] = weakref.WeakKeyDictionary()


async def sample(cluster: ClusterClient, now_ms: int) -> None:
    """Every group's total lag into the history (the UiServer calls this every 2 s).
    One sample at a time a cluster: while one outlives its round, the next rounds
    skip, so late samples do not pile up on the client's threads."""
    lock = _sampling.setdefault(cluster, threading.Lock())
    loop = asyncio.get_running_loop()

    def record(lags: dict[str, int]) -> None:
        for group, lag in lags.items():
            cluster.history.add(lag_series(group), now_ms, lag)

    def measure() -> None:
        if not lock.acquire(blocking=False):
            return
        try:
            lags = groups.group_lags(groups.console_groups(cluster))
        finally:
            lock.release()
        # The history belongs to the event loop's thread.
        loop.call_soon_threadsafe(record, lags)

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(cluster.run(measure), SAMPLE_WAIT_S)


def routes(cluster: ClusterClient) -> list[web.RouteDef]:
    async def list_groups(request: web.Request) -> web.Response:
        found = await run_cli(cluster, groups.group_summaries, groups.console_groups(cluster))
        return ok({"groups": found})

    async def get_group(request: web.Request) -> web.Response:
        group = request.match_info["group"]
        detail = await run_cli(cluster, groups.group_detail, groups.console_groups(cluster), group)
        detail["lagHistory"] = cluster.history.series(lag_series(group))
        return ok(detail)

    async def reset(request: web.Request) -> web.Response:
        group = request.match_info["group"]
        form = await body(request)
        try:
            args = groups.reset_args(form)
        except CliError as e:
            raise UiError(400, str(e)) from None
        service = groups.console_groups(cluster, args)
        plan = await run_cli(
            cluster, groups.reset_offsets, service, group, bool(form.get("execute"))
        )
        return ok(plan)

    async def delete_offsets(request: web.Request) -> web.Response:
        group = request.match_info["group"]
        partitions = partitions_of((await body(request)).get("partitions"))
        try:
            refused = await groups.delete_offsets(cluster, group, partitions)
        except groups.GroupNotFound as e:
            raise UiError(404, str(e)) from None
        except CliError as e:
            raise UiError(400, str(e)) from None
        return ok({"group": group, "refused": refused})

    async def delete_group(request: web.Request) -> web.Response:
        group = request.match_info["group"]
        await run_cli(cluster, groups.delete_group, groups.console_groups(cluster), group)
        return ok({"deleted": group})

    return [
        web.get("/api/groups", list_groups),
        web.get("/api/groups/{group}", get_group),
        web.post("/api/groups/{group}/reset-offsets", reset),
        web.post("/api/groups/{group}/delete-offsets", delete_offsets),
        web.delete("/api/groups/{group}", delete_group),
    ]
