"""`moldau configs --add-config`: kafka-configs' bracketed SCRAM entries; the
entries `--zookeeper` writes."""

from __future__ import annotations

import argparse

import pytest

from moldau.cli.configs import add_parser, parse_add_config, run
from moldau.cli.configs_zookeeper import updated
from moldau.cli.errors import CliError
from moldau.security.credentials import ScramCredential, ScramMechanism, new_credential


def test_scram_entries() -> None:
    got = parse_add_config(
        "SCRAM-SHA-256=[iterations=8192,password=a=b], SCRAM-SHA-512=[password=x]"
    )
    assert [(m.name, i, p) for m, i, p in got] == [
        ("SCRAM_SHA_256", 8192, "a=b"),
        ("SCRAM_SHA_512", 4096, "x"),
    ]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("producer_byte_rate=1024", "not supported here"),
        ("SCRAM-SHA-256=[iterations=8192]", "give password="),
        ("SCRAM-SHA-256=[password=a,salt=b]", "give password="),
        ("SCRAM-SHA-256=[iterations=many,password=a]", "iterations must be a number"),
        ("SCRAM-SHA-256=[password=a", "cannot parse"),
    ],
)
def test_mistakes_are_one_line(text: str, why: str) -> None:
    with pytest.raises(CliError, match=why):
        parse_add_config(text)


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
            run(_parse(["configs", *argv, "--describe", "--entity-type", "users"]))


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(argv)
