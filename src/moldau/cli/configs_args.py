"""`moldau configs`' flags as kafka-configs.sh reads them (Kafka 4.1's ConfigCommand):
which entities a command names, the checks Kafka makes before it connects, and
`--add-config`/`--add-config-file`/`--delete-config` parsed into configs. Pure: no
connection here, so that every rule is a unit test away.

An entity is given either as `--entity-type T` with `--entity-name N` or
`--entity-default`, or with a shorthand (`--topic t`, `--broker 1`,
`--broker-defaults`, `--user u`, `--user-defaults`, `--client c`,
`--client-defaults`); `users` and `clients` together name a user's client (a
quota entity). The names pair with the types in Kafka's order: the
`--entity-name`/`--entity-default` flags in the order given, then the shorthands.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from moldau.cli.errors import CliError

TOPICS, CLIENTS, USERS, BROKERS = "topics", "clients", "users", "brokers"
#: The entity types Moldau's tool handles over --bootstrap-server (Kafka's also has
#: broker-loggers, ips, client-metrics and groups, which Moldau's broker does not keep).
BOOTSTRAP_TYPES: tuple[str, ...] = (TOPICS, CLIENTS, USERS, BROKERS)
#: Over --zookeeper only users' SCRAM credentials are written (as Kafka 3.x allowed).
ZOOKEEPER_TYPES: tuple[str, ...] = (USERS,)
#: The shorthand flags, by argparse destination, in the order Kafka appends them.
ENTITY_FLAGS = (("topic", TOPICS), ("client", CLIENTS), ("user", USERS), ("broker", BROKERS))
DEFAULT_FLAGS = (
    ("client_defaults", CLIENTS),
    ("user_defaults", USERS),
    ("broker_defaults", BROKERS),
)

#: The client quota configs (Kafka's QuotaConfig), for users, clients and both.
QUOTA_CONFIGS = frozenset(
    {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}
)
SCRAM_CONFIGS = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})

# A comma or equals sign counts only outside [...] (Kafka's bracketed values).
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_KEY = re.compile(r"[a-zA-Z0-9._-]*")


@dataclass(frozen=True)
class Entities:
    """The entity types a command names and the names given for them ("" the
    default entity); fewer names than types means "every one" of the rest."""

    types: tuple[str, ...]
    names: tuple[str, ...]

    @property
    def head(self) -> str:
        return self.types[0]

    @property
    def name(self) -> str | None:
        """The first entity's name, None when not given."""
        return self.names[0] if self.names else None

    @property
    def quota_pairs(self) -> tuple[tuple[str, str | None], ...]:
        """(type, name or None for any) of each type, for a quota filter."""
        return tuple(
            (t, self.names[i] if i < len(self.names) else None) for i, t in enumerate(self.types)
        )


def entities(args: argparse.Namespace) -> Entities:
    """The entity types and names of the command line, in Kafka's order."""
    types = list(args.entity_type or [])
    names = list(args.entity_names or [])
    for dest, kind in ENTITY_FLAGS:
        if getattr(args, dest) is not None:
            types.append(kind)
            names.append(str(getattr(args, dest)))
    for dest, kind in DEFAULT_FLAGS:
        if getattr(args, dest):
            types.append(kind)
            names.append("")
    return Entities(tuple(types), tuple(names))


def _uses_shorthand(args: argparse.Namespace) -> bool:
    return any(getattr(args, d) is not None for d, _ in ENTITY_FLAGS) or any(
        getattr(args, d) for d, _ in DEFAULT_FLAGS
    )


def check_args(args: argparse.Namespace) -> Entities:
    """Kafka's checks of the flags, in its order; the entities they name."""
    if (args.bootstrap_server is None) == (args.zookeeper is None):
        raise CliError("Exactly one of --bootstrap-server and --zookeeper must be specified")
    if args.describe and (args.add_config is not None or args.delete_config is not None
                          or args.add_config_file is not None):  # fmt: skip
        raise CliError("--add-config, --add-config-file and --delete-config go with --alter")
    found = entities(args)
    types = found.types
    duplicates = sorted({t for t in types if types.count(t) > 1})
    if duplicates:
        raise CliError(f"Duplicate entity type(s) specified: {','.join(duplicates)}")
    if args.zookeeper is not None:
        allowed, connect = ZOOKEEPER_TYPES, "--zookeeper"
    else:
        allowed, connect = BOOTSTRAP_TYPES, "--bootstrap-server"
    for t in types:
        if t not in allowed:
            raise CliError(
                f"Invalid entity type {t}, the entity type must be one of "
                f"{', '.join(allowed)} with a {connect} argument"
            )
    if not types:
        raise CliError("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {USERS, CLIENTS}:
        raise CliError(f"Only '{USERS}' and '{CLIENTS}' entity types may be specified together")
    if (args.entity_type or args.entity_names) and _uses_shorthand(args):
        raise CliError(
            "--entity-{type,name,default} should not be used in conjunction with specific "
            "entity flags"
        )
    has_name = any(found.names)
    has_default = "" in found.names
    if args.all and args.zookeeper is not None:
        raise CliError("--bootstrap-server must be specified for --all")
    if has_name and BROKERS in types:
        for name in found.names:
            if name and not _is_int(name):
                raise CliError(
                    f"The entity name for {found.head} must be a valid integer broker id, "
                    f"but it is: {name}"
                )
    if args.describe and has_default and not set(types) & {USERS, CLIENTS, BROKERS}:
        raise CliError(f"--entity-default must not be specified with --describe of {found.head}")
    if args.alter:
        if set(types) & {USERS, CLIENTS, BROKERS}:
            if not has_name and not has_default:
                raise CliError(
                    "An entity-name or default entity must be specified with --alter of users, "
                    "clients or brokers"
                )
        elif not has_name:
            raise CliError(f"An entity name must be specified with --alter of {','.join(types)}")
        if args.add_config is not None and args.add_config_file is not None:
            raise CliError("Only one of --add-config or --add-config-file must be specified")
        if args.add_config is None and args.add_config_file is None and args.delete_config is None:
            raise CliError(
                "At least one of --add-config, --add-config-file, or --delete-config must be "
                "specified with --alter"
            )
        if len(found.types) != len(found.names):
            raise CliError("An entity name must be specified for every entity type")
    return found


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def parse_add_config(text: str) -> dict[str, str]:
    """`k1=v1,k2=[a,b]` -> {k1: v1, k2: "a,b"}: commas and `=` inside brackets belong
    to the value, brackets are dropped, keys and values trimmed (as Kafka)."""
    items = re.split("," + _OUTSIDE_BRACKETS, text)
    while items and items[-1] == "":
        items.pop()  # Java's split drops trailing empty strings
    out: dict[str, str] = {}
    for item in items:
        pair = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item)
        if len(pair) != 2:
            raise CliError(
                'Invalid entity config: all configs to be added must be in the format "key=val" '
                'or "key=[val1,val2]" to group values which contain commas.'
            )
        out[pair[0].strip()] = re.sub(r"[\[\]]", "", pair[1]).strip()
    return out


def configs_to_add(args: argparse.Namespace) -> dict[str, str]:
    """--add-config-file's properties, then --add-config's entries; keys checked."""
    added: dict[str, str] = {}
    if args.add_config_file is not None:
        from moldau.config.broker import read_properties

        try:
            added.update(read_properties(Path(args.add_config_file)))
        except OSError as e:
            raise CliError(f"--add-config-file: cannot read {args.add_config_file}: "
                           f"{e.strerror or e}") from None  # fmt: skip
    if args.add_config is not None:
        added.update(parse_add_config(args.add_config))
    for key in added:
        if not _KEY.fullmatch(key):
            raise CliError(f"Invalid character found for config key: {key}")
    return added


def configs_to_delete(args: argparse.Namespace) -> list[str]:
    return [name.strip() for name in (args.delete_config or "").split(",") if name.strip()]


def scala_collection(kind: str, names: list[str]) -> str:
    """A Scala collection as Kafka's messages print one: `Set(a, b)`."""
    return f"{kind}({', '.join(names)})"


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it (how kafka-configs prints quota
    values): `1048576.0`, `1.2345678E7`, `5.0E-4`; Python's shortest digits."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0.0"
    digits_t = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(str(d) for d in digits_t.digits)
    exponent = len(digits) - 1 + int(digits_t.exponent)  # of the first digit
    if 1e-3 <= abs(value) < 1e7:
        if exponent >= 0:
            whole, frac = digits[: exponent + 1].ljust(exponent + 1, "0"), digits[exponent + 1 :]
        else:
            whole, frac = "0", "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{frac or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"
