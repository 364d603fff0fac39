"""What the old message formats cost: one Moldau broker, librdkafka producing and
consuming with record batches (Produce v7+, Fetch v11+) and, in the same run, with
the protocol of Kafka 0.9.0 (Produce v1 / Fetch v1, magic 0), which the broker
converts on the way in and out. (librdkafka speaks an old protocol only when told a
broker older than 0.10, so magic 1 is measured by the conversion alone.)

Reported per mode, in rounds that alternate the modes: records/s produced (acks=1)
and consumed, and the broker's CPU time per MB (user+sys from /proc). Then the
conversion functions alone, per record, in this process.

    .venv/bin/python bench/message_formats.py             # 3 rounds of 1,000,000 records
    .venv/bin/python bench/message_formats.py --quick     # 1 round of 200,000
    .venv/bin/python bench/message_formats.py --record    # also append to RESULTS.md
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from throughput import (
    PHASE_DEADLINE_S,
    consume_worker,
    create_topic,
    machine,
    produce_worker,
    publish,
    started,
)

# librdkafka without ApiVersions speaks the protocol of the version it is told.
MODES: dict[str, dict[str, str]] = {
    "record batches": {},
    # log_level 3: not the warnings that these settings are deprecated.
    "magic 0 (Kafka 0.9.0)": {
        "api.version.request": "false",
        "broker.version.fallback": "0.9.0",
        "log_level": "3",
    },
}


def phase(target, broker, args: tuple, extra: dict[str, str]) -> tuple[int, float, float]:  # type: ignore[no-untyped-def, type-arg]
    """(records, seconds, broker CPU seconds) of one worker process of throughput.py."""
    out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    cpu = broker.cpu_seconds()
    kwargs = {"extra": extra}
    proc = mp.Process(target=target, args=(broker.bootstrap, *args, out), kwargs=kwargs)
    proc.start()
    result = out.get(timeout=PHASE_DEADLINE_S + 30)
    proc.join(30)
    # produce_worker: (records, seconds, ...); consume_worker: (records, bytes, seconds)
    seconds = result[2] if target is consume_worker else result[1]
    return result[0], seconds, broker.cpu_seconds() - cpu


def micro(size: int, per_batch: int) -> list[str]:
    """The conversions alone: µs per record, for batches of `per_batch` records."""
    from moldau.protocol.legacy_records import MAGIC_V0, MAGIC_V1, down_convert, up_convert
    from moldau.protocol.records import Compression, build_batch

    value = os.urandom(size)
    lines = []
    for codec in (Compression.NONE, Compression.LZ4):
        batch = build_batch([(None, value)] * per_batch, timestamp=1, compression=codec)
        for magic in (MAGIC_V0, MAGIC_V1):
            message_set = down_convert(batch, magic, 0)
            rounds = max(1, 20_000 // per_batch)
            t0 = time.perf_counter()
            for _ in range(rounds):
                down_convert(batch, magic, 0)
            t1 = time.perf_counter()
            for _ in range(rounds):
                up_convert(message_set)
            t2 = time.perf_counter()
            n = rounds * per_batch
            lines.append(
                f"| {codec.name.lower()} | {magic} | {(t1 - t0) / n * 1e6:.2f} | "
                f"{(t2 - t1) / n * 1e6:.2f} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    rounds, n = (1, 200_000) if args.quick else (3, 1_000_000)
    results: dict[str, list[tuple[float, float, float, float]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp, started("moldau", Path(tmp)) as broker:
        for r in range(rounds):
            for mode, extra in MODES.items():
                topic = f"formats-{r}-{len(results[mode])}-{abs(hash(mode)) % 1000}"
                create_topic(broker.bootstrap, topic, 1)
                made, p_s, p_cpu = phase(produce_worker, broker, (topic, 0, n, args.size), extra)
                got, c_s, c_cpu = phase(consume_worker, broker, (topic, [0], n), extra)
                if made != n or got != n:
                    raise SystemExit(f"{mode}: produced {made}, consumed {got} of {n}")
                mb = n * args.size / 1e6
                results[mode].append((n / p_s, p_cpu * 1e6 / mb, n / c_s, c_cpu * 1e6 / mb))
                print(mode, f"round {r}", results[mode][-1], flush=True)
    base = results["record batches"]
    lines = [
        f"## Old message formats ({time.strftime('%Y-%m-%d')}, {machine()})",
        "",
        f"bench/message_formats.py: one Moldau broker, librdkafka, {n:,} records of "
        f"{args.size} B on one partition, acks=1, {rounds} round(s), modes alternating; "
        "best round of each; ratios against record batches in the same run.",
        "",
        "| mode | produce rec/s | broker CPU µs/MB in | consume rec/s | broker CPU µs/MB out |",
        "|---|---|---|---|---|",
    ]
    best_base = (max(x[0] for x in base), min(x[1] for x in base),
                 max(x[2] for x in base), min(x[3] for x in base))  # fmt: skip
    for mode, rows in results.items():
        best = (max(x[0] for x in rows), min(x[1] for x in rows),
                max(x[2] for x in rows), min(x[3] for x in rows))  # fmt: skip
        lines.append(
            f"| {mode} | {best[0]:,.0f} ({best[0] / best_base[0]:.2f}x) | "
            f"{best[1]:,.0f} ({best[1] / best_base[1]:.1f}x) | "
            f"{best[2]:,.0f} ({best[2] / best_base[2]:.2f}x) | "
            f"{best[3]:,.0f} ({best[3] / best_base[3]:.1f}x) |"
        )
    lines += [
        "",
        f"Conversion alone (µs per record, {args.size} B values, batches of 1,000 records):",
        "",
        "| codec | magic | v2 -> message set (Fetch) | message set -> v2 (Produce) |",
        "|---|---|---|---|",
        *micro(args.size, 1000),
        "",
    ]
    publish("\n".join(lines), args.record)


if __name__ == "__main__":
    main()
