"""Runs the checks of a tests/java class that this pytest session selected in one JVM
per broker set, and hands each test its own check's result: a JVM and Kafka's client
take a second or two to start, which one JVM a check would pay dozens of times."""

from __future__ import annotations

import re
import subprocess

import pytest

from moldau.testing import kafka_java

_LINE = re.compile(r"^(PASS|FAIL) (\w+)")


class CheckSuite:
    """The checks of one class (moldau.it.Checks), run once for each bootstrap; a
    test parametrized with `check` asks for its own."""

    def __init__(self, main_class: str, names: list[str], timeout: float = 240) -> None:
        self.main_class = main_class
        self.names = names
        self.timeout = timeout
        self._runs: dict[str, tuple[dict[str, str], subprocess.CompletedProcess[str]]] = {}

    def check(self, request: pytest.FixtureRequest, bootstrap: str, name: str) -> None:
        """Fails the calling test unless check `name` passed on these brokers."""
        if bootstrap not in self._runs:
            self._runs[bootstrap] = self._run(bootstrap, self._selected(request) or [name])
        outcomes, done = self._runs[bootstrap]
        line = outcomes.get(name)
        if line is None or not line.startswith("PASS"):
            pytest.fail(
                f"{self.main_class} {name}: {line or 'no result (the JVM ended before it)'}\n"
                f"{done.stdout}\n{done.stderr[-8000:]}"
            )

    def _selected(self, request: pytest.FixtureRequest) -> list[str]:
        """The checks of this module that the session will run (all, or those -k kept)."""
        chosen = set()
        for item in request.session.items:
            callspec = getattr(item, "callspec", None)
            if callspec is not None and getattr(item, "module", None) is request.module:
                chosen.add(callspec.params.get("check"))
        return [n for n in self.names if n in chosen]

    def _run(
        self, bootstrap: str, names: list[str]
    ) -> tuple[dict[str, str], subprocess.CompletedProcess[str]]:
        done = kafka_java.run(self.main_class, bootstrap, *names, timeout=self.timeout)
        outcomes: dict[str, str] = {}
        for line in done.stdout.splitlines():
            m = _LINE.match(line)
            if m:
                outcomes[m.group(2)] = line
        return outcomes, done
