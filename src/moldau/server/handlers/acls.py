"""The ACL APIs: DescribeAcls (29), CreateAcls (30), DeleteAcls (31), as Kafka's
AclApis serves them. Without an authorizer each answers SECURITY_DISABLED. They need
DESCRIBE (DescribeAcls) or ALTER (Create/DeleteAcls, which answer it per item) on
the cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ErrorCode
from moldau.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    binding_error,
)
from moldau.server import authorization as auth
from moldau.server.request import RequestContext, Response

if TYPE_CHECKING:
    from moldau.server.broker import Broker

_DISABLED = "No Authorizer is configured on the broker"
_REFUSED = "Cluster authorization failed."


def _enum(cls: Any, value: int) -> Any:
    try:
        return cls(value)
    except ValueError:
        return cls.UNKNOWN


def _filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(
            _enum(ResourceType, f.resource_type_filter),
            f.resource_name_filter,
            _enum(PatternType, f.pattern_type_filter),
        ),
        AccessControlEntryFilter(
            f.principal_filter,
            f.host_filter,
            _enum(AclOperation, f.operation),
            _enum(AclPermissionType, f.permission_type),
        ),
    )


def _filter_error(f: AclBindingFilter) -> str | None:
    unknown = (
        f.pattern.resource_type == ResourceType.UNKNOWN
        or f.pattern.pattern_type == PatternType.UNKNOWN
        or f.entry.operation == AclOperation.UNKNOWN
        or f.entry.permission == AclPermissionType.UNKNOWN
    )
    return "The filter contains an unknown element" if unknown else None


def _description(e: AccessControlEntry) -> dict[str, Any]:
    return {
        "principal": e.principal,
        "host": e.host,
        "operation": int(e.operation),
        "permission_type": int(e.permission),
    }


async def handle_describe_acls(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    cache = broker.acl_cache

    def answer(code: ErrorCode, message: str | None, resources: list[Any]) -> Any:
        return build_response(
            ApiKey.DESCRIBE_ACLS,
            ctx.version,
            {
                "throttle_time": 0,
                "error_code": code,
                "error_message": message,
                "resources": resources,
            },
        )

    if cache is None:
        return answer(ErrorCode.security_disabled, _DISABLED, [])
    if not auth.allows_cluster(cache.authorizer, ctx, AclOperation.DESCRIBE):
        return answer(ErrorCode.cluster_authorization_failed, _REFUSED, [])
    f = _filter(req)
    error = _filter_error(f)
    if error is not None:
        return answer(ErrorCode.invalid_request, error, [])
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in cache.authorizer.acls:
        if f.matches(b):
            by_pattern.setdefault(b.pattern, []).append(b.entry)
    return answer(
        ErrorCode.none,
        None,
        [
            {
                "resource_type": int(p.resource_type),
                "resource_name": p.name,
                "pattern_type": int(p.pattern_type),
                "acls": [_description(e) for e in entries],
            }
            for p, entries in by_pattern.items()
        ],
    )


async def handle_create_acls(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    cache = broker.acl_cache
    results: list[dict[str, Any]] = []
    may_alter = auth.allows_cluster(broker.authorizer, ctx, AclOperation.ALTER)
    for c in req.creations:
        if cache is None:
            results.append({"error_code": ErrorCode.security_disabled, "error_message": _DISABLED})
            continue
        if not may_alter:
            results.append({"error_code": ErrorCode.cluster_authorization_failed,
                            "error_message": _REFUSED})  # fmt: skip
            continue
        b = AclBinding(
            ResourcePattern(
                _enum(ResourceType, c.resource_type),
                c.resource_name,
                _enum(PatternType, c.resource_pattern_type),
            ),
            AccessControlEntry(
                c.principal,
                c.host,
                _enum(AclOperation, c.operation),
                _enum(AclPermissionType, c.permission_type),
            ),
        )
        error = binding_error(b)
        if error is not None:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": error})
            continue
        await cache.update(b.pattern, lambda es, e=b.entry: [*es, e])  # type: ignore[misc]
        results.append({"error_code": ErrorCode.none, "error_message": None})
    return build_response(ApiKey.CREATE_ACLS, ctx.version, {"throttle_time": 0, "results": results})


async def handle_delete_acls(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    cache = broker.acl_cache
    filter_results: list[dict[str, Any]] = []
    may_alter = auth.allows_cluster(broker.authorizer, ctx, AclOperation.ALTER)
    for raw in req.filters:
        if cache is not None and not may_alter:
            filter_results.append({"error_code": ErrorCode.cluster_authorization_failed,
                                   "error_message": _REFUSED, "matching_acls": []})  # fmt: skip
            continue
        if cache is None:
            filter_results.append({"error_code": ErrorCode.security_disabled,
                                   "error_message": _DISABLED, "matching_acls": []})  # fmt: skip
            continue
        f = _filter(raw)
        error = _filter_error(f)
        if error is not None:
            filter_results.append(
                {
                    "error_code": ErrorCode.invalid_request,
                    "error_message": error,
                    "matching_acls": [],
                }
            )
            continue
        patterns = dict.fromkeys(b.pattern for b in cache.authorizer.acls if f.matches(b))
        deleted: list[AclBinding] = []
        for p in patterns:

            def drop(
                es: list[AccessControlEntry],
                p: ResourcePattern = p,
                f: AclBindingFilter = f,
            ) -> list[AccessControlEntry]:
                return [e for e in es if not f.matches(AclBinding(p, e))]

            before = await cache.update(p, drop)
            deleted.extend(AclBinding(p, e) for e in before if f.matches(AclBinding(p, e)))
        filter_results.append(
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "matching_acls": [
                    {
                        "error_code": ErrorCode.none,
                        "error_message": None,
                        "resource_type": int(b.pattern.resource_type),
                        "resource_name": b.pattern.name,
                        "pattern_type": int(b.pattern.pattern_type),
                        **_description(b.entry),
                    }
                    for b in deleted
                ],
            }
        )
    return build_response(
        ApiKey.DELETE_ACLS, ctx.version, {"throttle_time": 0, "filter_results": filter_results}
    )
