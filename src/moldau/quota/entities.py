"""Quota entities and their configs, as Kafka's ZooKeeper mode keeps them.

An entity is a user, a client-id, or a user's client-id; either part may be the
default (`<default>`). Their quotas live in the same config maps as other entity
configs (a user's beside its SCRAM credentials):

    /config/users/<sanitized user>                    users/<u>
    /config/users/<sanitized user>/clients/<client>   users/<u>/clients/<c>
    /config/clients/<sanitized client-id>             clients/<c>

and a change is announced with that entity path in /config/changes. Users are
kept sanitized (Kafka's Sanitizer), as Kafka's quota entities keep them; client
ids are kept as the client sent them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from moldau.metadata.znodes import desanitize, sanitize

DEFAULT = "<default>"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

# Kafka's QuotaConfigs: integral (LONG) or not (DOUBLE).
QUOTA_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

_LONG_MAX = 2**63 - 1


class InvalidQuotaError(ValueError):
    """An entity or an op Kafka answers with INVALID_REQUEST."""


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """`user` sanitized, or DEFAULT; `client_id` as sent, or DEFAULT; None where the
    entity has no such part."""

    user: str | None = None
    client_id: str | None = None

    @property
    def path(self) -> str:
        """The entity path under /config (and of its change notification)."""
        if self.user is not None:
            head = f"users/{self.user}"
            if self.client_id is None:
                return head
            return f"{head}/clients/{_znode_name(self.client_id)}"
        assert self.client_id is not None
        return f"clients/{_znode_name(self.client_id)}"

    def described(self) -> list[tuple[str, str | None]]:
        """(entity type, name) as DescribeClientQuotas/AlterClientQuotas name it:
        names desanitized, the default as null."""
        out: list[tuple[str, str | None]] = []
        if self.user is not None:
            out.append((USER, None if self.user == DEFAULT else desanitize(self.user)))
        if self.client_id is not None:
            out.append((CLIENT_ID, None if self.client_id == DEFAULT else self.client_id))
        return out


def _znode_name(client_id: str) -> str:
    return client_id if client_id == DEFAULT else sanitize(client_id)


def entity_of_path(path: str) -> QuotaEntity | None:
    """The entity of an entity path (users/..., clients/...); None if it is not one."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "users":
        return QuotaEntity(user=parts[1])
    if len(parts) == 2 and parts[0] == "clients":
        return QuotaEntity(client_id=_client_of(parts[1]))
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return QuotaEntity(user=parts[1], client_id=_client_of(parts[3]))
    return None


def _client_of(name: str) -> str:
    return name if name == DEFAULT else desanitize(name)


def entity_of_request(parts: list[tuple[str, str | None]]) -> QuotaEntity:
    """An AlterClientQuotas entity (type, name-or-null-for-default), checked as
    Kafka checks it."""
    if not parts:
        raise InvalidQuotaError("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for kind, name in parts:
        if kind in seen:
            raise InvalidQuotaError(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in (USER, CLIENT_ID, IP):
            raise InvalidQuotaError(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise InvalidQuotaError(f"Empty {kind} not supported")
        seen[kind] = name
    if IP in seen:
        if len(seen) > 1:
            raise InvalidQuotaError(
                "Invalid quota entity combination, IP entity should not be used with "
                "user/client ID entity."
            )
        # Moldau has no connection-rate quotas (see docs/architecture.md).
        raise InvalidQuotaError("IP quotas (connection_creation_rate) are not supported")
    user: str | None = None
    if USER in seen:
        name = seen[USER]
        user = DEFAULT if name is None else sanitize(name)
    client: str | None = None
    if CLIENT_ID in seen:
        client = seen[CLIENT_ID] or DEFAULT  # null: the default
    return QuotaEntity(user, client)


def check_value(key: str, value: float) -> str:
    """A quota value as stored (Kafka's ClientQuotaControlManager rules); raises
    InvalidQuotaError for an unknown key or a value Kafka refuses."""
    integral = QUOTA_KEYS.get(key)
    if integral is None:
        raise InvalidQuotaError(f"Invalid configuration key {key}")
    if not value > 0.0:  # NaN too
        raise InvalidQuotaError(f"Quota {key} must be greater than 0")
    if not integral:
        return repr(float(value)) if math.isfinite(value) else str(value)
    if value > _LONG_MAX:
        raise InvalidQuotaError(f"Proposed value for {key} is too large for a LONG.")
    if abs(value % 1.0) > 1e-6:
        raise InvalidQuotaError(f"{key} cannot be a fractional value.")
    return str(int(value + 1e-6))


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quotas of an entity's config map (other keys, such as SCRAM credentials,
    are not quotas; an unreadable value is left out)."""
    out: dict[str, float] = {}
    for key, raw in config.items():
        if key in QUOTA_KEYS:
            try:
                out[key] = float(raw)
            except ValueError:
                continue
    return out


# -- which quota applies to a client ---------------------------------------------------

Tags = tuple[str, str]  # (sanitized user, client id) of a sensor; "" where not a part


def metric_tags(overrides: Mapping[QuotaEntity, float], user: str, client_id: str) -> Tags:
    """The sensor a client's usage is counted in (Kafka's DefaultQuotaCallback
    .quotaMetricTags): the most specific entity with a quota decides whether the
    client shares its quota with the user's other clients, with the client-id's
    other users, or has one of its own. In Kafka's order:
    user+client, user+default client, user, default user+client, default
    user+default client, default user, client, default client."""
    if QuotaEntity(user, client_id) in overrides or QuotaEntity(user, DEFAULT) in overrides:
        return user, client_id
    if QuotaEntity(user) in overrides:
        return user, ""
    if QuotaEntity(DEFAULT, client_id) in overrides or QuotaEntity(DEFAULT, DEFAULT) in overrides:
        return user, client_id
    if QuotaEntity(DEFAULT) in overrides:
        return user, ""
    return "", client_id


def quota_limit(overrides: Mapping[QuotaEntity, float], tags: Tags) -> float | None:
    """The bound of a sensor (Kafka's DefaultQuotaCallback.quotaLimit); None: none."""
    user, client_id = tags
    if user and client_id:
        order = [
            QuotaEntity(user, client_id),
            QuotaEntity(user, DEFAULT),
            QuotaEntity(DEFAULT, client_id),
            QuotaEntity(DEFAULT, DEFAULT),
        ]
    elif user:
        order = [QuotaEntity(user), QuotaEntity(DEFAULT)]
    elif client_id:
        order = [QuotaEntity(client_id=client_id), QuotaEntity(client_id=DEFAULT)]
    else:
        return None
    for entity in order:
        found = overrides.get(entity)
        if found is not None:
            return found
    return None
