"""`moldau configs --add-config`: kafka-configs' bracketed SCRAM entries."""

from __future__ import annotations

import pytest

from moldau.cli.configs import parse_add_config
from moldau.cli.errors import CliError


def test_scram_entries() -> None:
    got = parse_add_config(
        "SCRAM-SHA-256=[iterations=8192,password=a=b], SCRAM-SHA-512=[password=x]"
    )
    assert [(m.name, i, p) for m, i, p in got] == [
        ("SCRAM_SHA_256", 8192, "a=b"),
        ("SCRAM_SHA_512", 4096, "x"),
    ]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("producer_byte_rate=1024", "not supported here"),
        ("SCRAM-SHA-256=[iterations=8192]", "give password="),
        ("SCRAM-SHA-256=[password=a,salt=b]", "give password="),
        ("SCRAM-SHA-256=[iterations=many,password=a]", "iterations must be a number"),
        ("SCRAM-SHA-256=[password=a", "cannot parse"),
    ],
)
def test_mistakes_are_one_line(text: str, why: str) -> None:
    with pytest.raises(CliError, match=why):
        parse_add_config(text)
