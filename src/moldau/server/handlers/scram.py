"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): what
kafka-configs --entity-type users and the AdminClient's *UserScramCredentials ask.
Any broker answers, reading and writing /config/users in the metadata store (as
Kafka's ZooKeeper mode); the change notification brings the new credentials to
every broker's CredentialCache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.security import scram_admin
from moldau.server.request import RequestContext, Response

if TYPE_CHECKING:
    from moldau.server.broker import Broker


async def handle_describe_user_scram_credentials(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    users = [u.name for u in req.users] if req.users else None
    names = list(dict.fromkeys(users)) if users else await broker.client.get_config_users()
    configs = {u: await broker.client.get_user_config(u) for u in names}
    results = scram_admin.describe(users, configs)
    return build_response(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        ctx.version,
        {
            "error_code": 0,
            "results": [
                {
                    "user": r.user,
                    "error_code": r.error,
                    "error_message": r.message,
                    "credential_infos": [
                        {"mechanism": m, "iterations": i} for m, i in r.credentials
                    ],
                }
                for r in results
            ],
        },
    )


async def handle_alter_user_scram_credentials(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    deletions = [scram_admin.Deletion(d.name, d.mechanism) for d in req.deletions]
    upsertions = [
        scram_admin.Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt),
                              bytes(u.salted_password))
        for u in req.upsertions
    ]  # fmt: skip
    users = dict.fromkeys([*(d.user for d in deletions), *(u.user for u in upsertions)])
    configs = {u: await broker.client.get_user_config(u) for u in users if u}
    results, changed = scram_admin.alter(deletions, upsertions, configs)
    for user, config in changed.items():
        await broker.client.set_user_config(user, config)
    return build_response(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        ctx.version,
        {
            "results": [
                {"user": r.user, "error_code": r.error, "error_message": r.message} for r in results
            ]
        },
    )
