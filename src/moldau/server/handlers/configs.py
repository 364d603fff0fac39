"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44): topic
configs (stored in /config/topics), and this broker's configs: static, except the
dynamic ones (the replication quotas, and the topics' defaults as Kafka's
DynamicLogConfig), stored in /config/brokers/<id> or, for the empty resource name,
/config/brokers/<default>."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.config.broker import BROKER_CONFIG, DYNAMIC_BROKER_CONFIGS
from moldau.config.configdef import ConfigType, to_string
from moldau.config.topic import (
    DYNAMIC_LOG_CONFIGS,
    TOPIC_CONFIG,
    ConfigSource,
    describe,
    validate_topic_overrides,
)
from moldau.metadata.znodes import DEFAULT_BROKER_ENTITY
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import (
    ErrorCode,
    InvalidConfigError,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from moldau.server.request import RequestContext, Response

if TYPE_CHECKING:
    from moldau.server.broker import Broker

TOPIC = 2
BROKER = 4

# What AlterConfigs may change on a broker or the cluster default.
_DYNAMIC = DYNAMIC_BROKER_CONFIGS | DYNAMIC_LOG_CONFIGS

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def _topic_overrides(broker: Broker, topic: str) -> dict[str, str]:
    if not await broker.client.topic_exists(topic):
        raise UnknownTopicOrPartitionError(f"Topic {topic} does not exist")
    return await broker.client.get_topic_config(topic)


def _default_broker_configs(broker: Broker) -> list[dict[str, Any]]:
    """The cluster-wide default resource (the empty name) as Kafka describes it: only the
    dynamic defaults set, each with itself as its one synonym."""
    out = []
    for name, value in sorted(broker.dynamic_config.defaults.items()):
        key = BROKER_CONFIG.keys.get(name)
        if key is None:
            continue
        source = int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        out.append(
            {
                "name": name,
                "value": value,
                "read_only": False,
                "config_source": source,
                "is_sensitive": key.type == ConfigType.PASSWORD,
                "synonyms": [{"name": name, "value": value, "source": source}],
                "config_type": int(key.type),
                "documentation": key.doc,
            }
        )
    return out


def _broker_configs(broker: Broker) -> list[dict[str, Any]]:
    dynamic = broker.dynamic_config
    out = []
    for key in BROKER_CONFIG.keys.values():
        current, source = dynamic.value_and_source(key.name)
        value = to_string(current)
        layers: list[tuple[str | None, ConfigSource]] = [
            (layer[key.name], kind)
            for layer, kind in (
                (dynamic.per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                (dynamic.defaults, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            )
            if key.name in layer
        ]
        if key.name in broker.config.explicit:
            layers.append((to_string(broker.config[key.name]), ConfigSource.STATIC_BROKER_CONFIG))
        layers.append((to_string(key.default), ConfigSource.DEFAULT_CONFIG))
        if key.type == ConfigType.PASSWORD:
            # Kafka never shows a secret (a JAAS config holds passwords).
            value = None
            layers = [(None, s) for _, s in layers]
        synonyms = [{"name": key.name, "value": v, "source": int(s)} for v, s in layers]
        out.append(
            {
                "name": key.name,
                "value": value,
                "read_only": key.name not in _DYNAMIC,
                "config_source": int(source),
                "is_sensitive": key.type == ConfigType.PASSWORD,
                "synonyms": synonyms,
                "config_type": int(key.type),
                "documentation": key.doc,
            }
        )
    return out


def _broker_entity(broker: Broker, name: str) -> str:
    if name == "":
        return DEFAULT_BROKER_ENTITY
    if name != str(broker.broker_id):
        raise InvalidRequestError(
            f"Unexpected broker id, expected {broker.broker_id} or empty string, but received "
            f"{name}"
        )
    return name


async def handle_describe_configs(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    version = ctx.version
    synonyms = bool(getattr(req, "include_synonyms", False))  # v1+
    docs = bool(getattr(req, "include_documentation", False))
    results = []
    for res in req.resources:
        result: dict[str, Any] = {
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
            "error_code": ErrorCode.none,
            "configs": [],
        }
        try:
            if res.resource_type == TOPIC:
                overrides = await _topic_overrides(broker, res.resource_name)
                configs = [
                    {
                        "name": c.name,
                        "value": c.value,
                        "read_only": c.read_only,
                        "config_source": int(c.source),
                        "is_sensitive": False,
                        "synonyms": [
                            {"name": n, "value": v, "source": int(s)} for n, v, s in c.synonyms
                        ]
                        if synonyms
                        else [],
                        "config_type": int(c.type),
                        "documentation": c.doc if docs else None,
                    }
                    for c in describe(overrides, broker.dynamic_config)
                ]
            elif res.resource_type == BROKER:
                entity = _broker_entity(broker, res.resource_name)
                configs = (
                    _default_broker_configs(broker)
                    if entity == DEFAULT_BROKER_ENTITY
                    else _broker_configs(broker)
                )
                for c in configs:
                    if not synonyms:
                        c["synonyms"] = []
                    if not docs:
                        c["documentation"] = None
            else:
                raise InvalidRequestError(f"Unsupported resource type {res.resource_type}")
            keys = res.configuration_keys
            if keys:
                configs = [c for c in configs if c["name"] in set(keys)]
            if version == 0:  # v0 says whether a config is at its default, not its source
                for c in configs:
                    c["is_default"] = c["config_source"] == ConfigSource.DEFAULT_CONFIG
            result["configs"] = configs
        except KafkaError as e:
            result["error_code"] = e.code
            result["error_message"] = e.message or None
        results.append(result)
    return build_response(
        ApiKey.DESCRIBE_CONFIGS, version, {"throttle_time": 0, "results": results}
    )


async def _alter_topic(
    broker: Broker, topic: str, new: dict[str, str], validate_only: bool
) -> None:
    validate_topic_overrides(new, topic)
    if not validate_only:
        await broker.client.set_topic_config(topic, new)


async def _alter_broker(
    broker: Broker, entity: str, new: dict[str, str], validate_only: bool
) -> None:
    static = sorted(set(new) - _DYNAMIC)
    if static:
        raise InvalidRequestError(f"Cannot update these configs dynamically: {static}")
    for name, value in new.items():
        BROKER_CONFIG.parse_value(name, value)
    if not validate_only:
        await broker.client.set_broker_config(entity, new)
        # Applied here at once, not only when /config/changes comes round: the admin
        # client sends a broker's configs to that broker, and a describe right after
        # an alter should show the new value.
        await broker.dynamic_config.on_change(entity)


async def _current(broker: Broker, resource_type: int, name: str) -> dict[str, str]:
    """The stored overrides of a topic, or dynamic configs of a broker entity."""
    if resource_type == TOPIC:
        return await _topic_overrides(broker, name)
    if resource_type == BROKER:
        return await broker.client.get_broker_config(_broker_entity(broker, name))
    raise InvalidRequestError(f"Unsupported resource type {resource_type}")


async def _alter(
    broker: Broker, resource_type: int, name: str, new: dict[str, str], validate_only: bool
) -> None:
    if resource_type == TOPIC:
        await _alter_topic(broker, name, new, validate_only)
    else:
        await _alter_broker(broker, _broker_entity(broker, name), new, validate_only)


async def handle_alter_configs(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    responses = []
    for res in req.resources:
        response: dict[str, Any] = {
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
            "error_code": ErrorCode.none,
        }
        try:
            await _current(broker, res.resource_type, res.resource_name)
            new = {c.name: c.value for c in res.configs if c.value is not None}
            await _alter(broker, res.resource_type, res.resource_name, new, bool(req.validate_only))
        except KafkaError as e:
            response["error_code"] = e.code
            response["error_message"] = e.message or None
        responses.append(response)
    return build_response(
        ApiKey.ALTER_CONFIGS, ctx.version, {"throttle_time": 0, "responses": responses}
    )


async def handle_incremental_alter_configs(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    responses = []
    for res in req.resources:
        response: dict[str, Any] = {
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
            "error_code": ErrorCode.none,
        }
        try:
            new = dict(await _current(broker, res.resource_type, res.resource_name))
            names = [c.name for c in res.configs]
            if len(names) != len(set(names)):
                raise InvalidRequestError("Error due to duplicate config keys")
            for c in res.configs:
                _apply(new, c.name, c.config_operation, c.value, broker, res.resource_type)
            await _alter(broker, res.resource_type, res.resource_name, new, bool(req.validate_only))
        except KafkaError as e:
            response["error_code"] = e.code
            response["error_message"] = e.message or None
        responses.append(response)
    return build_response(
        ApiKey.INCREMENTAL_ALTER_CONFIGS, ctx.version, {"throttle_time": 0, "responses": responses}
    )


def _apply(
    config: dict[str, str],
    name: str,
    op: int,
    value: str | None,
    broker: Broker,
    resource_type: int,
) -> None:
    kind = "topic" if resource_type == TOPIC else "broker"
    key = (TOPIC_CONFIG if resource_type == TOPIC else BROKER_CONFIG).keys.get(name)
    if key is None:
        raise InvalidConfigError(f"Unknown {kind} config name: {name}")
    if op == SET:
        if value is None:
            raise InvalidRequestError(f"Null value not supported for {name}")
        config[name] = value
    elif op == DELETE:
        config.pop(name, None)
    elif op in (APPEND, SUBTRACT):
        if key.type != ConfigType.LIST:
            raise InvalidConfigError(f"Config value append is not allowed for config key: {name}")
        current = config.get(name)
        items = (
            [i for i in current.split(",") if i]
            if current is not None
            else list(
                (
                    broker.dynamic_config.topic_default(key)
                    if resource_type == TOPIC
                    else key.default
                )
                or []
            )
        )
        given = [i.strip() for i in (value or "").split(",") if i.strip()]
        if op == APPEND:
            items += [i for i in given if i not in items]
        else:
            items = [i for i in items if i not in given]
        config[name] = ",".join(items)
    else:
        raise InvalidRequestError(f"Unknown config operation {op}")
