"""DescribeClientQuotas (48) and AlterClientQuotas (49), as Kafka's ZooKeeper-mode
broker serves them (ZkAdminManager), with the checks of values Kafka 3.9's KRaft
controller makes (ClientQuotaControlManager), which Kafka 4 clients meet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ErrorCode
from moldau.quota.entities import (
    CLIENT_ID,
    DEFAULT,
    IP,
    USER,
    InvalidQuotaError,
    QuotaEntity,
    check_value,
    entity_of_path,
    entity_of_request,
    quota_values,
)
from moldau.security.acl import AclOperation as Op
from moldau.server import authorization as auth
from moldau.server.request import RequestContext, Response

if TYPE_CHECKING:
    from moldau.server.broker import Broker

# DescribeClientQuotas' match types.
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


_INVALID = ErrorCode.invalid_request


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _filter(components: Any) -> dict[str, str | None]:
    """entity type -> the name it must have (DEFAULT for the default entity, None
    for any name), checked as Kafka checks a filter."""
    wanted: dict[str, str | None] = {}
    for c in components:
        kind = c.entity_type
        if kind == "":
            raise _Refused(_INVALID, "Unexpected empty filter component entity type")
        if kind not in (USER, CLIENT_ID, IP):
            message = f"Custom entity type '{kind}' not supported"
            raise _Refused(ErrorCode.unsupported_version, message)
        if kind in wanted:
            name = "client" if kind == CLIENT_ID else kind
            raise _Refused(_INVALID, f"Duplicate {name} filter component entity type")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise _Refused(ErrorCode.invalid_request, "Exact match needs a name")
            wanted[kind] = c.match
        elif c.match_type == MATCH_DEFAULT:
            wanted[kind] = DEFAULT
        elif c.match_type == MATCH_SPECIFIED:
            wanted[kind] = None
        else:
            raise _Refused(ErrorCode.invalid_request, f"Unexpected match type: {c.match_type}")
    if IP in wanted and len(wanted) > 1:
        raise _Refused(
            ErrorCode.invalid_request,
            "Invalid entity filter component combination, IP filter component should not "
            "be used with user or clientId filter component.",
        )
    return wanted


def _matches(wanted: Mapping[str, str | None], strict: bool, entity: QuotaEntity) -> bool:
    names = dict(entity.described())
    if strict and set(names) - set(wanted):
        return False
    for kind, want in wanted.items():
        if kind not in names:
            return False
        name = names[kind]
        if want == DEFAULT:
            if name is not None:
                return False
        elif want is not None and name != want:
            return False
    return True


async def describe_quotas(
    broker: Broker, wanted: Mapping[str, str | None], strict: bool
) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The entities with quotas that the filter matches (Moldau keeps no IP quotas:
    a filter on ip matches nothing)."""
    if IP in wanted:
        return []
    out = []
    for path in await broker.client.get_quota_entity_paths():
        entity = entity_of_path(path)
        if entity is None or not _matches(wanted, strict, entity):
            continue
        values = quota_values(await broker.client.get_entity_config(path))
        if values:
            out.append((entity, values))
    return out


async def handle_describe_client_quotas(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    data: dict[str, Any] = {"throttle_time": 0, "error_code": ErrorCode.none}
    try:
        if not auth.allows_cluster(broker.authorizer, ctx, Op.DESCRIBE_CONFIGS):
            raise _Refused(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
        found = await describe_quotas(broker, _filter(req.components), bool(req.strict))
    except _Refused as e:
        data.update(error_code=e.code, error_message=e.message, entries=None)
        return build_response(ApiKey.DESCRIBE_CLIENT_QUOTAS, ctx.version, data)
    data["entries"] = [
        {
            "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.described()],
            "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
        }
        for entity, values in found
    ]
    return build_response(ApiKey.DESCRIBE_CLIENT_QUOTAS, ctx.version, data)


async def _alter(broker: Broker, entry: Any, validate_only: bool) -> None:
    entity = entity_of_request([(e.entity_type, e.entity_name) for e in entry.entity])
    path = entity.path
    config = await broker.client.get_entity_config(path)
    for op in entry.ops:
        if op.remove:
            config.pop(op.key, None)
        else:
            config[op.key] = check_value(op.key, op.value)
    if not validate_only:
        await broker.client.set_entity_config(path, config)


async def handle_alter_client_quotas(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    allowed = auth.allows_cluster(broker.authorizer, ctx, Op.ALTER_CONFIGS)
    entries = []
    for entry in req.entries:
        code, message = ErrorCode.none, None
        if not allowed:
            code, message = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
        else:
            try:
                await _alter(broker, entry, bool(req.validate_only))
            except InvalidQuotaError as e:
                code, message = ErrorCode.invalid_request, str(e)
        entries.append(
            {
                "error_code": code,
                "error_message": message,
                "entity": [
                    {"entity_type": e.entity_type, "entity_name": e.entity_name}
                    for e in entry.entity
                ],
            }
        )
    return build_response(
        ApiKey.ALTER_CLIENT_QUOTAS, ctx.version, {"throttle_time": 0, "entries": entries}
    )
