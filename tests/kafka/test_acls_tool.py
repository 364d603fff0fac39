"""`moldau acls` prints what Kafka's own kafka-acls.sh (AclCommand) prints, against
the same broker, and each sees the other's ACLs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from moldau.testing.process import BrokerProcess
from tests.kafka.tools import tool

ACL_COMMAND = "org.apache.kafka.tools.AclCommand"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, kafka_java: Path) -> Iterator[BrokerProcess]:
    """One broker for the module; each test leaves no ACL behind."""
    overrides = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    with BrokerProcess(tmp_path_factory.mktemp("acls") / "data", overrides) as b:
        yield b


def moldau_acls(bootstrap: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "moldau", "acls", "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def kafka_acls(bootstrap: str, *args: str) -> str:
    return tool(ACL_COMMAND, "--bootstrap-server", bootstrap, *args)


def blocks(output: str) -> dict[str, frozenset[str]]:
    """Each heading's entry lines (both tools print a set: the order is free)."""
    found: dict[str, frozenset[str]] = {}
    for block in output.strip("\n").split("\n\n"):
        heading, *lines = block.split("\n")
        found[heading] = frozenset(line.strip() for line in lines)
    return found


@pytest.mark.parametrize(
    "add",
    [
        ["--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write",
         "--topic", "t1"],
        ["--deny-principal", "User:bob", "--deny-host", "10.0.0.1", "--operation", "All",
         "--topic", "pre-", "--resource-pattern-type", "prefixed"],
        ["--allow-principal", "User:carol", "--producer", "--consumer", "--topic", "p",
         "--group", "g", "--transactional-id", "x", "--idempotent"],
    ],
)  # fmt: skip
def test_moldau_acls_adds_lists_and_removes_as_kafka_acls(
    secured: BrokerProcess, add: list[str]
) -> None:
    at = secured.bootstrap
    ours = moldau_acls(at, "--add", *add)
    assert ours.startswith("Adding ACLs for resource `ResourcePattern(resourceType=")
    listed = moldau_acls(at, "--list")
    assert blocks(listed) == blocks(kafka_acls(at, "--list"))
    # Kafka's tool adds the same ACLs again (the broker keeps one of each), printing
    # what ours printed.
    assert blocks(kafka_acls(at, "--add", *add)) == blocks(ours)
    assert blocks(moldau_acls(at, "--list")) == blocks(listed)
    # Removed by Kafka's tool, gone for ours.
    kafka_acls(at, "--remove", "--force", *add)
    assert moldau_acls(at, "--list") == ""


def test_match_lists_every_pattern_covering_a_name(secured: BrokerProcess) -> None:
    at = secured.bootstrap
    moldau_acls(at, "--add", "--allow-principal", "User:a", "--operation", "Read",
                "--topic", "pay-", "--resource-pattern-type", "prefixed")  # fmt: skip
    moldau_acls(at, "--add", "--allow-principal", "User:a", "--operation", "Write",
                "--topic", "*")  # fmt: skip
    moldau_acls(at, "--add", "--allow-principal", "User:a", "--operation", "Read",
                "--topic", "other")  # fmt: skip
    args = ("--list", "--topic", "pay-in", "--resource-pattern-type", "match")
    ours = moldau_acls(at, *args)
    assert blocks(ours) == blocks(kafka_acls(at, *args))
    assert len(blocks(ours)) == 2  # the prefix and the wildcard, not "other"
    moldau_acls(at, "--remove", "--force", "--topic", "*", "--topic", "other", "--topic",
                "pay-", "--resource-pattern-type", "any")  # fmt: skip
    assert moldau_acls(at, "--list") == ""
