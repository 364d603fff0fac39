"""/api/reassignments: the partitions being reassigned with their progress, and
cancelling some."""

from __future__ import annotations

from aiohttp import web

from moldau.cli.errors import CliError
from moldau.ui import reassignments
from moldau.ui.cli_calls import partitions_of
from moldau.ui.cluster import ClusterClient
from moldau.ui.json import UiError, body, ok


def routes(cluster: ClusterClient) -> list[web.RouteDef]:
    async def list_reassignments(request: web.Request) -> web.Response:
        try:
            found = await reassignments.reassignments(cluster)
        except CliError as e:
            raise UiError(502, str(e)) from None
        return ok({"reassignments": found})

    async def cancel(request: web.Request) -> web.Response:
        partitions = partitions_of((await body(request)).get("partitions"))
        try:
            errors = await reassignments.cancel(cluster, partitions)
        except CliError as e:
            raise UiError(502, str(e)) from None
        return ok({"errors": errors})

    return [
        web.get("/api/reassignments", list_reassignments),
        web.post("/api/reassignments/cancel", cancel),
    ]
