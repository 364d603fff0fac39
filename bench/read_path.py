"""What the fetch read path costs per partition read, in this process: a log of
100,000 records in 1 KiB batches, read as a consumer reads it (`Log.read` from an
offset, the response encoded around the file slice), then the slice's bytes read
with pread (what a slice below the sendfile threshold costs to send). Also the cost
of a dup'd descriptor per slice (os.dup + os.close), the other way to keep a
segment file open until its answer is sent. The slice and its read alone are the
part a change of FileRecords touches.

    .venv/bin/python bench/read_path.py            # 5 rounds of 200,000 reads
    .venv/bin/python bench/read_path.py --quick    # 3 rounds of 50,000
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from moldau.clock import FakeClock
from moldau.protocol.fetch import FetchPartitionResult, FetchTopicResult, encode_fetch_response
from moldau.protocol.records import build_batch
from moldau.storage.log import Log
from moldau.storage.log_config import LogConfig
from moldau.storage.partition_name import TopicPartition

RECORDS_PER_BATCH = 10
BATCHES = 10_000
FETCH_BYTES = 16 * 1024


def build_log(directory: Path) -> Log:
    config = LogConfig(segment_bytes=8 * 1024 * 1024)
    log = Log.open(directory, TopicPartition("t", 0), config, FakeClock(), had_clean_shutdown=True)
    batch = memoryview(build_batch([(b"k", b"v" * 90)] * RECORDS_PER_BATCH, timestamp=1))
    for _ in range(BATCHES):
        log.append_as_leader(batch, 0)
    return log


def per_call_ns(action: Callable[[int], object], offsets: list[int]) -> float:
    started = time.perf_counter_ns()
    for offset in offsets:
        action(offset)
    return (time.perf_counter_ns() - started) / len(offsets)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, reads = (3, 50_000) if args.quick else (5, 200_000)
    with tempfile.TemporaryDirectory() as tmp:
        log = build_log(Path(tmp) / "t-0")
        end = log.log_end_offset
        rng = random.Random(1)
        offsets = [rng.randrange(end) for _ in range(reads)]

        def read(offset: int) -> object:
            return log.read(offset, FETCH_BYTES, end, True)

        def read_and_encode(offset: int) -> object:
            info = log.read(offset, FETCH_BYTES, end, True)
            result = FetchPartitionResult(0, 0, end, end, 0, info.records)
            return encode_fetch_response(12, [FetchTopicResult("t", [result])])

        def read_and_pread(offset: int) -> object:
            records = log.read(offset, FETCH_BYTES, end, True).records
            return records if isinstance(records, bytes) else records.read()

        segment = log.segments[0]

        def slice_only(offset: int) -> object:
            return segment.slice(offset, 1024)

        small = segment.slice(0, 1024)

        def pread_only(offset: int) -> object:
            return small.read()

        fd = log.active_segment.log_path.open("rb")

        def dup_and_close(offset: int) -> object:
            os.close(os.dup(fd.fileno()))
            return None

        cases = {
            "Log.read": read,
            "Log.read + encode": read_and_encode,
            "Log.read + pread": read_and_pread,
            "LogSegment.slice": slice_only,
            "FileRecords.read 1K": pread_only,
            "os.dup + os.close": dup_and_close,
        }
        results: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):
            for name, action in cases.items():
                results[name].append(per_call_ns(action, offsets))
        fd.close()
        log.close()
    print(f"{reads:,} reads of up to {FETCH_BYTES // 1024} KiB, {rounds} rounds; ns per read:")
    for name, times in results.items():
        print(f"  {name:20s} best {min(times):8.0f}  median {statistics.median(times):8.0f}")


if __name__ == "__main__":
    main()
