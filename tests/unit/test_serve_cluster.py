"""`moldau serve --brokers N`: each broker's listeners, advertised listeners and
metrics port (cluster_properties), and the port clashes it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from moldau.cli.errors import CliError
from moldau.cli.serve import cluster_properties


def props(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"log.dirs": str(tmp_path / "data"), **extra}


def test_each_listener_takes_its_port_plus_the_broker_index(tmp_path: Path) -> None:
    brokers = cluster_properties(props(tmp_path, listeners="PLAINTEXT://:9092,SASL_SSL://:9192"), 3)
    assert [b["listeners"] for b in brokers] == [
        "PLAINTEXT://:9092,SASL_SSL://:9192",
        "PLAINTEXT://:9093,SASL_SSL://:9193",
        "PLAINTEXT://:9094,SASL_SSL://:9194",
    ]
    assert [b["broker.id"] for b in brokers] == ["1", "2", "3"]
    assert [Path(b["log.dirs"]).name for b in brokers] == ["broker-1", "broker-2", "broker-3"]


def test_port_0_stays_ephemeral_on_every_broker(tmp_path: Path) -> None:
    brokers = cluster_properties(
        props(tmp_path, listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:9300"), 2
    )
    assert [b["listeners"] for b in brokers] == [
        "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:9300",
        "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:9301",
    ]


def test_advertised_listeners_follow_their_listeners(tmp_path: Path) -> None:
    brokers = cluster_properties(
        props(
            tmp_path,
            listeners="INTERNAL://:9092,EXTERNAL://:9192",
            **{"advertised.listeners": "INTERNAL://kafka:9092,EXTERNAL://public.example:19192"},
        ),
        2,
    )
    assert [b["advertised.listeners"] for b in brokers] == [
        "INTERNAL://kafka:9092,EXTERNAL://public.example:19192",
        "INTERNAL://kafka:9093,EXTERNAL://public.example:19193",
    ]


def test_metrics_port_follows_too(tmp_path: Path) -> None:
    brokers = cluster_properties(
        props(tmp_path, listeners="PLAINTEXT://:9092", **{"metrics.port": "9500"}), 3
    )
    assert [b["metrics.port"] for b in brokers] == ["9500", "9501", "9502"]


@pytest.mark.parametrize(
    ("listeners", "metrics", "clash"),
    [
        ("PLAINTEXT://:9092,SASL_SSL://:9093", None, "listener PLAINTEXT takes ports 9092..9094"),
        ("PLAINTEXT://:9094,SASL_SSL://:9092", None, "listener SASL_SSL 9092..9094"),
        ("PLAINTEXT://127.0.0.1:9092,SSL://0.0.0.0:9094", None, "listener SSL 9094..9096"),
        ("PLAINTEXT://:9092", "9093", "metrics.port 9093..9095"),
    ],
)
def test_overlapping_port_ranges_are_refused_naming_the_clash(
    tmp_path: Path, listeners: str, metrics: str | None, clash: str
) -> None:
    extra = {"listeners": listeners} | ({"metrics.port": metrics} if metrics else {})
    with pytest.raises(CliError) as e:
        cluster_properties(props(tmp_path, **extra), 3)
    assert clash in str(e.value) and "overlap" in str(e.value)


def test_the_same_ports_on_two_addresses_do_not_clash(tmp_path: Path) -> None:
    brokers = cluster_properties(
        props(tmp_path, listeners="INSIDE://10.0.0.5:9092,OUTSIDE://192.0.2.7:9092"), 3
    )
    assert brokers[2]["listeners"] == "INSIDE://10.0.0.5:9094,OUTSIDE://192.0.2.7:9094"


def test_a_range_past_65535_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CliError, match=r"listener SSL: ports 65534\.\.65536 are not all valid"):
        cluster_properties(props(tmp_path, listeners="PLAINTEXT://:9092,SSL://:65534"), 3)
