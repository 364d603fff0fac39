from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import settings

from moldau.testing import kafka_java as kafka_java_module
from tests.integration.tmpfs import tmpfs  # noqa: F401 (a fixture)

# Timing is a benchmark's business, not a test's: a property test on a loaded CI
# machine must not fail because one example ran slowly.
settings.register_profile("moldau", deadline=None, print_blob=True)
settings.load_profile("moldau")


@pytest.fixture
def topic_name() -> str:
    """A topic name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def kafka_java() -> Path:
    """tests/java built: Kafka's client, tools, Streams and broker jars in target/lib."""
    return kafka_java_module.ensure_built()
