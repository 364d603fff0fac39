"""ACLs and SCRAM users for the console.

ACLs are what `moldau acls` adds, lists and removes (cli/acls.py): a console form
becomes the tool's arguments, so the same resource and operation choices (and
--producer / --consumer's sets) hold. SCRAM users are described and altered with
the AdminClient's *UserScramCredentials calls, as `moldau configs --entity-type
users`. The functions are blocking (librdkafka's calls): the routes run them with
`ClusterClient.run`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import confluent_kafka.admin
from confluent_kafka import KafkaError, KafkaException

# Exported by confluent_kafka.admin, though its stubs do not say so.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from moldau.cli.acls import binding, parse_principal, resource_to_entries
from moldau.cli.common import TIMEOUT_S, BrokerWatch, kafka_error, wait_result
from moldau.cli.configs_scram import DEFAULT_ITERATIONS
from moldau.cli.errors import CliError
from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode
from moldau.ui.json import kafka_message

if TYPE_CHECKING:
    from moldau.ui.cluster import ClusterClient

ck: Any = confluent_kafka.admin  # its enums and AclBinding(Filter), untyped

#: The console's resource types, each the `moldau acls` flag that names one.
RESOURCE_FLAGS = {
    "topic": "topic",
    "group": "group",
    "transactional-id": "transactional_id",
    "delegation-token": "delegation_token",
    "cluster": "cluster",
}
MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
              "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}  # fmt: skip
#: Kafka's default iterations for a new SCRAM credential (kafka-configs').

NO_AUTHORIZER = (
    "This cluster has no authorizer (authorizer.class.name is not set), so it keeps no "
    "ACLs: every client may do everything."
)


class NoAuthorizer(Exception):
    """The broker answered SECURITY_DISABLED: there are no ACLs to show."""


# -- pure: from a console form to the tool's arguments, and back ---------------------


def acl_args(form: Mapping[str, Any]) -> argparse.Namespace:
    """`moldau acls`' arguments for a form: {"resourceType": "topic", "name": "t",
    "patternType": "literal", "permission": "allow", "principal": "User:alice",
    "host": "*", "operations": ["Read"]} or, instead of operations, "preset":
    "producer" or "consumer"."""
    kind = str(form.get("resourceType", "")).lower()
    if kind not in RESOURCE_FLAGS:
        raise CliError(f"resourceType must be one of {', '.join(RESOURCE_FLAGS)}, got {kind!r}")
    name = str(form.get("name") or "").strip()
    if kind != "cluster" and not name:
        raise CliError(f"a {kind} ACL needs a resource name (* for all)")
    args = argparse.Namespace(
        topic=[], group=[], transactional_id=[], delegation_token=[], cluster=False,
        resource_pattern_type=str(form.get("patternType") or "literal").lower(),
        allow_principal=[], allow_host=[], deny_principal=[], deny_host=[],
        operation=[], producer=False, consumer=False, idempotent=False,
    )  # fmt: skip
    if args.resource_pattern_type not in ("any", "match", "literal", "prefixed"):
        raise CliError(f"patternType {args.resource_pattern_type!r} is not one of "
                       "literal, prefixed, any, match")  # fmt: skip
    if kind == "cluster":
        args.cluster = True
    else:
        getattr(args, RESOURCE_FLAGS[kind]).append(name)
    principal = str(form.get("principal") or "").strip()
    if principal:
        permission = str(form.get("permission") or "allow").lower()
        if permission not in ("allow", "deny"):
            raise CliError(f"permission must be allow or deny, got {permission!r}")
        getattr(args, f"{permission}_principal").append(principal)
        getattr(args, f"{permission}_host").append(str(form.get("host") or "*").strip())
    preset = str(form.get("preset") or "")
    if preset in ("producer", "consumer"):
        setattr(args, preset, True)
    elif preset:
        raise CliError(f"preset must be producer or consumer, got {preset!r}")
    else:
        args.operation = [str(op) for op in form.get("operations") or []]
    return args


def acl_json(b: Any) -> dict[str, str]:
    """An AclBinding (confluent-kafka's) as a row of the page, by Kafka's names."""
    kind = str(b.restype.name)
    return {
        "resourceType": "CLUSTER" if kind == "BROKER" else kind,
        "name": b.name,
        "patternType": b.resource_pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission_type.name,
    }


def acl_from_json(row: Mapping[str, Any]) -> Any:
    """The AclBindingFilter that matches exactly the ACL of a row (to delete it)."""
    try:
        return ck.AclBindingFilter(
            _resource_type(row["resourceType"]), str(row["name"]),
            ck.ResourcePatternType[str(row["patternType"]).upper()],
            parse_principal(str(row["principal"])), str(row.get("host") or "*"),
            ck.AclOperation[str(row["operation"]).upper()],
            ck.AclPermissionType[str(row["permission"]).upper()],
        )  # fmt: skip
    except KeyError as missing:
        raise CliError(f"the ACL has no valid {missing}") from None


def acl_filter(form: Mapping[str, Any]) -> Any:
    """A list filter: a resource type (any), a name (any), how the name matches (any;
    `match` also finds the wildcard and prefixed ACLs that apply to the name)."""
    try:
        pattern = ck.ResourcePatternType[str(form.get("patternType") or "any").upper()]
        kind = _resource_type(form.get("resourceType") or "any")
    except KeyError as unknown:
        raise CliError(f"unknown resource or pattern type {unknown}") from None
    return ck.AclBindingFilter(kind, str(form.get("name") or "") or None, pattern, None, None,
                               ck.AclOperation.ANY, ck.AclPermissionType.ANY)  # fmt: skip


def _resource_type(name: object) -> Any:
    """confluent-kafka's ResourceType by Kafka's name (its BROKER is Kafka's CLUSTER)."""
    key = str(name).upper().replace("-", "_")
    return ck.ResourceType["BROKER" if key == "CLUSTER" else key]


# -- from the cluster ----------------------------------------------------------------


async def acls_unreadable(cluster: ClusterClient) -> str | None:
    """Why the ACLs cannot be listed (no authorizer, or the console may not), or None:
    a DescribeAcls that matches nothing, over the wire. librdkafka drops that
    answer's error (SECURITY_DISABLED, CLUSTER_AUTHORIZATION_FAILED) and reports an
    empty list, which would read as "no ACLs"."""
    md = await cluster.metadata()
    broker = next(iter(md.brokers.values()))
    response = await cluster.call(
        (str(broker.host), int(broker.port)),
        ApiKey.DESCRIBE_ACLS,
        2,
        {
            "resource_type_filter": ck.ResourceType.TOPIC.value,
            "resource_name_filter": "",
            "pattern_type_filter": ck.ResourcePatternType.LITERAL.value,
            "principal_filter": None,
            "host_filter": None,
            "operation": ck.AclOperation.ANY.value,
            "permission_type": ck.AclPermissionType.ANY.value,
        },
    )
    code = ErrorCode(response.error_code)
    if code == ErrorCode.security_disabled:
        return NO_AUTHORIZER
    if code != ErrorCode.none:
        return f"{code.name.upper()}: {response.error_message or 'the ACLs cannot be listed'}"
    return None


def list_acls(admin: Any, bootstrap: str, form: Mapping[str, Any]) -> list[dict[str, str]]:
    """The ACLs matching a filter form, sorted; a principal in the form keeps only
    that principal's, as `moldau acls --list --principal`."""
    result = _wait(admin, bootstrap, admin.describe_acls(acl_filter(form)))
    principal = str(form.get("principal") or "").strip()
    wanted = parse_principal(principal) if principal else None
    rows = [acl_json(b) for b in result if wanted is None or b.principal == wanted]
    return sorted(rows, key=lambda a: tuple(a.values()))


def add_acls(admin: Any, bootstrap: str, form: Mapping[str, Any]) -> list[dict[str, str]]:
    """CreateAcls for a form, as `moldau acls --add`; the ACLs added."""
    args = acl_args(form)
    if args.resource_pattern_type in ("any", "match"):
        raise CliError(
            f"A '--resource-pattern-type' value of '{args.resource_pattern_type.upper()}' "
            "is not valid when adding acls."
        )
    added: list[dict[str, str]] = []
    for r, acl in resource_to_entries(args).items():
        if not acl:
            raise CliError("You must specify one of: --allow-principal, --deny-principal "
                           "when trying to add ACLs.")  # fmt: skip
        for future in admin.create_acls([binding(r, e) for e in acl]).values():
            _wait(admin, bootstrap, future)
        added += [acl_json(binding(r, e)) for e in acl]
    return added


def delete_acl(admin: Any, bootstrap: str, row: Mapping[str, Any]) -> int:
    """DeleteAcls for exactly one ACL (a row of the list); how many went."""
    deleted = 0
    for future in admin.delete_acls([acl_from_json(row)]).values():
        deleted += len(_wait(admin, bootstrap, future))
    return deleted


def scram_users(admin: Any, bootstrap: str) -> list[dict[str, Any]]:
    """Every user with SCRAM credentials: its mechanisms and their iterations."""
    try:
        found = _wait(admin, bootstrap, admin.describe_user_scram_credentials())
    except CliError as e:
        if "RESOURCE_NOT_FOUND" in str(e):
            return []
        raise
    return [
        {
            "user": user,
            "credentials": sorted(
                (
                    {"mechanism": _mechanism_name(i.mechanism), "iterations": i.iterations}
                    for i in description.scram_credential_infos
                ),
                key=lambda c: c["mechanism"],
            ),
        }
        for user, description in sorted(found.items())
    ]


def upsert_scram_user(admin: Any, bootstrap: str, form: Mapping[str, Any]) -> None:
    """Add or replace one credential: {"user", "mechanism", "iterations", "password"}."""
    user = str(form.get("user") or "").strip()
    password = str(form.get("password") or "")
    if not user or not password:
        raise CliError("a SCRAM credential needs a user and a password")
    iterations = form.get("iterations") or DEFAULT_ITERATIONS
    try:
        iterations = int(iterations)
    except (TypeError, ValueError):
        raise CliError(f"iterations must be an integer, got {iterations!r}") from None
    info = ScramCredentialInfo(_mechanism(form.get("mechanism")), iterations)
    _alter(admin, bootstrap, user, UserScramCredentialUpsertion(user, info, password.encode()))


def delete_scram_user(admin: Any, bootstrap: str, user: str, mechanism: str) -> None:
    """Remove one of a user's credentials."""
    _alter(admin, bootstrap, user, UserScramCredentialDeletion(user, _mechanism(mechanism)))


def _alter(admin: Any, bootstrap: str, user: str, alteration: Any) -> None:
    futures = admin.alter_user_scram_credentials([alteration], request_timeout=TIMEOUT_S)
    _wait(admin, bootstrap, futures[user])


def _mechanism(name: object) -> Any:
    mechanism = MECHANISMS.get(str(name or "").upper())
    if mechanism is None:
        raise CliError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {name!r}")
    return mechanism


def _mechanism_name(mechanism: Any) -> str:
    return str(mechanism.name).replace("_", "-")


def _wait(admin: Any, bootstrap: str, future: Any) -> Any:
    """An AdminClient future's result; a broker's refusal as `NAME: message`, and
    no authorizer as NoAuthorizer."""
    try:
        return wait_result(admin, BrokerWatch(bootstrap), future, "the cluster")
    except KafkaException as e:
        err = kafka_error(e)
        if err is not None and err.code() == KafkaError.SECURITY_DISABLED:
            raise NoAuthorizer(str(err.str())) from None
        raise CliError(kafka_message(e)) from None
