"""What fetch sessions (KIP-227) save an idle cluster: three Moldau broker processes
on one ZooKeeper, one topic of many partitions with replication factor 3, nothing
produced. Followers fetch all the time; with sessions their Fetches name only what
changed. Side by side: the same cluster with `max.incremental.fetch.session.cache.slots=0`
(no sessions: every Fetch names every partition, as before sessions).

    .venv/bin/python bench/fetch_sessions.py [--partitions 1000] [--seconds 10]

Reports, for the idle phase, the brokers' CPU seconds per second (all three) and the
bytes they sent and received on their TCP sockets per second (tcp_info's counters,
through `ss`), which is mostly the followers' Fetches and their answers.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from moldau.testing.cluster import Cluster
from throughput import machine


def create(bootstrap: str, topic: str, partitions: int) -> float:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    begin = time.monotonic()
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(120)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=30).topics[topic]
        if len(md.partitions) == partitions and all(
            p.leader >= 0 and len(p.isrs) == 3 for p in md.partitions.values()
        ):
            return time.monotonic() - begin
        time.sleep(0.5)
    raise SystemExit(f"{topic}: not all replicas in sync")


def usage(pids: list[int]) -> tuple[float, int]:
    """CPU seconds so far and bytes sent + received on open TCP sockets, over the
    processes."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu += (int(fields[11]) + int(fields[12])) / ticks
    ss = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True)
    lines = ss.stdout.splitlines()
    moved = 0
    for head, info in zip(lines[::2], lines[1::2], strict=False):
        owner = re.search(r"pid=(\d+)", head)
        if owner and int(owner.group(1)) in pids:
            for counter in re.findall(r"bytes_(?:sent|received):(\d+)", info):
                moved += int(counter)
    return cpu, moved


def idle_cost(slots: int, partitions: int, seconds: float) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as d:
        overrides = {"max.incremental.fetch.session.cache.slots": str(slots)}
        with Cluster(Path(d), brokers=3, overrides=overrides) as cluster:
            created = create(cluster.bootstrap, "idle", partitions)
            time.sleep(3)  # followers settle at the log end
            pids = [b.pid for b in cluster.brokers.values()]
            cpu0, io0 = usage(pids)
            time.sleep(seconds)
            cpu1, io1 = usage(pids)
            return (cpu1 - cpu0) / seconds, (io1 - io0) / seconds, created


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with_sessions = idle_cost(1000, args.partitions, args.seconds)
    without = idle_cost(0, args.partitions, args.seconds)
    print(f"Machine: {machine()}; 3 brokers and ZooKeeper share it.\n")
    print(f"Idle cluster, {args.partitions} partitions x RF 3, {args.seconds:.0f} s:\n")
    print("| fetch sessions | brokers' CPU (s/s) | socket bytes/s | topic online in |")
    print("|---|---|---|---|")
    for name, (cpu, io, created) in (("on", with_sessions), ("off (slots=0)", without)):
        print(f"| {name} | {cpu:.3f} | {io:,.0f} | {created:.1f} s |")
    print(
        f"\nWith sessions: {with_sessions[0] / without[0]:.2f}x the CPU, "
        f"{with_sessions[1] / without[1]:.3f}x the bytes."
    )


if __name__ == "__main__":
    sys.exit(main())
