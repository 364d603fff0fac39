"""`moldau configs`: kafka-configs' flags and checks, `--add-config` parsing, the
SCRAM entries, and the lines it prints (what Kafka 4.1's kafka-configs prints)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from moldau.cli.configs import add_parser, completed, run, user_client_is_quota
from moldau.cli.configs_args import (
    Entities,
    check_args,
    configs_to_add,
    java_double,
    parse_add_config,
)
from moldau.cli.configs_quotas import filter_components, quota_line
from moldau.cli.configs_resources import entry_line, validate_topic
from moldau.cli.configs_scram import scram_entries
from moldau.cli.configs_zookeeper import updated
from moldau.cli.errors import CliError
from moldau.security.credentials import ScramCredential, ScramMechanism, new_credential

BS = ["--bootstrap-server", "h:1"]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["configs", *argv])


def test_add_config_groups_values_in_brackets_as_kafka() -> None:
    got = parse_add_config(
        "cleanup.policy=[compact,delete], retention.ms = 10,"
        "SCRAM-SHA-256=[iterations=8192,password=a=b],ssl.endpoint.identification.algorithm=,"
    )
    assert got == {
        "cleanup.policy": "compact,delete",
        "retention.ms": "10",
        "SCRAM-SHA-256": "iterations=8192,password=a=b",
        "ssl.endpoint.identification.algorithm": "",
    }
    for bad in ("a", "a=1=2", "a=1,b"):
        with pytest.raises(CliError, match='must be in the format "key=val"'):
            parse_add_config(bad)


def test_config_keys_and_the_add_config_file(tmp_path: Path) -> None:
    f = tmp_path / "add.properties"
    f.write_text("retention.ms=5\nsegment.ms=7\n")
    args = _parse([*BS, "--alter", "--topic", "t", "--add-config-file", str(f)])
    assert configs_to_add(args) == {"retention.ms": "5", "segment.ms": "7"}
    with pytest.raises(CliError, match="Invalid character found for config key: a b"):
        configs_to_add(_parse([*BS, "--alter", "--topic", "t", "--add-config", "a b=1"]))
    with pytest.raises(CliError, match="--add-config-file: cannot read"):
        configs_to_add(_parse([*BS, "--alter", "--topic", "t", "--add-config-file", "/nope"]))


def test_scram_entries() -> None:
    got = scram_entries(
        parse_add_config("SCRAM-SHA-256=[iterations=8192,password=a=b], SCRAM-SHA-512=[password=x]")
    )
    assert got == [("SCRAM-SHA-256", 8192, "a=b"), ("SCRAM-SHA-512", 4096, "x")]
    assert scram_entries({"SCRAM-SHA-256": "iterations=-1,password=p"}) == [
        ("SCRAM-SHA-256", 4096, "p")
    ]
    with pytest.raises(CliError, match="Invalid credential property SCRAM_SHA_256=iterations=1"):
        scram_entries({"SCRAM-SHA-256": "iterations=1"})
    with pytest.raises(CliError, match="Iterations 100 is less than the minimum 4096 required"):
        scram_entries({"SCRAM-SHA-512": "iterations=100,password=p"})


def test_a_users_entry_as_configs_zookeeper_writes_it() -> None:
    old = new_credential(ScramMechanism.SCRAM_SHA_256, "old", 4096).to_string()
    got = updated({"SCRAM-SHA-256": old}, [("SCRAM-SHA-512", 8192, "pw")], [])
    assert got["SCRAM-SHA-256"] == old
    cred = ScramCredential.from_string(got["SCRAM-SHA-512"])
    assert cred == new_credential(ScramMechanism.SCRAM_SHA_512, "pw", 8192, cred.salt)
    assert updated(got, [], ["SCRAM-SHA-256"]).keys() == {"SCRAM-SHA-512"}
    with pytest.raises(CliError, match=r"Invalid config\(s\): SCRAM-SHA-256"):
        updated({}, [], ["SCRAM-SHA-256"])
    with pytest.raises(CliError, match="less than the minimum 4096"):
        updated({}, [("SCRAM-SHA-512", 100, "pw")], [])


def test_configs_needs_one_place_to_write_to() -> None:
    for argv in ([], ["--bootstrap-server", "h:1", "--zookeeper", "h:2"]):
        with pytest.raises(CliError, match="Exactly one of --bootstrap-server and --zookeeper"):
            run(_parse([*argv, "--describe", "--entity-type", "users"]))


def test_entities_pair_names_with_types_in_kafkas_order() -> None:
    args = _parse([*BS, "--describe", "--entity-type", "users", "--entity-name", "alice",
                   "--entity-type", "clients", "--entity-default"])  # fmt: skip
    assert check_args(args) == Entities(("users", "clients"), ("alice", ""))
    # The shorthands: entity flags first (topic, client, user, broker), then defaults.
    args = _parse([*BS, "--alter", "--user-defaults", "--client", "c2", "--add-config", "a=1"])
    assert check_args(args) == Entities(("clients", "users"), ("c2", ""))
    args = _parse([*BS, "--describe", "--entity-type", "users", "--entity-type", "clients"])
    assert check_args(args).quota_pairs == (("users", None), ("clients", None))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--describe"], "At least one entity type must be specified"),
        (["--describe", "--entity-type", "topics", "--entity-type", "users"],
         "Only 'users' and 'clients' entity types may be specified together"),
        (["--describe", "--entity-type", "users", "--user", "a"],
         "Duplicate entity type(s) specified: users"),
        (["--describe", "--entity-type", "ips"],
         "Invalid entity type ips, the entity type must be one of topics, clients, users, "
         "brokers with a --bootstrap-server argument"),
        (["--describe", "--entity-name", "x", "--topic", "t"],
         "--entity-{type,name,default} should not be used in conjunction with specific "
         "entity flags"),
        (["--describe", "--broker", "one"],
         "The entity name for brokers must be a valid integer broker id, but it is: one"),
        (["--describe", "--entity-type", "topics", "--entity-default"],
         "--entity-default must not be specified with --describe of topics"),
        (["--alter", "--topic", "t"],
         "At least one of --add-config, --add-config-file, or --delete-config must be "
         "specified with --alter"),
        (["--alter", "--entity-type", "topics", "--add-config", "a=1"],
         "An entity name must be specified with --alter of topics"),
        (["--alter", "--entity-type", "users", "--add-config", "a=1"],
         "An entity-name or default entity must be specified with --alter of users"),
        (["--alter", "--topic", "t", "--add-config", "a=1", "--add-config-file", "f"],
         "Only one of --add-config or --add-config-file must be specified"),
        (["--alter", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "a",
          "--add-config", "producer_byte_rate=1"],
         "An entity name must be specified for every entity type"),
        (["--describe", "--topic", "t", "--delete-config", "a"],
         "--add-config, --add-config-file and --delete-config go with --alter"),
    ],
)  # fmt: skip
def test_kafkas_checks_of_the_flags(argv: list[str], message: str) -> None:
    with pytest.raises(CliError) as e:
        check_args(_parse([*BS, *argv]))
    assert str(e.value).startswith(message)


def test_zookeeper_is_for_users_scram_credentials_only() -> None:
    zk = ["--zookeeper", "h:2"]
    with pytest.raises(CliError, match="must be one of users with a --zookeeper argument"):
        check_args(_parse([*zk, "--describe", "--topic", "t"]))
    with pytest.raises(CliError, match="--bootstrap-server must be specified for --all"):
        check_args(_parse([*zk, "--describe", "--user", "u", "--all"]))
    with pytest.raises(CliError, match="only supported for SCRAM credential updates"):
        run(_parse([*zk, "--alter", "--user", "u", "--add-config", "producer_byte_rate=1"]))


def _entities(*argv: str) -> Entities:
    return check_args(_parse([*BS, "--alter", *argv, "--add-config", "a=1"]))


@pytest.mark.parametrize(
    ("entity", "added", "deleted", "message"),
    [
        (["--client", "c"], {"a": "1", "SCRAM-SHA-256": "password=x", "b": "2"}, [],
         "Only quota configs can be added for 'clients' using --bootstrap-server. "
         "Unexpected config names: Set(a, b, SCRAM-SHA-256)"),
        (["--client", "c"], {}, ["foo", "SCRAM-SHA-256"],
         "Only quota configs can be deleted for 'clients' using --bootstrap-server. "
         "Unexpected config names: ArrayBuffer(foo, SCRAM-SHA-256)"),
        (["--user", "u"], {"foo": "5"}, [],
         "Only quota and SCRAM credential configs can be added for 'users' using "
         "--bootstrap-server. Unexpected config names: Set(foo)"),
        (["--user", "u"], {"SCRAM-SHA-256": "password=x", "producer_byte_rate": "5"}, [],
         "Cannot alter both quota and SCRAM credential configs simultaneously for 'users'"),
        (["--user-defaults"], {"SCRAM-SHA-256": "password=x"}, [],
         "The use of --entity-default or --user-defaults is not allowed with User SCRAM"),
    ],
)  # fmt: skip
def test_what_users_and_clients_may_change(
    entity: list[str], added: dict[str, str], deleted: list[str], message: str
) -> None:
    with pytest.raises(CliError) as e:
        user_client_is_quota(_entities(*entity), added, deleted)
    assert str(e.value).startswith(message)
    assert user_client_is_quota(_entities("--user", "u"), {"producer_byte_rate": "1"}, [])
    assert not user_client_is_quota(_entities("--user", "u"), {}, ["SCRAM-SHA-512"])


def test_the_lines_kafka_configs_prints() -> None:
    assert completed(Entities(("topics",), ("t",))) == "Completed updating config for topic t."
    assert completed(Entities(("brokers",), ("",))) == (
        "Completed updating default config for brokers in the cluster."
    )
    assert quota_line((("user", "alice"),), {"producer_byte_rate": 1048576.0}) == (
        "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0"
    )
    entity = (("client-id", "c1"), ("user", None))
    assert quota_line(entity, {"request_percentage": 50, "consumer_byte_rate": 12345678}) == (
        "Quota configs for the default user-principal, client-id 'c1' are "
        "consumer_byte_rate=1.2345678E7, request_percentage=50.0"
    )
    synonyms = [
        SimpleNamespace(name="log.retention.ms", value="5", source=3),
        SimpleNamespace(name="x", value=None, source=5),
    ]
    entry = SimpleNamespace(name="retention.ms", value=None, is_sensitive=True, synonyms=synonyms)
    assert entry_line(entry) == (
        "  retention.ms=null sensitive=true "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=5, DEFAULT_CONFIG:x=null}"
    )


def test_quota_filters() -> None:
    assert filter_components([("users", "alice"), ("clients", ""), ("clients", None)]) == [
        {"entity_type": "user", "match_type": 0, "match": "alice"},
        {"entity_type": "client-id", "match_type": 1, "match": None},
        {"entity_type": "client-id", "match_type": 2, "match": None},
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [(1048576.0, "1048576.0"), (12345678.0, "1.2345678E7"), (10.0, "10.0"), (0.5, "0.5"),
     (0.001, "0.001"), (0.0005, "5.0E-4"), (1e7, "1.0E7"), (9999999.0, "9999999.0"),
     (123.25, "123.25"), (0.0, "0.0")],
)  # fmt: skip
def test_quota_values_print_as_java_doubles(value: float, text: str) -> None:
    assert java_double(value) == text


def test_topic_names_as_kafka_4_validates_them() -> None:
    validate_topic("a.b_c-1")
    for name, why in [
        ("", "the empty string is not allowed"),
        ("..", "'..' is not allowed"),
        ("a b", "'a b' contains one or more characters other than ASCII alphanumerics"),
        ("x" * 250, "is longer than the max allowed length 249"),
    ]:
        with pytest.raises(CliError, match="Topic name is invalid: ") as e:
            validate_topic(name)
        assert why in str(e.value)
