"""What reading every record of a producer's batch would cost the leader append,
as Kafka's LogValidator does (Moldau reads records only on compacted topics, when it
recompresses, and for the timestamp window; docs/architecture.md, section 11):
CPU µs per batch of the append itself (Log.append_as_leader, header checks only),
of decompressing the batch's payload per codec, and of walking the record lengths
in Python, side by side in one run.

    .venv/bin/python bench/produce_validation.py [--record]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from moldau.clock import SYSTEM_CLOCK
from moldau.protocol.records import HEADER_SIZE, Compression, _varint, build_batch, decompress
from moldau.storage.log import Log
from moldau.storage.log_config import LogConfig
from moldau.storage.partition_name import TopicPartition

RECORDS = 160  # of 100-byte values: a librdkafka batch of about 16 KB
ROUNDS = 3000


def _records() -> list[tuple[bytes | None, bytes | None]]:
    return [(b"key-%d" % i, (b"value %06d " % i) * 8 + b"x" * 4) for i in range(RECORDS)]


def per_call_us(fn: Callable[[], object], rounds: int = ROUNDS) -> float:
    """CPU time of one call, the best of three runs of `rounds` calls."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(rounds):
            fn()
        best = min(best, time.process_time() - start)
    return best / rounds * 1e6


def walk_lengths(body: bytes, count: int) -> bool:
    """The cheapest structural check of an uncompressed body: each record's length
    varint (the decoder produce validation uses), skipped over, landing exactly on
    the end."""
    pos = 0
    for _ in range(count):
        length, pos = _varint(body, pos)
        pos += length
        if length <= 0 or pos > len(body):
            return False
    return pos == len(body)


def append_us(directory: Path) -> float:
    log = Log.open(
        directory, TopicPartition("bench", 0), LogConfig(), SYSTEM_CLOCK, had_clean_shutdown=True
    )
    batch = memoryview(build_batch(_records(), timestamp=int(time.time() * 1000)))
    try:
        return per_call_us(lambda: log.append_as_leader(batch, 0))
    finally:
        log.close(sync=False)


def run() -> list[tuple[str, float]]:
    rows = []
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        rows.append(("Log.append_as_leader (header checks)", append_us(Path(tmp) / "bench-0")))
    plain = build_batch(_records())
    body = bytes(plain[HEADER_SIZE:])
    rows.append(
        ("walk of the record lengths (Python)", per_call_us(lambda: walk_lengths(body, RECORDS)))
    )
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        payload = memoryview(build_batch(_records(), compression=codec))[HEADER_SIZE:]
        rows.append(
            (
                f"decompress ({codec.name.lower()})",
                per_call_us(lambda p=payload, c=codec: decompress(c, p)),
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()
    rows = run()
    base = rows[0][1]
    size = len(build_batch(_records()))
    lines = [
        f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: reading every record of a produced batch"
        " (bench/produce_validation.py)",
        "",
        f"Machine: {platform.system()} {platform.release()} {platform.machine()},"
        f" Python {platform.python_version()}. One batch of {RECORDS} records of 100 B"
        f" ({size} bytes uncompressed), CPU µs a batch, best of three runs of {ROUNDS}.",
        "",
        "| work | µs a batch | x the append |",
        "|---|---|---|",
        *(f"| {name} | {us:.1f} | {us / base:.2f} |" for name, us in rows),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.record:
        with open(Path(__file__).parent / "RESULTS.md", "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
