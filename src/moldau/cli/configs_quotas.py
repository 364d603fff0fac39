"""`moldau configs` for client quotas of users, clients and a user's clients:
DescribeClientQuotas (48) and AlterClientQuotas (49) on the wire
(cli/admin_call.py; confluent-kafka has no call for them), printed as
kafka-configs.sh prints them:

    Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0
    Quota configs for the default user-principal, client-id 'c1' are request_percentage=50.0

(values as Java prints a double; entities and keys sorted, where Kafka's order is
a hash map's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from moldau.cli.admin_call import AdminCalls
from moldau.cli.configs_args import CLIENTS, USERS, java_double
from moldau.cli.configs_resources import call, check
from moldau.cli.errors import CliError
from moldau.protocol.errors import ErrorCode

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
QUOTAS_VERSION = 1  # the first flexible version of both, served by Kafka 2.8 and later
#: The quota protocol's entity types, by kafka-configs' entity type.
ENTITY_TYPES = {USERS: "user", CLIENTS: "client-id"}
_LABELS = {"user": "user-principal", "client-id": "client-id"}
EXACT, DEFAULT, ANY = 0, 1, 2  # a filter component's match_type

#: (quota entity type, name or None for the default) pairs, user first.
QuotaEntity = tuple[tuple[str, str | None], ...]


def filter_components(pairs: Iterable[tuple[str, str | None]]) -> list[dict[str, Any]]:
    """DescribeClientQuotas' components for kafka-configs' (type, name) pairs: a
    name matches exactly, "" the default entity, None any named entity."""
    out = []
    for entity_type, name in pairs:
        if name is None:
            out.append({"entity_type": ENTITY_TYPES[entity_type], "match_type": ANY,
                        "match": None})  # fmt: skip
        elif name == "":
            out.append({"entity_type": ENTITY_TYPES[entity_type], "match_type": DEFAULT,
                        "match": None})  # fmt: skip
        else:
            out.append({"entity_type": ENTITY_TYPES[entity_type], "match_type": EXACT,
                        "match": name})  # fmt: skip
    return out


def entity_text(entity: QuotaEntity) -> str:
    """`user-principal 'alice', client-id 'c1'` or `the default client-id`."""
    parts = []
    for kind in ("user", "client-id"):
        for entity_type, name in entity:
            if entity_type == kind:
                label = _LABELS[kind]
                parts.append(f"{label} '{name}'" if name is not None else f"the default {label}")
    return ", ".join(parts)


def quota_line(entity: QuotaEntity, values: Mapping[str, float]) -> str:
    entries = ", ".join(f"{k}={java_double(v)}" for k, v in sorted(values.items()))
    return f"Quota configs for {entity_text(entity)} are {entries}"


def _sort_key(entity: QuotaEntity) -> tuple[tuple[int, str], ...]:
    # By user, then client id; a default entity before the named ones.
    names = dict(entity)
    return tuple(
        (0, "") if kind not in names else (1, "") if names[kind] is None else (2, names[kind] or "")
        for kind in ("user", "client-id")
    )


def parse_values(added: Mapping[str, str]) -> dict[str, float]:
    values = {}
    for key, text in added.items():
        try:
            values[key] = float(text)
        except ValueError:
            raise CliError(f"Cannot parse quota configuration value for {key}: {text}") from None
    return values


class Quotas:
    """Describe and alter client quotas through one broker."""

    def __init__(self, calls: AdminCalls, address: tuple[str, int]) -> None:
        self.calls = calls
        self.address = address

    def describe(
        self, pairs: Iterable[tuple[str, str | None]], strict_support: bool = False
    ) -> dict[QuotaEntity, dict[str, float]]:
        """The quotas of every entity the pairs match (strictly: no other types).
        `strict_support`: a broker that does not serve quotas is an error (else none)."""
        fields = {"components": filter_components(pairs), "strict": True}
        response = call(self.calls, self.address, DESCRIBE_CLIENT_QUOTAS, QUOTAS_VERSION, fields)
        if response.error_code == ErrorCode.unsupported_version and not strict_support:
            # A broker that does not serve quotas has none: describing users still shows
            # their SCRAM credentials (where Kafka's tool would fail).
            return {}
        _check(response.error_code, response.error_message, "DESCRIBE_CLIENT_QUOTAS")
        found = {}
        for entry in response.entries or ():
            entity = tuple((str(e.entity_type), e.entity_name) for e in entry.entity)
            found[entity] = {str(v.key): float(v.value) for v in entry.values}
        return found

    def describe_lines(self, pairs: Iterable[tuple[str, str | None]]) -> list[str]:
        found = self.describe(pairs)
        return [quota_line(e, found[e]) for e in sorted(found, key=_sort_key)]

    def alter(self, pairs: list[tuple[str, str]], added: Mapping[str, str],
              deleted: list[str]) -> None:  # fmt: skip
        """Kafka's alterQuotaConfigs: each deleted key must be set on the entity."""
        values = parse_values(added)
        current = self.describe(pairs, strict_support=True)
        old = next(iter(current.values()), {})
        missing = [k for k in deleted if k not in old]
        if missing:
            raise CliError(f"Invalid config(s): {','.join(missing)}")
        entity = [
            {"entity_type": ENTITY_TYPES[t], "entity_name": name or None} for t, name in pairs
        ]
        ops = [{"key": k, "value": v, "remove": False} for k, v in values.items()]
        ops += [{"key": k, "value": 0.0, "remove": True} for k in deleted]
        request = {"entries": [{"entity": entity, "ops": ops}], "validate_only": False}
        response = call(self.calls, self.address, ALTER_CLIENT_QUOTAS, QUOTAS_VERSION, request)
        for entry in response.entries:
            _check(entry.error_code, entry.error_message, "ALTER_CLIENT_QUOTAS")


def _check(code: int, message: str | None, api: str) -> None:
    if code == ErrorCode.unsupported_version:
        # What Kafka's Admin says when a broker does not serve the API.
        raise CliError(f"The node does not support {api}")
    check(code, message)
