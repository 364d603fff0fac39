from __future__ import annotations

import uuid

import pytest
from hypothesis import settings

from tests.integration.tmpfs import tmpfs  # noqa: F401 (a fixture)

# Timing is a benchmark's business, not a test's: a property test on a loaded CI
# machine must not fail because one example ran slowly.
settings.register_profile("moldau", deadline=None, print_blob=True)
settings.load_profile("moldau")


@pytest.fixture
def topic_name() -> str:
    """A topic name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"
