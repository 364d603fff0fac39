"""Each of the console's pages in a real browser against a real broker."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from moldau.testing.process import BrokerProcess

pytestmark = pytest.mark.ui


def test_cluster_page_shows_the_broker_and_live_charts(page: Any, ui_broker: BrokerProcess) -> None:
    page.goto("/")
    brokers = page.locator("#brokers")
    expect(brokers).to_contain_text(f"127.0.0.1:{ui_broker.port}")
    expect(page.locator("[data-broker='1']")).to_have_text("online")
    expect(page.locator(".chart svg path").first).to_be_attached()
    expect(page.locator("nav a.active")).to_have_text("Cluster")
