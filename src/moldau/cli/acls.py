"""`moldau acls`: add, remove and list ACLs, as kafka-acls.sh does (Kafka 4's
AclCommand through the AdminClient), with its flags and output:

    Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
        (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
        (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

(each entry after a tab; Kafka 3.9's Scala tool put a space before each newline.)
The model and its checks are moldau.security.acl's; the requests go through
confluent-kafka's AdminClient (CreateAcls, DescribeAcls, DeleteAcls). Entries are
printed sorted (Kafka's order is a hash set's)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

import confluent_kafka.admin
from confluent_kafka import KafkaException

from moldau.cli.common import (
    add_admin_arguments,
    admin_client,
    error_text,
    kafka_error,
    wait_result,
)
from moldau.cli.errors import CliError
from moldau.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

Resource = tuple[ResourceType, str, PatternType]  # a pattern, or a filter's pattern

NL = "\n"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "acls",
        help="add, remove or list ACLs, as kafka-acls.sh",
        description="Manage ACLs, as kafka-acls.sh does.",
    )
    add_admin_arguments(p, {"add": "add ACLs", "remove": "remove ACLs", "list": "list ACLs"})
    for flag, what in (
        ("--topic", "a topic"),
        ("--group", "a consumer group"),
        ("--transactional-id", "a transactional id"),
        ("--delegation-token", "a delegation token"),
    ):
        p.add_argument(flag, action="append", default=[], help=f"{what} (repeatable; * for all)")
    p.add_argument("--cluster", action="store_true", help="the cluster")
    p.add_argument(
        "--resource-pattern-type",
        default="literal",
        type=str.lower,
        choices=("any", "match", "literal", "prefixed"),
        help="how resource names match (add: literal or prefixed; default literal)",
    )
    for kind in ("allow", "deny"):
        p.add_argument(f"--{kind}-principal", action="append", default=[],
                       help=f"principal to {kind} (User:name; repeatable)")  # fmt: skip
        p.add_argument(f"--{kind}-host", action="append", default=[],
                       help=f"host to {kind} from (default * with a principal)")  # fmt: skip
    p.add_argument("--operation", action="append", default=[],
                   help="operation: Read, Write, Create, Delete, Alter, Describe, "
                   "ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, "
                   "All")  # fmt: skip
    p.add_argument("--principal", action="append", default=[],
                   help="with --list: only this principal's ACLs")  # fmt: skip
    p.add_argument("--producer", action="store_true",
                   help="the ACLs a producer needs (WRITE, DESCRIBE, CREATE on topics, "
                   "WRITE, DESCRIBE on transactional ids)")  # fmt: skip
    p.add_argument("--consumer", action="store_true",
                   help="the ACLs a consumer needs (READ, DESCRIBE on topics, "
                   "READ on groups)")  # fmt: skip
    p.add_argument("--idempotent", action="store_true",
                   help="with --producer: IDEMPOTENT_WRITE on the cluster")  # fmt: skip
    p.add_argument("--force", action="store_true", help="remove without asking")
    p.set_defaults(run=run)


# -- pure: from flags to resources and entries, and Kafka's text ------------------------


def parse_operation(name: str) -> AclOperation:
    key = name.strip().replace("_", "").replace("-", "").lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == key and op not in (
            AclOperation.UNKNOWN,
            AclOperation.ANY,
        ):
            return op
    raise CliError(f"unknown operation {name!r}")


def parse_principal(text: str) -> str:
    kind, sep, name = text.strip().partition(":")
    if not sep or not kind or not name:
        raise CliError(f"principal {text!r} is not of the form Type:name (User:alice)")
    return f"{kind}:{name}"


def resources(args: argparse.Namespace) -> list[Resource]:
    pattern = PatternType[args.resource_pattern_type.upper()]
    out: list[Resource] = [(ResourceType.TOPIC, t.strip(), pattern) for t in args.topic]
    if (args.cluster or args.idempotent) and pattern == PatternType.LITERAL:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    out += [(ResourceType.GROUP, g.strip(), pattern) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t, pattern) for t in args.transactional_id]
    out += [(ResourceType.DELEGATION_TOKEN, t.strip(), pattern) for t in args.delegation_token]
    return list(dict.fromkeys(out))


def entries(
    args: argparse.Namespace, operations: Iterable[AclOperation]
) -> list[AccessControlEntry]:
    ops = list(dict.fromkeys(operations))
    out = []
    for kind, permission in (("allow", AclPermissionType.ALLOW), ("deny", AclPermissionType.DENY)):
        principals = [parse_principal(p) for p in getattr(args, f"{kind}_principal")]
        hosts = [h.strip() for h in getattr(args, f"{kind}_host")] or (["*"] if principals else [])
        out += [AccessControlEntry(pr, h, op, permission) for pr in principals for op in ops
                for h in hosts]  # fmt: skip
    return list(dict.fromkeys(out))


def resource_to_entries(args: argparse.Namespace) -> dict[Resource, list[AccessControlEntry]]:
    """What each resource gets (or loses): the flags' entries, or those --producer and
    --consumer stand for."""
    found = resources(args)
    if not found:
        raise CliError(
            "You must provide at least one resource: --topic <topic> or --cluster or "
            "--group <group> or --delegation-token <Delegation Token ID>"
        )
    out: dict[Resource, list[AccessControlEntry]] = {}
    if not args.producer and not args.consumer:
        acl = entries(args, (parse_operation(o) for o in args.operation))
        out = {r: acl for r in found}
    Op, RT = AclOperation, ResourceType
    if args.producer:
        for r in found:
            if r[0] == RT.TOPIC:
                out[r] = entries(args, (Op.WRITE, Op.DESCRIBE, Op.CREATE))
            elif r[0] == RT.TRANSACTIONAL_ID:
                out[r] = entries(args, (Op.WRITE, Op.DESCRIBE))
        if args.idempotent:
            out[(RT.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)] = entries(
                args, (Op.IDEMPOTENT_WRITE,)
            )
    if args.consumer:
        for r in found:
            wanted = {RT.TOPIC: (Op.READ, Op.DESCRIBE), RT.GROUP: (Op.READ,)}.get(r[0])
            if wanted is not None:
                out[r] = list(dict.fromkeys([*out.get(r, []), *entries(args, wanted)]))
    for r, acl in out.items():
        allowed = SUPPORTED_OPERATIONS.get(r[0], frozenset()) | {Op.ALL}
        bad = sorted({e.operation.name for e in acl if e.operation not in allowed})
        if bad:
            names = ", ".join(sorted(op.name for op in allowed))
            raise CliError(f"ResourceType {r[0].name} only supports operations {names}")
    return out


def resource_text(r: Resource, name: str | None = "") -> str:
    shown = r[1] if name == "" else (name if name is not None else "<any>")
    return f"ResourcePattern(resourceType={r[0].name}, name={shown}, patternType={r[2].name})"


def entry_text(e: AccessControlEntry) -> str:
    return (
        f"(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
        f"permissionType={e.permission.name})"
    )


def _lines(acl: Iterable[AccessControlEntry]) -> str:
    return NL.join("\t" + entry_text(e) for e in sorted(acl, key=entry_text))


def adding_text(r: Resource, acl: Iterable[AccessControlEntry]) -> str:
    """As AclCommand prints it (then a newline): the heading, then the entries."""
    return f"Adding ACLs for resource `{resource_text(r)}`: {NL} {_lines(acl)}{NL}"


def current_text(r: Resource, acl: Iterable[AccessControlEntry]) -> str:
    return f"Current ACLs for resource `{resource_text(r)}`:{NL}{_lines(acl)}{NL}"


# -- the AdminClient -------------------------------------------------------------------


def binding(r: Resource, e: AccessControlEntry) -> Any:
    """confluent-kafka's AclBinding of one entry on one resource pattern."""
    ck: Any = confluent_kafka.admin

    return ck.AclBinding(
        ck.ResourceType(int(r[0])), r[1], ck.ResourcePatternType(int(r[2])), e.principal,
        e.host, ck.AclOperation(int(e.operation)), ck.AclPermissionType(int(e.permission)),
    )  # fmt: skip


def _filter(r: Resource | None, e: AccessControlEntry | None = None) -> Any:
    ck: Any = confluent_kafka.admin
    rt, name, pt = (ResourceType.ANY, None, PatternType.ANY) if r is None else r
    return ck.AclBindingFilter(
        ck.ResourceType(int(rt)), name, ck.ResourcePatternType(int(pt)),
        e.principal if e else None, e.host if e else None,
        ck.AclOperation(int(e.operation) if e else int(AclOperation.ANY)),
        ck.AclPermissionType(int(e.permission) if e else int(AclPermissionType.ANY)),
    )  # fmt: skip


def _from_binding(b: Any) -> tuple[Resource, AccessControlEntry]:
    r = (ResourceType(b.restype.value), b.name, PatternType(b.resource_pattern_type.value))
    e = AccessControlEntry(
        b.principal, b.host, AclOperation(b.operation.value),
        AclPermissionType(b.permission_type.value),
    )  # fmt: skip
    return r, e


def _confirm(args: argparse.Namespace, question: str) -> bool:
    if args.force:
        return True
    print(question)
    return sys.stdin.readline().strip().lower() == "y"


def run(args: argparse.Namespace) -> int:
    if (args.producer or args.consumer) and args.operation:
        raise CliError("--operation is not valid with --producer or --consumer")
    if args.principal and not args.list:
        raise CliError("--principal is only valid with --list")
    admin, watch = admin_client(args)

    def wait(future: Any, what: str) -> Any:
        try:
            return wait_result(admin, watch, future, what)
        except KafkaException as e:
            err = kafka_error(e)
            raise CliError(
                "Error while executing ACL command: " + (error_text(err) if err else str(e))
            ) from None

    if args.add:
        if args.resource_pattern_type in ("any", "match"):
            raise CliError(
                f"A '--resource-pattern-type' value of '{args.resource_pattern_type.upper()}' "
                "is not valid when adding acls."
            )
        for r, acl in resource_to_entries(args).items():
            if not acl:
                raise CliError(
                    "You must specify one of: --allow-principal, --deny-principal when "
                    "trying to add ACLs."
                )
            # An ACL that exists already is added again: the broker keeps one.
            print(adding_text(r, acl))
            for f in admin.create_acls([binding(r, e) for e in acl]).values():
                wait(f, "the ACLs to be created")
        return 0
    if args.remove:
        for r, acl in resource_to_entries(args).items():
            shown = resource_text(r)
            if not acl:
                question = (
                    f"Are you sure you want to delete all ACLs for resource filter `{shown}`? (y/n)"
                )
                filters = [_filter(r)]
            else:
                question = (
                    f"Are you sure you want to remove ACLs: {NL} {_lines(acl)}{NL} "
                    f"from resource filter `{shown}`? (y/n)"
                )
                filters = [_filter(r, e) for e in acl]
            if _confirm(args, question):
                for f in admin.delete_acls(filters).values():
                    wait(f, "the ACLs to be deleted")
        return 0
    # --list
    found = resources(args)
    listed: dict[Resource, set[AccessControlEntry]] = {}
    for r in found or [None]:  # type: ignore[list-item]
        for b in wait(admin.describe_acls(_filter(r)), "the ACLs"):
            pattern, e = _from_binding(b)
            listed.setdefault(pattern, set()).add(e)
    principals = [parse_principal(p) for p in args.principal]
    if not principals:
        _print_listed(listed)
    for principal in principals:
        print(f"ACLs for principal `{principal}`")
        _print_listed(
            {r: {e for e in acl if e.principal == principal} for r, acl in listed.items()}
        )
    return 0


def _print_listed(listed: dict[Resource, set[AccessControlEntry]]) -> None:
    for r in sorted(listed, key=lambda r: (r[0], r[1], r[2])):
        if listed[r]:
            print(current_text(r, listed[r]))
