"""What `moldau topics`, `groups`, `produce` and `consume` share: the connection and
action flags, the `key=value` and properties-file parsing, and one place that turns
librdkafka's errors into a `CliError` a user can read.

The tools are built on confluent-kafka (librdkafka), the client users run against
Kafka. librdkafka keeps retrying an unreachable broker and logs every attempt on
stderr; here its log is silenced and its error callback watched instead, so a
wrong `--bootstrap-server` fails at once with one line.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

from moldau.cli.errors import CliError

#: How long a tool waits for the broker to answer one request, in seconds.
TIMEOUT_S = 10.0
#: How often the waits below serve librdkafka's callbacks, in seconds.
_TICK_S = 0.1

T = TypeVar("T")

_RDKAFKA_PREFIX = re.compile(r"^[^\s]+/(?:bootstrap|\d+): ")
_RDKAFKA_SUFFIX = re.compile(r" \(after \d+ms in state \w+\)$")


def add_bootstrap_argument(
    p: argparse.ArgumentParser, *aliases: str, required: bool = True
) -> None:
    p.add_argument(
        "--bootstrap-server",
        *aliases,
        dest="bootstrap_server",
        required=required,
        metavar="HOST:PORT",
        help="the broker(s) to connect to, comma-separated",
    )


def add_command_config_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="a properties file of admin client settings (librdkafka names)",
    )


def add_admin_arguments(
    p: argparse.ArgumentParser, actions: Mapping[str, str], *, bootstrap_required: bool = True
) -> None:
    """An admin tool's connection flags and its one action flag of `actions` (flag
    name -> help), as Kafka's kafka-acls and kafka-configs take them (`--add`)."""
    add_bootstrap_argument(p, required=bootstrap_required)
    add_command_config_argument(p)
    group = p.add_mutually_exclusive_group(required=True)
    for name, help_text in actions.items():
        group.add_argument(f"--{name}", action="store_true", help=help_text)


def add_action_arguments(p: argparse.ArgumentParser, actions: Iterable[str]) -> None:
    """An admin tool's ACTION, given as a word or, as Kafka's tools take it, as a flag
    (`create` or `--create`); and its `--command-config`."""
    actions = tuple(actions)
    add_command_config_argument(p)
    p.add_argument("action", nargs="?", choices=actions, metavar="ACTION", help=", ".join(actions))
    for action in actions:
        p.add_argument(
            f"--{action}",
            dest="action_flags",
            action="append_const",
            const=action,
            help=f"the same as the {action} ACTION",
        )


def chosen_action(args: argparse.Namespace, actions: Iterable[str]) -> str:
    """The one action asked for, whether as a word or as a flag."""
    chosen = ([args.action] if args.action else []) + list(args.action_flags or [])
    if len(set(chosen)) != 1:
        actions = tuple(actions)
        words = ", ".join(actions[:-1]) + f" or {actions[-1]}"
        flags = ", ".join(f"--{a}" for a in actions)
        raise CliError(f"exactly one action is needed: {words} (or {flags})")
    return str(chosen[0])


def flag_name(dest: str) -> str:
    """The command-line flag of an argparse destination: `all_groups` -> `--all-groups`."""
    return "--" + dest.replace("_", "-")


def given(value: object) -> bool:
    """Whether an option was given: 0 is a value (`--to-offset 0`), not an absence."""
    return value is not None and value is not False and value != []


def check_valid_with(
    args: argparse.Namespace, action: str, valid_with: Mapping[str, Iterable[str]]
) -> None:
    """Refuse an option given with an action it means nothing to."""
    for dest, valid in valid_with.items():
        if given(getattr(args, dest)) and action not in valid:
            raise CliError(f"{flag_name(dest)} is only valid with {' or '.join(sorted(valid))}")


def parse_key_values(items: Iterable[str], flag: str) -> dict[str, str]:
    """`["a=1", "b=2"]` -> `{"a": "1", "b": "2"}`; the value may contain `=`."""
    parsed: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{flag} expects KEY=VALUE, got {item!r}")
        parsed[key.strip()] = value
    return parsed


def read_config_file(path: Path | None, flag: str) -> dict[str, str]:
    """A Java properties file of client settings (`--command-config` and the like)."""
    if path is None:
        return {}
    from moldau.config.broker import read_properties

    try:
        return read_properties(path)
    except OSError as e:
        raise CliError(f"{flag}: cannot read {path}: {e.strerror or e}") from None


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The KafkaError a confluent-kafka exception carries, if any."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def error_text(err: KafkaError) -> str:
    """A KafkaError as one line: the broker's message when it sent one."""
    text = str(err.str())
    text = _RDKAFKA_SUFFIX.sub("", _RDKAFKA_PREFIX.sub("", text))
    return text or str(err.name())


class BrokerWatch:
    """librdkafka's `error_cb`: notices when every bootstrap broker refused the
    connection before any answered, so a tool can fail at once instead of
    retrying until its timeout. Once a broker has answered, a lost connection is
    left to librdkafka, which reconnects, as the Java tools do."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.reached = False
        self.all_down = False
        self.last_failure: str | None = None
        self.fatal: KafkaError | None = None
        self.refused: str | None = None

    def on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self.all_down = True
            return
        self.last_failure = error_text(err)
        if err.fatal():
            self.fatal = err
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            # A refused login or certificate: retrying cannot help (as Kafka's tools,
            # which stop at a SaslAuthenticationException or SslAuthenticationException).
            self.refused = self.last_failure

    def unreachable(self, detail: str | None = None) -> CliError:
        reason = detail or self.last_failure
        return CliError(
            f"cannot reach broker at {self.bootstrap}" + (f" ({reason})" if reason else "")
        )

    def check(self) -> None:
        """Raise if the broker is known to be unreachable, or the client failed."""
        if self.fatal is not None:
            raise CliError(error_text(self.fatal))
        if self.refused is not None:
            raise CliError(f"authentication failed at {self.bootstrap}: {self.refused}")
        if self.all_down and not self.reached:
            raise self.unreachable()


def client_config(bootstrap: str, watch: BrokerWatch, *layers: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka settings: quiet logs and our error callback, then each layer in
    turn (a config file, then repeated `--*-property` flags, then explicit flags),
    the last one winning; `bootstrap.servers` is always `--bootstrap-server`."""
    conf: dict[str, Any] = {"log_level": 0, "error_cb": watch.on_error}
    for layer in layers:
        conf.update(layer)
    conf["bootstrap.servers"] = bootstrap
    return conf


def admin_client(args: argparse.Namespace) -> tuple[Any, BrokerWatch]:
    """An AdminClient for an admin tool's `--bootstrap-server` and `--command-config`,
    and the watch that notices an unreachable broker."""
    from confluent_kafka.admin import AdminClient

    watch = BrokerWatch(args.bootstrap_server)
    conf = client_config(
        args.bootstrap_server,
        watch,
        read_config_file(args.command_config, "--command-config"),
    )
    return make_client(AdminClient, conf), watch


def cluster_metadata(args: argparse.Namespace) -> Any:
    """The brokers and topics of an admin tool's cluster (librdkafka's Metadata)."""
    admin, watch = admin_client(args)
    return fetch_metadata(admin, watch)


def make_client(factory: Callable[[dict[str, Any]], T], conf: dict[str, Any]) -> T:
    """Construct a client; a bad setting (`--producer-property nonsense=1`) is a
    user mistake."""
    try:
        return factory(conf)
    except KafkaException as e:
        err = kafka_error(e)
        raise CliError(error_text(err) if err is not None else str(e)) from None
    except (TypeError, ValueError) as e:
        raise CliError(str(e)) from None


def wait_result(
    client: Any, watch: BrokerWatch, future: concurrent.futures.Future[T], what: str
) -> T:
    """Wait for an AdminClient future, serving callbacks so an unreachable broker
    is noticed at once. Returns its result, or raises its KafkaException."""
    deadline = time.monotonic() + TIMEOUT_S + 2.0  # the request itself times out first
    while True:
        done, _ = concurrent.futures.wait([future], timeout=_TICK_S)
        if done:
            break
        client.poll(0)
        watch.check()
        if time.monotonic() >= deadline:
            raise CliError(f"timed out after {TIMEOUT_S:g}s waiting for {what}")
    try:
        return future.result()
    except KafkaException as e:
        err = kafka_error(e)
        if err is not None and err.code() == KafkaError._TIMED_OUT:
            raise CliError(f"timed out waiting for {what}: {error_text(err)}") from None
        raise


def fetch_metadata(client: Any, watch: BrokerWatch, topic: str | None = None) -> Any:
    """Cluster metadata (for one topic, or all), in short attempts so that an
    unreachable broker fails fast."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        client.poll(0)
        watch.check()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise watch.unreachable(f"no answer in {TIMEOUT_S:g}s")
        try:
            if topic is None:
                md = client.list_topics(timeout=min(0.5, remaining))
            else:
                md = client.list_topics(topic, timeout=min(0.5, remaining))
        except KafkaException as e:
            err = kafka_error(e)
            if err is not None and err.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
                continue
            raise CliError(error_text(err) if err is not None else str(e)) from None
        watch.reached = True
        return md


def topic_partitions(client: Any, watch: BrokerWatch, topic: str) -> list[int]:
    """The partition ids of `topic`, waiting briefly while leaders are being
    elected; a `CliError` if the topic does not exist."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        md = fetch_metadata(client, watch, topic)
        t = md.topics.get(topic)
        err = t.error if t is not None else None
        if t is not None and err is None and t.partitions:
            return sorted(int(p) for p in t.partitions)
        if t is None or (err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise CliError(f"topic '{topic}' does not exist")
        if err is not None and err.code() != KafkaError.LEADER_NOT_AVAILABLE:
            raise CliError(f"topic '{topic}': {error_text(err)}")
        if time.monotonic() >= deadline:
            detail = error_text(err) if err is not None else "no partitions"
            raise CliError(f"topic '{topic}' is not available: {detail}")
        time.sleep(_TICK_S)
