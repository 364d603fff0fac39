from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def topic_name() -> str:
    """A topic name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"
