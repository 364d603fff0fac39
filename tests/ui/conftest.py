"""The console's fixtures: one broker process serving the console (`moldau serve
--ui-port 0`) and one headless Chromium for a module; a fresh `page` a test, which
fails the test on any console error, uncaught exception or failed request the
test did not expect (`problems.expect(text)`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from moldau.testing.browser import PageProblems, chromium
from moldau.testing.process import BrokerProcess, wait_for

pytestmark = pytest.mark.ui


@pytest.fixture(scope="module")
def ui_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Two brokers in one process (`--brokers 2`) with the console beside them, and
    their metrics endpoints on; `bootstrap` is broker 1's."""
    data = tmp_path_factory.mktemp("ui") / "data"
    b = BrokerProcess(
        data,
        {"group.initial.rebalance.delay.ms": "0"},
        serve_args=["--brokers", "2", "--ui-port", "0", "--metrics-port", "0"],
    )
    with serving_console(b):
        yield b


@contextmanager
def serving_console(b: BrokerProcess) -> Iterator[BrokerProcess]:
    """`b` (made with `--ui-port`) started and its console up; killed on exit."""
    try:
        b.start()
        assert wait_for(lambda: b.console_url, timeout=10), "the console did not start"
        yield b
        # SIGTERM stops the console with the broker, cleanly.
        assert b.stop() == 0
    finally:
        b.kill()


@pytest.fixture(scope="module")
def console(ui_broker: BrokerProcess) -> str:
    """The console's base URL (ends with /)."""
    assert ui_broker.console_url is not None
    return ui_broker.console_url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture
def problems() -> PageProblems:
    return PageProblems()


@pytest.fixture
def page(browser: Any, console: str, problems: PageProblems) -> Iterator[Any]:
    context = browser.new_context(base_url=console, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    p = context.new_page()
    problems.watch(p)
    try:
        yield p
    finally:
        context.close()
    unexpected = problems.unexpected()
    assert not unexpected, "the page had problems:\n" + "\n".join(unexpected)
