"""Idempotent producers' state in one partition after many short-lived producers (Java
clients are idempotent by default) and retention removed every record: the snapshot
a roll writes (on the event loop), reopening the log and the memory the reopened log
holds, with the producers kept (as before producer.id.expiration.ms existed) and
after the broker's periodic check expired them a day later.

    .venv/bin/python bench/producer_state.py [--producers 50000] [--batches 1]

Each producer writes `--batches` one-record batches. Memory is what tracemalloc
counts for the objects `Log.open` leaves behind.
"""

from __future__ import annotations

import argparse
import gc
import os
import struct
import tempfile
import time
import tracemalloc
from pathlib import Path

from moldau.clock import FakeClock
from moldau.protocol.records import OFFSET_CRC, build_batch, compute_crc
from moldau.storage.log import Log
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition
from moldau.storage.producer_state import snapshot_name

DAY = 86_400_000
TP = TopicPartition("t", 0)
CONFIG = LogConfig(segment_bytes=64 << 20, retention_ms=60_000)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--producers", type=int, default=50_000)
    parser.add_argument("--batches", type=int, default=1)
    args = parser.parse_args()
    clock = FakeClock(int(time.time() * 1000))
    template = bytearray(build_batch([(None, b"x" * 100)], timestamp=clock.milliseconds()))
    producer_fields = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        manager = LogManager([Path(d)], clock, 1, producer_id_expiration_ms=DAY)
        log = manager.get_or_create_log(TP, CONFIG)
        for pid in range(args.producers):
            for seq in range(args.batches):
                producer_fields.pack_into(template, 43, pid, 0, seq)
                struct.pack_into(">I", template, OFFSET_CRC, compute_crc(template))
                log.append_as_leader(memoryview(template), 0)
        clock.advance(120_000)
        log.roll()
        log.delete_old_segments(log.log_end_offset)
        assert log.log_start_offset == log.log_end_offset  # every record is gone
        print(f"{args.producers:,} producers x {args.batches} batches, every record deleted\n")
        print("| producer ids | in state | snapshot | snapshot write | reopen | memory |")
        print("|---|---|---|---|---|---|")
        log = measure("kept", log, clock)
        clock.advance(DAY)
        manager.logs[TP] = log
        assert manager.remove_expired_producers() == args.producers
        measure("expired", log, clock).close()


def measure(name: str, log: Log, clock: FakeClock) -> Log:
    """Print one row; return the log reopened."""
    state = log.producer_state
    count = len(state.producers)
    # The snapshot a roll at this offset writes.
    path = log.dir / snapshot_name(state.map_end_offset)
    path.unlink(missing_ok=True)
    start = time.perf_counter()
    state.take_snapshot()
    write_ms = (time.perf_counter() - start) * 1000
    size = path.stat().st_size
    log.close()
    del log, state
    gc.collect()
    start = time.perf_counter()
    reopened = Log.open(path.parent, TP, CONFIG, clock, had_clean_shutdown=True)
    reopen_ms = (time.perf_counter() - start) * 1000
    reopened.close()
    del reopened
    gc.collect()
    tracemalloc.start()  # a second open, to count its memory (tracemalloc slows it)
    reopened = Log.open(path.parent, TP, CONFIG, clock, had_clean_shutdown=True)
    gc.collect()
    memory = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(
        f"| {name} | {count:,} | {_bytes(size)} | {write_ms:.1f} ms | {reopen_ms:.0f} ms |"
        f" {_bytes(memory)} |"
    )
    return reopened


def _bytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n:,} B"


if __name__ == "__main__":
    main()
