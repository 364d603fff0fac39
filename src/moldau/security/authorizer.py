"""Kafka's AclAuthorizer decision, as pure functions over an immutable index of the
ACLs. A change of ACLs builds a new Authorizer (cheap: the cache swaps one object),
so a decision never sees half an update.

The rules (Kafka's AclAuthorizer.authorize):
1. A super user may do anything.
2. The ACLs that apply are those whose pattern covers the resource (its literal
   name, the literal wildcard `*`, a prefix of its name), whose principal is the
   caller's or `User:*` and whose host is the caller's or `*`.
3. A DENY for the operation (or ALL) among them refuses: DENY beats ALLOW.
4. An ALLOW for the operation, an operation implying it, or ALL, permits.
5. Otherwise, if no ACL at all covers the resource (for anyone),
   allow.everyone.if.no.acl.found decides; else refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from moldau.security.acl import (
    IMPLIED_BY,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

_NO_ENTRIES: tuple[AccessControlEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class _TypeIndex:
    literal: dict[str, tuple[AccessControlEntry, ...]] = field(default_factory=dict)
    prefixed: tuple[tuple[str, tuple[AccessControlEntry, ...]], ...] = ()


def _index(acls: Iterable[AclBinding]) -> dict[ResourceType, _TypeIndex]:
    literal: dict[ResourceType, dict[str, list[AccessControlEntry]]] = {}
    prefixed: dict[ResourceType, dict[str, list[AccessControlEntry]]] = {}
    for b in acls:
        p = b.pattern
        into = prefixed if p.pattern_type == PatternType.PREFIXED else literal
        into.setdefault(p.resource_type, {}).setdefault(p.name, []).append(b.entry)
    return {
        rt: _TypeIndex(
            literal={n: tuple(es) for n, es in literal.get(rt, {}).items()},
            prefixed=tuple((n, tuple(es)) for n, es in prefixed.get(rt, {}).items()),
        )
        for rt in set(literal) | set(prefixed)
    }


def parse_super_users(value: str | None) -> frozenset[str]:
    """super.users: principals separated by semicolons (Kafka's format)."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class Authorizer:
    def __init__(
        self,
        acls: Iterable[AclBinding],
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.acls: tuple[AclBinding, ...] = tuple(dict.fromkeys(acls))
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._index = _index(self.acls)

    def with_acls(self, acls: Iterable[AclBinding]) -> Authorizer:
        return Authorizer(acls, self.super_users, self.allow_if_no_acl)

    def entries_for(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """Every ACL entry whose pattern covers the resource, for any principal."""
        idx = self._index.get(resource_type)
        if idx is None:
            return []
        out = list(idx.literal.get(name, _NO_ENTRIES))
        if name != "*":
            out.extend(idx.literal.get("*", _NO_ENTRIES))
        for prefix, entries in idx.prefixed:
            if name.startswith(prefix):
                out.extend(entries)
        return out

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        entries = self.entries_for(resource_type, name)
        if not entries:
            return self.allow_if_no_acl
        return decide(entries, principal, host, operation)

    def authorized_operations(
        self,
        principal: str,
        host: str,
        resource_type: ResourceType,
        name: str,
        supported: Sequence[AclOperation],
    ) -> list[AclOperation]:
        return [op for op in supported if self.authorize(principal, host, op, resource_type, name)]

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Kafka's authorizeByResourceType (KIP-679): may the principal do `operation`
        on at least one resource of the type? An ALLOW somewhere that no DENY on the
        wildcard or a covering prefix cancels."""
        if principal in self.super_users:
            return True
        idx = self._index.get(resource_type)
        if idx is None:
            return self.allow_if_no_acl
        denied = [
            p
            for p, es in _patterns(idx, resource_type)
            if any(
                e.permission == AclPermissionType.DENY
                and e.applies_to(principal, host)
                and e.operation in (operation, AclOperation.ALL)
                for e in es
            )
        ]
        if any(p.name == "*" and p.pattern_type == PatternType.LITERAL for p in denied):
            return False
        for p, es in _patterns(idx, resource_type):
            if any(d.covers(resource_type, p.name) for d in denied):
                continue
            if any(
                e.permission == AclPermissionType.ALLOW
                and e.applies_to(principal, host)
                and (e.operation == AclOperation.ALL or operation in _implying(e.operation))
                for e in es
            ):
                return True
        return False


def _patterns(
    idx: _TypeIndex, rt: ResourceType
) -> Iterable[tuple[ResourcePattern, tuple[AccessControlEntry, ...]]]:
    for name, es in idx.literal.items():
        yield ResourcePattern(rt, name, PatternType.LITERAL), es
    for name, es in idx.prefixed:
        yield ResourcePattern(rt, name, PatternType.PREFIXED), es


def _implying(granted: AclOperation) -> frozenset[AclOperation]:
    """The operations an ALLOW of `granted` permits."""
    return frozenset({granted}) | frozenset(op for op, by in IMPLIED_BY.items() if granted in by)


def decide(
    entries: Iterable[AccessControlEntry], principal: str, host: str, operation: AclOperation
) -> bool:
    """DENY beats ALLOW; an ALLOW of the operation, one implying it, or ALL permits."""
    allowed_by = IMPLIED_BY.get(operation, frozenset({operation}))
    allowed = False
    for e in entries:
        if not e.applies_to(principal, host):
            continue
        if e.permission == AclPermissionType.DENY:
            if e.operation in (operation, AclOperation.ALL):
                return False
        elif e.permission == AclPermissionType.ALLOW and (
            e.operation == AclOperation.ALL or e.operation in allowed_by
        ):
            allowed = True
    return allowed
