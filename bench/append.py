"""The leader append path alone (Log.append_as_leader into a segmented log on disk),
with no network and no client: batches/s and MB/s, for variants of the code side by
side in one run (e.g. this tree and an earlier commit checked out elsewhere).

    .venv/bin/python bench/append.py                          # this tree only
    git worktree add /tmp/before <rev>
    .venv/bin/python bench/append.py --variant before=/tmp/before/src

Each variant runs in its own process (`PYTHONPATH` set to its src/), in turns, so
the machine's drift hits them alike; the median of the rounds is reported. To time
the CPU work without the disk's writeback, put the logs on tmpfs:
`APPEND_BENCH_DIR=/dev/shm`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = (("100 B x 100", 100, 100), ("1 KiB x 16", 1024, 16))
BATCHES = 40_000


def measure(record: int, per_batch: int, batches: int) -> float:
    """Seconds to append `batches` batches (run inside the variant's process)."""
    from moldau.clock import SYSTEM_CLOCK
    from moldau.protocol.records import build_batch
    from moldau.storage.log import Log
    from moldau.storage.log_config import LogConfig
    from moldau.storage.partition_name import TopicPartition

    batch = memoryview(
        build_batch([(None, b"x" * record)] * per_batch, timestamp=int(time.time() * 1000))
    )
    with tempfile.TemporaryDirectory(dir=os.environ.get("APPEND_BENCH_DIR")) as d:
        log = Log.open(
            Path(d) / "t-0", TopicPartition("t", 0), LogConfig(segment_bytes=256 << 20),
            SYSTEM_CLOCK, had_clean_shutdown=True,
        )  # fmt: skip
        start = time.perf_counter()
        for _ in range(batches):
            log.append_as_leader(batch, 0)
        elapsed = time.perf_counter() - start
        log.close()
    return elapsed


def run_variant(src: str, record: int, per_batch: int, batches: int) -> float:
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(record), str(per_batch), str(batches)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return float(json.loads(out.stdout)["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=SRC")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=BATCHES)
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        record, per_batch, batches = args.child
        print(json.dumps({"seconds": measure(record, per_batch, batches)}))
        return
    here = str(Path(__file__).resolve().parent.parent / "src")
    variants = [("this tree", here)] + [tuple(v.split("=", 1)) for v in args.variant]
    print(f"{args.batches} batches per run, median of {args.rounds} rounds, "
          f"{os.cpu_count()} cores")  # fmt: skip
    print("| variant | batch | batches/s | MB/s | speed relative to this tree |")
    print("|---|---|---|---|---|")
    for name, record, per_batch in CASES:
        times: dict[str, list[float]] = {v: [] for v, _ in variants}
        for _ in range(args.rounds):
            for vname, src in variants:
                times[vname].append(run_variant(src, record, per_batch, args.batches))
        base = statistics.median(times["this tree"])
        for vname, _ in variants:
            t = statistics.median(times[vname])
            rate = args.batches / t
            mb = rate * record * per_batch / 1e6
            print(f"| {vname} | {name} | {rate:,.0f} | {mb:,.1f} | {base / t:.2f}x |")


if __name__ == "__main__":
    main()
