"""`moldau serve`'s flags over a config file: each changes only what it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from moldau.cli.main import build_parser
from moldau.cli.serve import broker_properties


def listeners(tmp_path: Path, config: str | None, *flags: str) -> str:
    argv = ["serve", *flags]
    if config is not None:
        path = tmp_path / "server.properties"
        path.write_text(config)
        argv += ["--config", str(path)]
    return broker_properties(build_parser().parse_args(argv))["listeners"]


@pytest.mark.parametrize(
    ("config", "flags", "expected"),
    [
        (None, (), "PLAINTEXT://localhost:9092"),
        (None, ("--port", "9093"), "PLAINTEXT://localhost:9093"),
        ("listeners=PLAINTEXT://0.0.0.0:9092\n", ("--port", "19092"), "PLAINTEXT://0.0.0.0:19092"),
        ("listeners=PLAINTEXT://:9092\n", ("--port", "19092"), "PLAINTEXT://:19092"),
        (
            "listeners=PLAINTEXT://10.0.0.5:9094\n",
            ("--host", "127.0.0.1"),
            "PLAINTEXT://127.0.0.1:9094",
        ),
        ("listeners=PLAINTEXT://10.0.0.5:9094\n", (), "PLAINTEXT://10.0.0.5:9094"),
        # The other listeners stay as configured: a flag changes the first one only.
        (
            "listeners=PLAINTEXT://:9092,SSL://:9093,SASL_SSL://:9094\n",
            ("--port", "19092"),
            "PLAINTEXT://:19092,SSL://:9093,SASL_SSL://:9094",
        ),
    ],
)
def test_a_flag_keeps_the_rest_of_the_configured_listener(
    tmp_path: Path, config: str | None, flags: tuple[str, ...], expected: str
) -> None:
    assert listeners(tmp_path, config, *flags) == expected
