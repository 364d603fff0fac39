"""Runs the checks of a tests/java class that this pytest session selected in one JVM
per broker set, and hands each test its own check's result: a JVM and Kafka's client
take a second or two to start, which one JVM a check would pay dozens of times."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from typing import TypeVar

import pytest

from moldau.testing import kafka_java

_LINE = re.compile(r"^(PASS|FAIL) (\w+)")

Test = TypeVar("Test", bound=Callable[..., None])


class CheckSuite:
    """The checks of one class (moldau.it.Checks), run once for each bootstrap; a
    test parametrized with `check`, or one that `runs` names, asks for its own."""

    def __init__(
        self, main_class: str, names: list[str] | None = None, timeout: float = 240
    ) -> None:
        self.main_class = main_class
        self.names = list(names or [])  # in the order the JVM runs them
        self.timeout = timeout
        self._runs: dict[str, tuple[dict[str, str], subprocess.CompletedProcess[str]]] = {}
        self._by_test: dict[str, str] = {}

    def runs(self, name: str) -> Callable[[Test], Test]:
        """Marks a test (of a name of its own, not parametrized with `check`) as the one
        that asks for check `name`, so that the first test to ask runs it with the rest."""

        def mark(test: Test) -> Test:
            self._by_test[test.__name__] = name
            if name not in self.names:
                self.names.append(name)
            return test

        return mark

    def check(self, request: pytest.FixtureRequest, bootstrap: str, name: str = "") -> None:
        """Fails the calling test unless check `name` (by default the one `runs` gave
        the test) passed on these brokers."""
        name = name or self._by_test[request.function.__name__]
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
            if getattr(item, "module", None) is not request.module:
                continue
            if callspec is not None and "check" in callspec.params:
                chosen.add(callspec.params["check"])
            else:
                chosen.add(self._by_test.get(getattr(item, "originalname", "")))
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
