"""Which way a task reads (moldau.spark.read_path), with both paths replaced by
stand-ins: what the fetching path cannot read goes to the client path from where it
stopped, said once (no sockets; tests/spark/test_fetch_path.py reads a broker)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from moldau.spark import read_path
from moldau.spark.fetch_reader import NeedsClientPath
from moldau.spark.offsets import OffsetRange


def test_what_the_fetching_path_cannot_read_goes_on_through_the_client_path(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    asked: list[tuple[str, OffsetRange]] = []

    def fetching(config: Any, r: OffsetRange, **_: Any) -> Iterator[str]:
        asked.append(("fetch", r))
        yield "offsets 0-4"
        raise NeedsClientPath(5, "message format v1")

    def client(config: Any, r: OffsetRange, **_: Any) -> Iterator[str]:
        asked.append(("client", r))
        yield f"offsets {r.start}-{r.end - 1}"

    monkeypatch.setattr(read_path, "read_range_fetching", fetching)
    monkeypatch.setattr(read_path.reader, "read_range", client)
    monkeypatch.setattr(read_path, "_said", set())
    r = OffsetRange("t", 0, 0, 10)
    with caplog.at_level(logging.WARNING, logger="moldau.spark.read_path"):
        for partition in (0, 0, 1):
            got = list(
                read_path.read_range(
                    {"bootstrap.servers": "h:1"},
                    OffsetRange("t", partition, 0, 10),
                    fetch_path="fetch",
                    include_headers=False,
                    fail_on_data_loss=True,
                    poll_timeout_ms=1000,
                )
            )
            assert got == ["offsets 0-4", "offsets 5-9"]
    assert asked[:2] == [("fetch", r), ("client", OffsetRange("t", 0, 5, 10))]
    # Once for each partition, naming it and where the client path took over.
    assert caplog.messages == [
        f"reading t-{p} through confluent-kafka (the client path) from offset 5: the fetching "
        "path does not read message format v1"
        for p in (0, 1)
    ]


def test_fetch_path_client_never_fetches(monkeypatch: pytest.MonkeyPatch) -> None:
    def fetching(config: Any, r: OffsetRange, **_: Any) -> Iterator[str]:
        raise AssertionError("fetched")

    monkeypatch.setattr(read_path, "read_range_fetching", fetching)
    monkeypatch.setattr(read_path.reader, "read_range", lambda config, r, **_: iter(["client"]))
    got = read_path.read_range(
        {"bootstrap.servers": "h:1"},
        OffsetRange("t", 0, 0, 1),
        fetch_path="client",
        include_headers=False,
        fail_on_data_loss=True,
        poll_timeout_ms=1000,
    )
    assert list(got) == ["client"]
