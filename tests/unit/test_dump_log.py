"""`moldau dump-log` on files made here: what a Moldau broker never writes but Kafka's
old logs hold (v0/v1 message sets, built by kafka-python's own writer), Moldau's
producer state snapshots and transaction indexes, and the index checks that find
a broken index (tests/kafka/test_dump_log.py compares the rest with Kafka's tool)."""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import struct
from pathlib import Path

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from moldau.cli.main import main
from moldau.protocol.records import (
    BatchHeader,
    Compression,
    build_batch,
    build_end_txn_marker,
    empty_batch,
)
from moldau.storage.producer_state import BatchMetadata, ProducerStateEntry, ProducerStateManager
from moldau.storage.txn_index import AbortedTxn

LOG = "00000000000000000000.log"


def dump(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["dump-log", *args])
    return code, out.getvalue(), err.getvalue()


def batches(*specs: tuple[int, int, int]) -> bytes:
    """v2 batches of (base offset, records, first timestamp), a record a millisecond."""
    return b"".join(
        build_batch(
            [(f"k{i}".encode(), f"v{i}".encode()) for i in range(n)],
            base_offset=base,
            timestamps=[ts + i for i in range(n)],
        )
        for base, n, ts in specs
    )


def legacy(magic: int, codec: Compression, first_offset: int) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, int(codec), batch_size=1 << 20)
    for i in range(3):
        builder.append(first_offset + i, 1000 + i if magic else None, b"k%d" % i, b"v%d" % i)
    data = bytes(builder.build())
    if codec != Compression.NONE:
        # In a log a wrapper is numbered by its last record, as the broker writes it.
        data = struct.pack(">q", first_offset + 2) + data[8:]
    return data


def test_v0_and_v1_message_sets_are_dumped_entry_by_entry_and_record_by_record(
    tmp_path: Path,
) -> None:
    log = tmp_path / LOG
    log.write_bytes(
        legacy(0, Compression.NONE, 0)
        + legacy(1, Compression.GZIP, 3)
        + legacy(1, Compression.NONE, 6)
    )
    code, out, err = dump("--files", str(log), "--print-data-log")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[2].startswith("offset: 0 position: 0 NoTimestampType: -1 size: ")
    assert lines[2].endswith(" magic: 0 compresscodec: none crc: " + lines[2].split("crc: ")[1])
    assert "isvalid: true" in lines[2]
    assert lines[3].startswith(
        "| offset: 0 NoTimestampType: -1 keySize: 2 valueSize: 2 isValid: true crc: "
    )
    assert lines[3].endswith("} key: k0 payload: v0")
    # The gzip wrapper: one entry (named by its last offset), three records inside.
    [wrapper] = [x for x in lines if "compresscodec: gzip" in x]
    assert wrapper.startswith("offset: 5 position: ")
    records = [x for x in lines if x.startswith("| offset: ")]
    assert [int(x.split()[2]) for x in records] == list(range(9))
    assert "| offset: 4 CreateTime: 1001 keySize: 2 valueSize: 2 isValid: true" in out
    assert not err


def test_a_corrupt_legacy_message_is_shown_invalid(tmp_path: Path) -> None:
    data = bytearray(legacy(1, Compression.NONE, 0))
    data[-1] ^= 0xFF  # the last message's value
    (tmp_path / LOG).write_bytes(bytes(data))
    code, out, _ = dump("--files", str(tmp_path / LOG))
    assert code == 0
    assert [x.endswith("isvalid: false") for x in out.splitlines()[2:]] == [False, False, True]


def test_non_consecutive_offsets_and_max_bytes(tmp_path: Path) -> None:
    log = tmp_path / LOG
    log.write_bytes(batches((0, 3, 100), (3, 2, 200), (10, 2, 300)))
    code, out, err = dump("--files", str(log), "--deep-iteration")
    assert code == 0
    assert err.splitlines() == [f"Non-consecutive offsets in {log}", "  4 is followed by 10"]
    first_size = int(out.splitlines()[2].split(" size: ")[1].split()[0])
    code, out, err = dump("--files", str(log), "--max-bytes", str(first_size + 10))
    assert code == 0 and not err
    # One whole batch fits; bytes past it are not called invalid when limited.
    assert [x.split()[1] for x in out.splitlines()[2:]] == ["0"]


def write_segment(
    directory: Path, index: list[tuple[int, int]], times: list[tuple[int, int]]
) -> Path:
    log = directory / LOG
    log.write_bytes(batches((0, 3, 100), (3, 3, 200), (6, 3, 300)))
    (directory / "00000000000000000000.index").write_bytes(
        b"".join(struct.pack(">ii", o, p) for o, p in index)
    )
    (directory / "00000000000000000000.timeindex").write_bytes(
        b"".join(struct.pack(">qi", t, o) for t, o in times)
    )
    return log


def test_index_entries_are_checked_against_the_log(tmp_path: Path) -> None:
    size = len(batches((0, 3, 100)))
    write_segment(tmp_path, [(2, 0), (5, size), (7, 2 * size)], [(102, 2), (201, 5), (302, 9)])
    index, time_index = (
        str(tmp_path / f"00000000000000000000.{s}") for s in ("index", "timeindex")
    )
    code, out, err = dump("--files", f"{index},{time_index}")
    assert code == 0
    assert out.splitlines() == [
        f"Dumping {index}",
        "offset: 2 position: 0",
        f"offset: 5 position: {size}",
        f"offset: 7 position: {2 * size}",
        f"Dumping {time_index}",
        "timestamp: 102 offset: 2",
        "timestamp: 201 offset: 5",
        "timestamp: 302 offset: 9",
    ]
    assert err.splitlines() == [
        f"Mismatches in :{index}",
        "  Index offset: 7, log offset: 8",
        f"Found timestamp mismatch in :{time_index}",
        "  Index timestamp: 201, log timestamp: 202",
        "The following indexed offsets are not found in the log.",
        "Indexed offset: 9, found log offset: -1",
    ]
    code, out, err = dump("--files", index, "--verify-index-only")
    assert out.splitlines() == [f"Dumping {index}"] and "Index offset: 7" in err


def test_the_sanity_check_refuses_a_torn_or_backwards_index(tmp_path: Path) -> None:
    write_segment(tmp_path, [(2, 0)], [(300, 2), (100, 5)])
    index = tmp_path / "00000000000000000000.index"
    code, out, err = dump("--files", str(index), "--index-sanity-check")
    assert code == 0 and out.splitlines()[-1] == f"{index} passed sanity check."
    index.write_bytes(index.read_bytes() + b"\x00\x00")
    code, _, err = dump("--files", str(index), "--index-sanity-check")
    assert code == 1
    assert f"Index file {index} is corrupt, found 10 bytes which is neither positive" in err
    code, _, err = dump(
        "--files", str(tmp_path / "00000000000000000000.timeindex"), "--index-sanity-check"
    )
    assert code == 1
    assert "but the last timestamp is 100 which is less than the first timestamp 300" in err
    empty = tmp_path / "00000000000000000009.index"
    empty.write_bytes(b"")
    assert dump("--files", str(empty))[1].splitlines()[-1] == f"{empty} is empty."


def test_producer_snapshots_and_transaction_indexes(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    entry = ProducerStateEntry(7, 2, 1234, current_txn_first_offset=40, coordinator_epoch=3)
    entry.batches.append(BatchMetadata(0, 4, 30, 34, 1200))
    entry.batches.append(BatchMetadata(5, 9, 40, 44, 1234))
    state.producers = {7: entry, 8: ProducerStateEntry(8, 0, 99)}
    state.map_end_offset = 45
    state.take_snapshot(sync=False)
    snapshot = tmp_path / "00000000000000000045.snapshot"
    txn_index = tmp_path / "00000000000000000000.txnindex"
    txn_index.write_bytes(AbortedTxn(7, 10, 20, 5).encode() + AbortedTxn(8, 21, 22, 21).encode())
    code, out, err = dump("--files", f"{snapshot},{txn_index}")
    assert code == 0, err
    assert out.splitlines() == [
        f"Dumping {snapshot}",
        "producerId: 7 producerEpoch: 2 coordinatorEpoch: 3 currentTxnFirstOffset: "
        "OptionalLong[40] lastTimestamp: 1234 firstSequence: 5 lastSequence: 9 "
        "lastOffset: 44 offsetDelta: 4 timestamp: 1234",
        "producerId: 8 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 99 ",
        f"Dumping {txn_index}",
        "version: 0 producerId: 7 firstOffset: 10 lastOffset: 20 lastStableOffset: 5",
        "version: 0 producerId: 8 firstOffset: 21 lastOffset: 22 lastStableOffset: 21",
    ]
    snapshot.write_bytes(snapshot.read_bytes()[:-1] + b"\x00")
    code, out, err = dump("--files", str(snapshot))
    assert code == 0 and "is corrupt" in err and out.splitlines() == [f"Dumping {snapshot}"]


def test_files_it_does_not_know_or_cannot_find(tmp_path: Path) -> None:
    other = tmp_path / "leader-epoch-checkpoint"
    other.write_text("0\n")
    code, _, err = dump("--files", str(other))
    assert code == 0 and err == f"Ignoring unknown file {other}\n"
    code, _, err = dump("--files", str(tmp_path / LOG))
    assert code == 1 and "no such file" in err and "Traceback" not in err


def test_the_tool_opens_nothing_for_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live broker's files: every open is read-only."""
    write_segment(tmp_path, [(2, 0)], [(102, 2)])
    modes: list[int] = []
    real_open = os.open

    def watching_open(path: str, flags: int, *args: int) -> int:
        modes.append(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
        return real_open(path, flags, *args)

    real_io_open = io.open

    def watching_io_open(file: object, mode: str = "r", *args: object, **kw: object) -> object:
        modes.append(int(any(c in mode for c in "wax+")))
        return real_io_open(file, mode, *args, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "open", watching_open)
    monkeypatch.setattr(io, "open", watching_io_open)
    monkeypatch.setattr(builtins, "open", watching_io_open)
    names = ",".join(
        str(tmp_path / f"00000000000000000000.{s}") for s in ("log", "index", "timeindex")
    )
    assert dump("--files", names, "--deep-iteration")[0] == 0
    assert modes and not any(modes)


def test_a_batch_the_cleaner_emptied_prints_its_header_and_no_record(tmp_path: Path) -> None:
    marker = build_end_txn_marker(5, 0, 1, commit=True, timestamp=10)
    emptied = empty_batch(BatchHeader.parse(marker))
    (tmp_path / LOG).write_bytes(batches((0, 2, 100)) + emptied)
    code, out, err = dump("--files", str(tmp_path / LOG), "--deep-iteration")
    assert code == 0, err
    last = out.splitlines()[-1]
    assert last.startswith("baseOffset: 0 lastOffset: 0 count: 0 ")
    assert "isControl: true" in last and last.endswith("isvalid: true")
