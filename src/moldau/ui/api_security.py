"""/api/security: ACLs (list with a filter, add, delete) and SCRAM users (list,
add or update a credential, delete one). A cluster without an authorizer lists no
ACLs and says why."""

from __future__ import annotations

from aiohttp import web

from moldau.ui import security
from moldau.ui.cli_calls import run_cli
from moldau.ui.cluster import ClusterClient
from moldau.ui.json import UiError, body, ok


def routes(cluster: ClusterClient) -> list[web.RouteDef]:
    async def list_acls(request: web.Request) -> web.Response:
        unreadable = await security.acls_unreadable(cluster)
        if unreadable is not None:
            return ok({"authorizer": unreadable != security.NO_AUTHORIZER,
                       "note": unreadable, "acls": []})  # fmt: skip
        form = dict(request.query)
        found = await run_cli(cluster, security.list_acls, cluster.admin, cluster.bootstrap, form)
        return ok({"authorizer": True, "note": None, "acls": found})

    async def add_acls(request: web.Request) -> web.Response:
        form = await body(request)
        try:
            added = await run_cli(
                cluster, security.add_acls, cluster.admin, cluster.bootstrap, form
            )
        except security.NoAuthorizer:
            raise UiError(400, security.NO_AUTHORIZER) from None
        return ok({"added": added})

    async def delete_acl(request: web.Request) -> web.Response:
        row = await body(request)
        deleted = await run_cli(cluster, security.delete_acl, cluster.admin, cluster.bootstrap, row)
        return ok({"deleted": deleted})

    async def list_users(request: web.Request) -> web.Response:
        users = await run_cli(cluster, security.scram_users, cluster.admin, cluster.bootstrap)
        return ok({"users": users})

    async def upsert_user(request: web.Request) -> web.Response:
        form = await body(request)
        await run_cli(cluster, security.upsert_scram_user, cluster.admin, cluster.bootstrap, form)
        return ok({"user": form.get("user")})

    async def delete_user(request: web.Request) -> web.Response:
        user, mechanism = request.match_info["user"], request.match_info["mechanism"]
        await run_cli(
            cluster, security.delete_scram_user, cluster.admin, cluster.bootstrap, user, mechanism
        )
        return ok({"user": user, "mechanism": mechanism})

    return [
        web.get("/api/security/acls", list_acls),
        web.post("/api/security/acls", add_acls),
        web.post("/api/security/acls/delete", delete_acl),
        web.get("/api/security/users", list_users),
        web.post("/api/security/users", upsert_user),
        web.delete("/api/security/users/{user}/{mechanism}", delete_user),
    ]
