"""ConfigDef: a table of properties, each with Kafka's name, type, default,
validator, importance and doc. Values arrive as strings (server.properties,
--override, AlterConfigs) and leave typed."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any

from moldau.protocol.errors import InvalidConfigError


class ConfigType(IntEnum):
    """Numbered as DescribeConfigs v3+ reports them."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class Importance(Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


Validator = Callable[[str, Any], None]

_INT_RANGE = {
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: Any
    importance: Importance
    doc: str
    validator: Validator | None = None
    # Topic configs: the broker property that supplies the default (Kafka's synonym).
    server_default: str | None = None
    read_only: bool = False
    # Kafka 3.9 accepts it and says it is deprecated: why, and what happens to it.
    deprecated: str | None = None


class ConfigDef:
    def __init__(self, keys: Iterable[ConfigKey]) -> None:
        self.keys: dict[str, ConfigKey] = {}
        for key in keys:
            if key.name in self.keys:
                raise ValueError(f"duplicate config {key.name}")
            self.keys[key.name] = key

    def __contains__(self, name: object) -> bool:
        return name in self.keys

    def parse_value(self, name: str, raw: Any) -> Any:
        """Convert one value to its type and validate it; InvalidConfigError
        if it is unknown or bad."""
        key = self.keys.get(name)
        if key is None:
            raise InvalidConfigError(f"Unknown config {name}")
        value = convert(key, raw)
        if key.validator is not None and value is not None:
            key.validator(name, value)
        return value

    def parse(self, props: Mapping[str, Any], ignore_unknown: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, raw in props.items():
            if name not in self.keys and ignore_unknown:
                continue
            out[name] = self.parse_value(name, raw)
        return out

    def defaults(self) -> dict[str, Any]:
        return {k.name: k.default for k in self.keys.values()}


def convert(key: ConfigKey, raw: Any) -> Any:
    if raw is None:
        return None
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    kind = {ConfigType.INT: "INT", ConfigType.SHORT: "SHORT", ConfigType.LONG: "LONG"}
    try:
        if key.type == ConfigType.BOOLEAN:
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ValueError("Expected value to be either true or false")
            return lowered == "true"
        if key.type in _INT_RANGE:
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"Not a number of type {kind[key.type]}") from None
            lo, hi = _INT_RANGE[key.type]
            if not lo <= value <= hi:
                raise ValueError(f"Not a number of type {kind[key.type]}")
            return value
        if key.type == ConfigType.DOUBLE:
            try:
                return float(text)
            except ValueError:
                raise ValueError("Not a number of type DOUBLE") from None
        if key.type == ConfigType.LIST:
            return [item.strip() for item in text.split(",") if item.strip()]
        return raw
    except ValueError as e:
        raise InvalidConfigError(f"Invalid value {raw} for configuration {key.name}: {e}") from None


def to_string(value: Any) -> str | None:
    """A typed value as Kafka prints it in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


# -- validators -------------------------------------------------------------------------


def at_least(minimum: int | float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: Value must be at least {minimum}"
            )

    return check


def one_of(*allowed: str) -> Validator:
    def check(name: str, value: Any) -> None:
        values = value if isinstance(value, list) else [value]
        for v in values:
            if v not in allowed:
                raise InvalidConfigError(
                    f"Invalid value {v} for configuration {name}: String must be one of: "
                    + ", ".join(allowed)
                )

    return check


def between(minimum: float, maximum: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if not minimum <= value <= maximum:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: "
                f"Value must be between {minimum} and {maximum}"
            )

    return check


# Kafka's MetadataVersion names (3.9): the release, and its internal versions (IVn).
_METADATA_VERSIONS = {
    "0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0, "0.10.0": 2, "0.10.1": 3, "0.10.2": 1,
    "0.11.0": 3, "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3, "2.2": 2, "2.3": 2, "2.4": 2,
    "2.5": 1, "2.6": 1, "2.7": 3, "2.8": 2, "3.0": 2, "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1,
    "3.5": 3, "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1, "4.0": 2,
}  # fmt: skip


def is_metadata_version(text: str) -> bool:
    """Whether Kafka reads `text` as a MetadataVersion (its fromVersionString): a release
    ("2.8", "0.10.2"), one of its internal versions ("3.0-IV1"), or a longer release
    number cut to that ("2.8.1", "0.10.2.0")."""
    parts = text.split(".")
    kept = 3 if text.startswith("0.") else 2
    key = ".".join(parts[:kept])
    release, _, iv = key.partition("-IV")
    ivs = _METADATA_VERSIONS.get(release)
    if ivs is None:
        return False
    return not iv or (iv.isdigit() and int(iv) < ivs)


def metadata_version() -> Validator:
    def check(name: str, value: Any) -> None:
        if not is_metadata_version(str(value)):
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: {value} is not a Kafka version"
            )

    return check


def level(minimum: int, maximum: int, default: int | None = None) -> Validator:
    """A codec's compression level: within [minimum, maximum], or the codec's default."""

    def check(name: str, value: Any) -> None:
        if not (minimum <= value <= maximum or value == default):
            also = f" or equal to {default}" if default is not None else ""
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: "
                f"Value must be between {minimum} and {maximum}{also}"
            )

    return check
