"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44): topic
configs (stored in /config/topics), and this broker's static config (read only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.config.broker import BROKER_CONFIG
from moldau.config.configdef import ConfigType, to_string
from moldau.config.topic import TOPIC_CONFIG, ConfigSource, describe, validate_topic_overrides
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

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def _topic_overrides(broker: Broker, topic: str) -> dict[str, str]:
    if not await broker.client.topic_exists(topic):
        raise UnknownTopicOrPartitionError(f"Topic {topic} does not exist")
    return await broker.client.get_topic_config(topic)


def _broker_configs(broker: Broker) -> list[dict[str, Any]]:
    out = []
    for key in BROKER_CONFIG.keys.values():
        explicit = key.name in broker.config.explicit
        source = ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG
        value = to_string(broker.config[key.name])
        out.append(
            {
                "name": key.name,
                "value": value,
                "read_only": True,
                "config_source": int(source),
                "is_sensitive": key.type == ConfigType.PASSWORD,
                "synonyms": [{"name": key.name, "value": value, "source": int(source)}],
                "config_type": int(key.type),
                "documentation": key.doc,
            }
        )
    return out


async def handle_describe_configs(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    version = ctx.version
    synonyms = bool(req.include_synonyms)
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
                    for c in describe(overrides, broker.config)
                ]
            elif res.resource_type == BROKER:
                if res.resource_name not in ("", str(broker.broker_id)):
                    raise InvalidRequestError(
                        f"Unexpected broker id, expected {broker.broker_id} or empty string, "
                        f"but received {res.resource_name}"
                    )
                configs = _broker_configs(broker)
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
    validate_topic_overrides(new)
    if not validate_only:
        await broker.client.set_topic_config(topic, new)


def _not_for_brokers(resource_type: int) -> None:
    if resource_type == BROKER:
        raise InvalidRequestError(
            "Dynamic broker configs are not supported: set them in server.properties"
        )
    if resource_type != TOPIC:
        raise InvalidRequestError(f"Unsupported resource type {resource_type}")


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
            _not_for_brokers(res.resource_type)
            await _topic_overrides(broker, res.resource_name)
            new = {c.name: c.value for c in res.configs if c.value is not None}
            await _alter_topic(broker, res.resource_name, new, bool(req.validate_only))
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
            _not_for_brokers(res.resource_type)
            current = await _topic_overrides(broker, res.resource_name)
            new = dict(current)
            names = [c.name for c in res.configs]
            if len(names) != len(set(names)):
                raise InvalidRequestError("Error due to duplicate config keys")
            for c in res.configs:
                _apply(new, c.name, c.config_operation, c.value, broker)
            await _alter_topic(broker, res.resource_name, new, bool(req.validate_only))
        except KafkaError as e:
            response["error_code"] = e.code
            response["error_message"] = e.message or None
        responses.append(response)
    return build_response(
        ApiKey.INCREMENTAL_ALTER_CONFIGS, ctx.version, {"throttle_time": 0, "responses": responses}
    )


def _apply(config: dict[str, str], name: str, op: int, value: str | None, broker: Broker) -> None:
    key = TOPIC_CONFIG.keys.get(name)
    if key is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
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
            else list(broker.config.topic_default(key) or [])
        )
        given = [i.strip() for i in (value or "").split(",") if i.strip()]
        if op == APPEND:
            items += [i for i in given if i not in items]
        else:
            items = [i for i in items if i not in given]
        config[name] = ",".join(items)
    else:
        raise InvalidRequestError(f"Unknown config operation {op}")
