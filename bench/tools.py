"""`moldau dump-log` and `moldau perf` against Kafka 4.1.1's kafka-dump-log and
kafka-producer-perf-test, in one run on one broker: wall time and peak memory
(max RSS of the process) of each tool.

dump-log: one segment of --megabytes of 1 KiB records (gzip batches and plain ones,
half each), dumped by each tool shallow (one line a batch), with --deep-iteration
and with --print-data-log, output to /dev/null. The memory column is what matters
most: both stream a segment a batch at a time.

perf: --records records of 100 B, unthrottled, acks=1, by each tool, to its own
one-partition topic on the same broker; their own final lines' records/s.

Each is run --rounds times and the best counts (on a shared machine other work only
adds time); memory is the largest of the rounds.

    .venv/bin/python bench/tools.py [--megabytes 300] [--records 500000] [--rounds 3]
        [--record]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from moldau.testing import kafka_java
from moldau.testing.process import BrokerProcess, wait_for

_ROOT = Path(__file__).resolve().parents[1]
_MOLDAU = [sys.executable, "-m", "moldau.cli.main"]
_KAFKA = [str(kafka_java.KAFKA_RUN_CLASS)]


def timed(cmd: list[str], keep: bool = False) -> tuple[float, float, str]:
    """Wall seconds, max RSS in MB (GNU time's), and the stdout of the command if
    `keep` (else it goes to /dev/null)."""
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(_ROOT / "src")}
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", "--", *cmd],
        stdout=subprocess.PIPE if keep else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        check=True,
        timeout=1800,
    )
    wall = time.monotonic() - start
    return wall, int(done.stderr.strip().splitlines()[-1]) / 1024, done.stdout or ""


def fill(bootstrap: str, topic: str, megabytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"segment.bytes": str(1 << 30), "compression.type": "producer"}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
    half = megabytes * 1024 // 2
    for codec in ("none", "gzip"):
        subprocess.run(
            [*_MOLDAU, "perf", "produce", "--topic", topic, "--num-records", str(half),
             "--record-size", "1024", "--throughput", "-1", "--bootstrap-server", bootstrap,
             "--producer-props", f"compression.type={codec}", "linger.ms=20"],
            check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(_ROOT / "src")},
        )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=300)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each; the best counts")
    parser.add_argument("--record", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()
    kafka_java.ensure_built()
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp) / "data") as broker:
        fill(broker.bootstrap, "dump", args.megabytes)
        segment = broker.data_dir / "dump-0" / "00000000000000000000.log"
        sizes = [-1]

        def settled() -> bool:  # the broker writes after it answers
            sizes.append(segment.stat().st_size)
            return sizes[-1] == sizes[-2]

        assert wait_for(settled, timeout=60, interval=1.0)
        size_mb = segment.stat().st_size / 1e6
        modes = {"shallow": [], "deep": ["--deep-iteration"], "print": ["--print-data-log"]}
        results: dict[tuple[str, str], tuple[float, float]] = {}
        for name, tool in (("moldau", [*_MOLDAU, "dump-log"]), ("kafka", [*_KAFKA,
                           "kafka.tools.DumpLogSegments"])):  # fmt: skip
            for mode, flags in modes.items():
                # The best of --rounds: other work on a shared machine only adds time.
                runs = [timed([*tool, "--files", str(segment), *flags]) for _ in range(args.rounds)]
                wall, rss = min(r[0] for r in runs), max(r[1] for r in runs)
                results[(name, mode)] = (wall, rss)
                print(name, mode, f"{wall:.1f} s, {rss:.0f} MB", flush=True)
        perf: dict[str, str] = {}
        for name, cmd in (
            ("moldau", [*_MOLDAU, "perf", "produce", "--bootstrap-server", broker.bootstrap]),
            ("kafka", [*_KAFKA, "org.apache.kafka.tools.ProducerPerformance",
                       "--producer-props", f"bootstrap.servers={broker.bootstrap}"]),
        ):  # fmt: skip
            topic = f"perf-{name}"
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept until done
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            run = [*cmd, "--topic", topic, "--num-records", str(args.records),
                   "--record-size", "100", "--throughput", "-1"]  # fmt: skip
            outs = [timed(run, keep=True)[2] for _ in range(args.rounds)]
            perf[name] = str(max(float(re.findall(r"([\d.]+) records/sec", o)[-1]) for o in outs))
    rows.append(
        f"Segment: {size_mb:.0f} MB on disk, {args.megabytes} MB of 1 KiB records "
        "(random letters), half of them in gzip batches.\n"
    )
    rows.append(f"Best of {args.rounds} runs each.\n")
    rows.append(
        "| mode | moldau s | kafka s | moldau/kafka time | moldau max RSS MB | kafka max RSS MB |"
    )
    rows.append("|---|---|---|---|---|---|")
    for mode in modes:
        (mw, mr), (kw, kr) = results[("moldau", mode)], results[("kafka", mode)]
        rows.append(f"| {mode} | {mw:.1f} | {kw:.1f} | {mw / kw:.2f}x | {mr:.0f} | {kr:.0f} |")
    rows.append(
        f"\nperf produce, {args.records:,} records of 100 B, unthrottled, best of "
        f"{args.rounds}: moldau "
        f"{float(perf['moldau']):,.0f} rec/s, kafka {float(perf['kafka']):,.0f} rec/s "
        f"({float(perf['moldau']) / float(perf['kafka']):.2f}x)"
    )
    title = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = (
        f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} cores"
    )
    text = f"## {title}: moldau dump-log and perf against Kafka's tools (bench/tools.py)\n\n"
    text += f"Machine: {machine}, Python {platform.python_version()}.\n\n" + "\n".join(rows) + "\n"
    print(text)
    if args.record:
        with open(_ROOT / "bench" / "RESULTS.md", "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
