"""What client quotas cost the produce path, in one run: Moldau before them (a
source tree given with --before, e.g. `git archive main`), Moldau with them and no
quota set (the path every broker without quotas takes), and Moldau with a quota set
for another client (every request then looks its client up). Rounds alternate the
three, so the machine's drift falls on each alike; reported: produced MB/s per
round, the median of each, and the ratios to "before".

    mkdir /tmp/before && git archive main | tar -x -C /tmp/before
    .venv/bin/python bench/quotas.py --before /tmp/before [--rounds 5] [--record]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from throughput import Broker, create_topic, machine, publish, run_phase, started

SRC = Path(__file__).resolve().parents[1] / "src"


@contextmanager
def moldau_from(src: Path, workdir: Path) -> Iterator[Broker]:
    """A Moldau broker run from the source tree `src` (its src/ first on the path)."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(src)  # the broker process inherits it
    try:
        with started("moldau", workdir) as broker:
            yield broker
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def set_other_clients_quota(bootstrap: str) -> None:
    """A producer quota on a client-id the bench does not use: quotas are on."""
    from moldau.protocol.codec import build_entity, encode_body, request_class
    from moldau.spark.fetch_client import Connection, decode_answer

    cls = request_class(49, 1)
    assert cls is not None
    req = build_entity(cls, {"validate_only": False, "entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": "someone-else"}],
        "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
    }]})  # fmt: skip
    host, port = bootstrap.rsplit(":", 1)
    conn = Connection((host, int(port)), "bench", 10.0)
    try:
        conn.send_raw(conn.frame(49, 1, encode_body(req)))
        answer = decode_answer(49, 1, conn.read_frame())
        assert answer.entries[0].error_code == 0, answer
    finally:
        conn.close()
    time.sleep(0.5)  # the broker applies it from its change notification


def one_round(src: Path, with_quota: bool, records: int, size: int) -> tuple[float, float]:
    """MB/s produced, and the broker's CPU time per MB (µs; user + sys): the second
    is what quotas could add to, and less at the mercy of other load on the machine."""
    with tempfile.TemporaryDirectory(prefix="bench-quotas-") as d, moldau_from(src, Path(d)) as b:
        create_topic(b.bootstrap, "bench", 1)
        if with_quota:
            set_other_clients_quota(b.bootstrap)
        run_phase(b, "produce", "bench", 1, records // 10, size)  # warm-up
        phase = run_phase(b, "produce", "bench", 1, records, size)
        return phase.mb_s, phase.cpu_us_per_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="a source tree without quotas")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--record", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()
    setups = {
        "before quotas": (args.before / "src", False),
        "with quotas, none set": (SRC, False),
        "with quotas, one set for another client": (SRC, True),
    }
    rates: dict[str, list[float]] = {name: [] for name in setups}
    cpus: dict[str, list[float]] = {name: [] for name in setups}
    for r in range(args.rounds):
        for name, (src, quota) in setups.items():
            mb_s, cpu = one_round(src, quota, args.records, args.size)
            rates[name].append(mb_s)
            cpus[name].append(cpu)
            print(f"round {r + 1} {name}: {mb_s:.1f} MB/s, {cpu:.0f} µs CPU/MB", flush=True)
    base_rate = statistics.median(rates["before quotas"])
    base_cpu = statistics.median(cpus["before quotas"])
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## {now}: client quotas and the produce path (bench/quotas.py)",
        "",
        f"{machine()}. One confluent-kafka producer, acks=1, {args.records:,} records of "
        f"{args.size} B to one partition, {args.rounds} rounds alternating the setups "
        "(a fresh broker each). Broker CPU is user + sys of its process per MB produced.",
        "",
        "| setup | MB/s per round | median MB/s | vs before | broker CPU µs/MB per round "
        "| median | vs before |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in setups:
        rate, cpu = statistics.median(rates[name]), statistics.median(cpus[name])
        each_rate = ", ".join(f"{v:.0f}" for v in rates[name])
        each_cpu = ", ".join(f"{v:.0f}" for v in cpus[name])
        lines.append(
            f"| {name} | {each_rate} | {rate:.0f} | {rate / base_rate:.3f} | {each_cpu} "
            f"| {cpu:.0f} | {cpu / base_cpu:.3f} |"
        )
    publish("\n".join(lines) + "\n", args.record)


if __name__ == "__main__":
    main()
