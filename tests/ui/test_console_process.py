"""`moldau ui` as its own process against a cluster of two brokers: a broker that
dies shows as offline within seconds, and SIGTERM stops the console cleanly."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from moldau.testing.browser import ConsoleProcess, PageProblems
from moldau.testing.local import LocalCluster

pytestmark = pytest.mark.ui


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "cluster", brokers=2) as cluster:
        yield cluster


def test_a_killed_broker_shows_offline_within_seconds(
    browser: Any, two_brokers: LocalCluster, tmp_path: Path
) -> None:
    console = ConsoleProcess(two_brokers.bootstrap, tmp_path / "ui.log")
    problems = PageProblems()
    try:
        console.start()
        page = browser.new_page(base_url=console.url)
        problems.watch(page)
        page.goto("/")
        victim = next(b for b in (1, 2) if b != two_brokers.controller_id())
        badge = page.locator(f"[data-broker='{victim}']")
        expect(badge).to_have_text("online")
        started = time.monotonic()
        two_brokers.kill(victim)
        expect(badge).to_have_text("offline", timeout=10_000)
        noticed_s = time.monotonic() - started
        expect(page.locator(".card", has_text="Brokers online")).to_contain_text("1 / 2")
        page.close()
        assert noticed_s < 10
        assert console.stop() == 0
    finally:
        console.kill()
    assert not problems.unexpected(), problems.unexpected()
