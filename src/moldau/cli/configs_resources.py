"""`moldau configs` for topics, brokers and the brokers' defaults: DescribeConfigs
(32) and IncrementalAlterConfigs (44), one request each on the wire
(cli/admin_call.py), printed as kafka-configs.sh prints them:

    Dynamic configs for topic t are:
      retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}
    Default configs for brokers in the cluster are:
    Completed updating config for broker 1.

On the wire rather than through confluent-kafka: librdkafka keeps a config's
synonyms in a dict by name, which loses the broker's and the cluster default's
value of the same key (the lines above show every level), and its
IncrementalAlterConfigs refuses the cluster default (an empty broker name).
"""

from __future__ import annotations

from typing import Any

from moldau.cli.admin_call import AdminCalls, CallError
from moldau.cli.configs_args import BROKERS, TOPICS, Entities
from moldau.cli.errors import CliError
from moldau.controller.admin import MAX_NAME_LENGTH
from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode

DESCRIBE_CONFIGS_VERSION = 4
INCREMENTAL_ALTER_CONFIGS_VERSION = 1
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE = 0, 1

#: The wire's config_source as Kafka's Admin names it (ConfigEntry.ConfigSource).
SOURCE_NAMES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "DYNAMIC_CLIENT_METRICS_CONFIG",
    8: "DYNAMIC_GROUP_CONFIG",
}
_DYNAMIC_TOPIC, _DYNAMIC_BROKER, _DYNAMIC_DEFAULT = 1, 2, 3


def validate_topic(name: str) -> None:
    """Kafka 4.1's Topic.validate, with its messages."""
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_NAME_LENGTH:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    elif not all(c.isascii() and (c.isalnum() or c in "._-") for c in name):
        reason = (
            f"'{name}' contains one or more characters other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    else:
        return
    raise CliError(f"Topic name is invalid: {reason}")


def _null(value: str | None) -> str:
    return "null" if value is None else value


def entry_line(entry: Any) -> str:
    """One config as kafka-configs --describe prints it."""
    synonyms = ", ".join(
        f"{SOURCE_NAMES.get(int(s.source), 'UNKNOWN')}:{s.name}={_null(s.value)}"
        for s in entry.synonyms
    )
    sensitive = "true" if entry.is_sensitive else "false"
    return f"  {entry.name}={_null(entry.value)} sensitive={sensitive} synonyms={{{synonyms}}}"


def dynamic_source(entity_type: str, name: str) -> int:
    """The config source of what `--alter` set on this entity."""
    if entity_type == TOPICS:
        return _DYNAMIC_TOPIC
    return _DYNAMIC_DEFAULT if name == "" else _DYNAMIC_BROKER


class Resources:
    """Describe and alter topics and brokers over one tool's connections."""

    def __init__(self, calls: AdminCalls, brokers: dict[int, tuple[str, int]]) -> None:
        """`brokers`: each broker's address, by id (from Metadata)."""
        if not brokers:
            raise CliError("the cluster has no brokers")
        self.calls = calls
        self.brokers = brokers

    def _address(self, entity_type: str, name: str) -> tuple[str, int]:
        # A broker's own configs come from that broker; the rest from any one.
        if entity_type == BROKERS and name:
            address = self.brokers.get(int(name))
            if address is not None:
                return address
        return self.brokers[min(self.brokers)]

    def _call(
        self, entity_type: str, name: str, api_key: int, version: int, fields: dict[str, Any]
    ) -> Any:
        return call(self.calls, self._address(entity_type, name), api_key, version, fields)

    def configs(self, entity_type: str, name: str, synonyms: bool) -> list[Any]:
        """The entity's configs as DescribeConfigs answers, sorted by name."""
        resource_type = TOPIC_RESOURCE if entity_type == TOPICS else BROKER_RESOURCE
        resource = {"resource_type": resource_type, "resource_name": name,
                    "configuration_keys": None}  # fmt: skip
        response = self._call(
            entity_type, name, ApiKey.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION,
            {"resources": [resource], "include_synonyms": synonyms,
             "include_documentation": False},
        )  # fmt: skip
        [result] = response.results
        check(result.error_code, result.error_message)
        return sorted(result.configs, key=lambda c: str(c.name))

    def describe(self, found: Entities, all_configs: bool, topics: list[str]) -> list[str]:
        """kafka-configs --describe's lines for topics or brokers; `topics`: the
        cluster's (to list them all, or to tell that one does not exist)."""
        entity_type, name = found.head, found.name
        if entity_type == TOPICS and name is not None:
            validate_topic(name)
        if name is not None:
            names = [name]
        elif entity_type == TOPICS:
            names = sorted(topics)
        else:
            names = [str(b) for b in sorted(self.brokers)] + [""]
        lines = []
        for entity in names:
            if not all_configs and not self._exists(entity_type, entity, topics):
                # Kafka's tool says so and stops, with success.
                lines.append(
                    f"The {entity_type[:-1]} '{entity}' doesn't exist and doesn't have "
                    "dynamic config."
                )
                return lines
            if entity == "":
                lines.append(f"Default configs for {entity_type} in the cluster are:")
            else:
                kind = "All" if all_configs else "Dynamic"
                lines.append(f"{kind} configs for {entity_type[:-1]} {entity} are:")
            source = dynamic_source(entity_type, entity)
            lines.extend(
                entry_line(c)
                for c in self.configs(entity_type, entity, synonyms=True)
                if all_configs or int(c.config_source) == source
            )
        return lines

    def _exists(self, entity_type: str, name: str, topics: list[str]) -> bool:
        if entity_type == TOPICS:
            return name in topics
        return name == "" or int(name) in self.brokers

    def alter(self, found: Entities, added: dict[str, str], deleted: list[str]) -> None:
        """Kafka's alterResourceConfig: each deleted key must be set on the entity;
        then one IncrementalAlterConfigs of SETs and DELETEs."""
        entity_type, name = found.head, found.names[0]
        if entity_type == TOPICS:
            validate_topic(name)
        source = dynamic_source(entity_type, name)
        current = {
            str(c.name)
            for c in self.configs(entity_type, name, synonyms=False)
            if int(c.config_source) == source
        }
        missing = [k for k in deleted if k not in current]
        if missing:
            raise CliError(f"Invalid config(s): {','.join(missing)}")
        ops = [{"name": k, "config_operation": SET, "value": v} for k, v in added.items()]
        ops += [{"name": k, "config_operation": DELETE, "value": None} for k in deleted]
        resource_type = TOPIC_RESOURCE if entity_type == TOPICS else BROKER_RESOURCE
        response = self._call(
            entity_type, name, ApiKey.INCREMENTAL_ALTER_CONFIGS,
            INCREMENTAL_ALTER_CONFIGS_VERSION,
            {"resources": [{"resource_type": resource_type, "resource_name": name,
                            "configs": ops}], "validate_only": False},
        )  # fmt: skip
        [result] = response.responses
        check(result.error_code, result.error_message)


def call(
    calls: AdminCalls, address: tuple[str, int], api_key: int, version: int,
    fields: dict[str, Any],
) -> Any:  # fmt: skip
    """One request; a broker that does not answer is a CliError."""
    try:
        return calls.call(address, api_key, version, fields)
    except CallError as e:
        raise CliError(f"cannot reach broker at {address[0]}:{address[1]}: {e.reason}") from None


def check(code: int, message: str | None) -> None:
    """A resource's error as one line: the broker's message, else the error's name."""
    if code != ErrorCode.none:
        name = ErrorCode(code).name.upper()
        raise CliError(f"{name}: {message}" if message else name)
