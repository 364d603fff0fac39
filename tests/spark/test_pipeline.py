"""`moldau pipeline demo` as a user runs it: stopped mid-run and started again from
its checkpoint (in a new process, a new Spark), it counts every order exactly once,
its totals in the topic and in Parquet equal plain Python's."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from moldau.testing.jvm import spark_submit_env

pytestmark = pytest.mark.spark


def demo(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """`moldau pipeline demo ARGS`, its temporary directories under `tmp`."""
    return subprocess.run(
        [sys.executable, "-m", "moldau", "pipeline", "demo", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **spark_submit_env(), "TMPDIR": str(tmp)},
    )


def librdkafka_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return re.findall(r"^%\d\|.*$", done.stdout + done.stderr, re.M)


def test_the_demo_stopped_part_way_resumes_from_its_work_dir_then_cleans_up(
    tmp_path: Path,
) -> None:
    """As a user runs it: its own broker and Spark, stopped after two batches; the
    same command with the work dir it names goes on from the checkpoint, ends
    with matching totals and removes what it made."""
    first = demo("--events", "3000", "--stop-after-batches", "2", tmp=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    lines = first.stdout.splitlines()
    reported = [int(line.split(":")[0][6:]) for line in lines if line.startswith("batch ")]
    # Two batches, and a third if it ended while the query stopped (it is then
    # reported: it is in the checkpoint).
    assert reported in ([0, 1], [0, 1, 2]), first.stdout
    stopped = "stopped after 2 batches, as asked; resume with: moldau pipeline demo --work-dir "
    assert lines[-1].startswith(stopped), first.stdout
    work = Path(lines[-1].removeprefix(stopped))
    assert work.parent == tmp_path and (work / "checkpoint").is_dir()

    other = demo("--work-dir", str(work), "--events", "5000", tmp=tmp_path)
    assert other.returncode == 1
    assert other.stderr.splitlines() == [
        f"moldau pipeline: the run in {work} is of 3,000 orders: resume it without --events, "
        "or use another --work-dir"
    ]

    second = demo("--work-dir", str(work), tmp=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    lines = second.stdout.splitlines()
    assert any(line.startswith(f"resuming the run in {work}: 3,000 orders") for line in lines)
    batches = [line for line in lines if line.startswith("batch ")]
    # It goes on from the batch after the last one reported: none lost, none repeated.
    assert batches and batches[0].startswith(f"batch {reported[-1] + 1}: "), second.stdout
    this_run = re.search(r"\(([\d,]+) this run\)", batches[-1])
    assert this_run, batches[-1]
    read_now = int(this_run[1].replace(",", ""))
    assert 0 < read_now < 3000  # it went on from the checkpoint, not from the start
    assert any(line.startswith("match: ") and "3,000 orders" in line for line in lines)
    assert lines[-1].startswith("removed topics orders-"), second.stdout
    assert not work.exists()
    assert librdkafka_lines(first) == librdkafka_lines(second) == []


def test_an_unreachable_broker_is_one_line_and_leaves_nothing_behind(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = demo("--bootstrap-server", f"127.0.0.1:{port}", "--events", "10", tmp=tmp_path)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(f"moldau pipeline: cannot reach broker at 127.0.0.1:{port}"), line
    assert librdkafka_lines(done) == []
    assert list(tmp_path.iterdir()) == []  # its temporary work dir is gone


def test_a_run_that_ends_removes_its_topics_and_group(bootstrap: str, tmp_path: Path) -> None:
    """What a finished run on a broker it was given takes away (its own broker's
    data goes with its work dir)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from moldau.cli.pipeline import DemoRun, _create_topics, _remove_from_broker

    run = DemoRun.new(10, bootstrap, made_work_dir=True)
    _create_topics(bootstrap, run, {})
    sink_group = f"moldau-spark-q1-{run.totals_topic}-0"  # the exactly-once sink's
    for group in (run.group, sink_group):
        committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        committer.commit(offsets=[TopicPartition(run.orders_topic, 0, 1)], asynchronous=False)
        committer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    groups = lambda: {g.group_id for g in admin.list_consumer_groups().result(10).valid}  # noqa: E731
    assert {run.group, sink_group} <= groups()

    _remove_from_broker(bootstrap, run, {})
    topics = admin.list_topics(timeout=10).topics
    assert not {run.orders_topic, run.totals_topic, run.writes_topic} & set(topics)
    assert not {run.group, sink_group} & groups()
