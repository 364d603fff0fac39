"""The demo pipeline: stopped mid-run and started again from its checkpoint, it
counts every order exactly once; and `moldau pipeline demo` as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from moldau.spark import pipeline
from tests.integration.clients import create_topic

pytestmark = pytest.mark.spark


def test_stopping_mid_run_and_restarting_changes_nothing(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    orders_topic, totals_topic = f"{topic_name}-orders", f"{topic_name}-totals"
    create_topic(bootstrap, orders_topic, partitions=3)
    create_topic(bootstrap, totals_topic, partitions=1, **{"cleanup.policy": "compact"})
    orders = pipeline.make_orders(4000, seed=11)
    pipeline.send_orders(bootstrap, orders_topic, orders)
    expected = pipeline.expected_totals(orders)
    parquet, checkpoint = str(tmp_path / "totals.parquet"), str(tmp_path / "checkpoint")

    def run(stop_after_batches: int | None) -> list[str]:
        lines: list[str] = []
        sink = pipeline.TotalsWriter(bootstrap, totals_topic, parquet)
        query = pipeline.start_job(
            spark, bootstrap, orders_topic, checkpoint, max_per_trigger=500, sink=sink
        )
        pipeline.watch(query, sink, lines.append, stop_after_batches=stop_after_batches)
        return lines

    first = run(stop_after_batches=3)
    assert 3 <= len(first) < 8, first  # stopped part way through the 8 batches
    partial = pipeline.totals_from_topic(spark, bootstrap, totals_topic)
    assert pipeline.differences(expected, partial), "the first run should not have finished"

    second = run(stop_after_batches=None)
    assert second, "the restarted job read nothing"
    assert (
        pipeline.differences(expected, pipeline.totals_from_topic(spark, bootstrap, totals_topic))
        == []
    )
    assert pipeline.differences(expected, pipeline.totals_from_parquet(spark, parquet)) == []


def test_moldau_pipeline_demo_checks_its_own_result(tmp_path: Path) -> None:
    """The command a user runs: its own broker, its own Spark, one line of verdict."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "moldau",
            "pipeline",
            "demo",
            "--events",
            "3000",
            "--work-dir",
            str(tmp_path),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("batch 0: ") for line in lines), done.stdout
    assert lines[-1].startswith("match: "), done.stdout
    assert "3,000 orders" in lines[-1]
