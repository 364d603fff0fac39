"""The layers of DESIGN.md hold: dependencies point one way (server -> replication,
coordinator, controller -> storage, metadata, protocol), and protocol/, storage/ and security/
stay free of the event loop and of sockets (sans-IO: they are driven by whoever
calls them, and testable without a loop). Read from the source's import
statements, so a new import across a layer fails here, not in review."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import moldau

ROOT = Path(moldau.__file__).parent

# package -> the moldau packages it may import
ALLOWED: dict[str, set[str]] = {
    "clock": set(),
    "protocol": set(),
    "storage": {"protocol", "clock"},
    "metadata": {"storage", "protocol", "clock"},
    "quota": {"metadata", "clock"},
}
BELOW_SERVER = (
    "replication",
    "coordinator",
    "controller",
    "storage",
    "metadata",
    "protocol",
    "quota",
)
NO_EVENT_LOOP = ("protocol", "storage", "security", "quota")
LOOP_AND_SOCKETS = {"asyncio", "socket", "selectors", "ssl"}


def imports() -> dict[str, set[tuple[str, str]]]:
    """package -> (module file, imported name) of every import in it."""
    found: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        package = parts[0] if len(parts) > 1 else path.stem
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                found[package].add((str(path.relative_to(ROOT)), name))
    return found


FOUND = imports()


def moldau_packages(package: str) -> set[tuple[str, str]]:
    return {
        (where, name.split(".")[1])
        for where, name in FOUND[package]
        if name.startswith("moldau.") and name.split(".")[1] != package
    }


def test_the_lowest_layers_import_only_what_is_below_them() -> None:
    crossing = {
        package: sorted((w, dep) for w, dep in moldau_packages(package) if dep not in allowed)
        for package, allowed in ALLOWED.items()
    }
    assert {p: c for p, c in crossing.items() if c} == {}


def test_nothing_below_the_server_imports_it() -> None:
    upward = {
        package: sorted((w, dep) for w, dep in moldau_packages(package)
                        if dep in ("server", "cli", "testing", "spark"))
        for package in BELOW_SERVER
    }  # fmt: skip
    assert {p: u for p, u in upward.items() if u} == {}


def test_protocol_and_storage_are_sans_io() -> None:
    loops = {
        package: sorted((w, n) for w, n in FOUND[package] if n.split(".")[0] in LOOP_AND_SOCKETS)
        for package in NO_EVENT_LOOP
    }
    assert {p: found for p, found in loops.items() if found} == {}


def test_the_rules_see_every_package() -> None:
    """The rules above name real packages and the scan reads them (a rename would
    otherwise make them pass vacuously)."""
    for package in (*ALLOWED, *BELOW_SERVER):
        assert FOUND[package], package
    assert ("protocol/records.py", "crc32c") in FOUND["protocol"]


def test_only_the_command_line_imports_the_console() -> None:
    """moldau.ui is a client of the cluster: the broker never imports it (serve's
    wiring in cli/ starts it), and it reaches brokers only through the protocol and
    the tools' helpers, never the broker's internals."""
    importers = {
        package: sorted(w for w, dep in moldau_packages(package) if dep == "ui")
        for package in FOUND
        if package not in ("ui", "cli", "testing")
    }
    assert {p: i for p, i in importers.items() if i} == {}
    inward = sorted((w, dep) for w, dep in moldau_packages("ui") if dep not in ("cli", "protocol"))
    assert inward == []
    assert FOUND["ui"], "the scan reads moldau/ui"
