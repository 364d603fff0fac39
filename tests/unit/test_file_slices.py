"""A fetch answer sends the records it read, whatever becomes of their segment before
it goes out: retention deletes it, its topic is deleted, its log dir goes offline, a
follower truncates it away, the log is closed. Other files opened meanwhile may take
the descriptor numbers the segment let go of; the client never gets their bytes.
A segment cut shorter than the slice read from it closes the connection instead of
sending a malformed response. A real log, a real socket on loopback, a handler that
stands in for KafkaApis."""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from moldau.clock import FakeClock
from moldau.protocol.errors import KafkaStorageError
from moldau.protocol.fetch import Part, part_size
from moldau.protocol.legacy_records import MAGIC_V0, iter_messages
from moldau.protocol.records import build_batch
from moldau.server import network
from moldau.server.handlers.fetch import in_message_format
from moldau.server.network import Answer, Connection, SocketServer
from moldau.storage.log import FetchDataInfo, Log, remove_log_dir
from moldau.storage.log_config import LogConfig
from moldau.storage.partition_name import TopicPartition
from moldau.storage.segment import FileRecords, SegmentFile, segment_file_name

BATCHES = 4
# Files opened after the segment let go of its descriptor: the lowest free numbers,
# so one of them takes the segment's if it was closed.
IMPOSTORS = 16


def open_log(directory: Path) -> Log:
    """Four batches in the first segment, then a roll: the first segment is one
    that retention may delete."""
    log = Log.open(
        directory / "t-0", TopicPartition("t", 0), LogConfig(), FakeClock(), had_clean_shutdown=True
    )
    for i in range(BATCHES):
        records = [(b"k", b"value-%d-%d" % (i, j)) for j in range(3)]
        log.append_as_leader(memoryview(build_batch(records, timestamp=1)), 0)
    log.roll()
    return log


def delete_by_retention(log: Log) -> None:
    log.maybe_increment_log_start_offset(log.log_end_offset)
    assert log.delete_old_segments(log.log_end_offset) == 1
    log.delete_expired_files(2**62)  # file.delete.delay.ms has passed


def delete_the_log(log: Log) -> None:
    """LogManager.delete_log, then file.delete.delay.ms later."""
    log.retire()
    log.close_handlers()
    remove_log_dir(log.dir)


def take_offline(log: Log) -> None:
    log.retire()
    log.close_handlers()


def truncate_away(log: Log) -> None:
    log.truncate_fully_and_start_at(log.log_end_offset + 10)
    # The cut segments are renamed at once and let go of once file.delete.delay.ms
    # has passed (a flush on a worker thread may still be syncing them).
    log.delete_expired_files(log.clock.milliseconds() + log.config.file_delete_delay_ms)


CLOSERS: dict[str, Callable[[Log], None]] = {
    "retention": delete_by_retention,
    "topic deleted": delete_the_log,
    "log dir offline": take_offline,
    "follower truncation": truncate_away,
    "clean close": lambda log: log.close(),
}


@pytest.fixture
def impostors(tmp_path: Path) -> Iterator[Callable[[int], None]]:
    """Opens IMPOSTORS files of `size` bytes of 0xEE each; closed after the test."""
    opened: list[int] = []

    def open_them(size: int) -> None:
        for i in range(IMPOSTORS):
            fd = os.open(tmp_path / f"impostor-{i}", os.O_RDWR | os.O_CREAT, 0o644)
            opened.append(fd)
            os.write(fd, b"\xee" * size)

    yield open_them
    for fd in opened:
        os.close(fd)


def frame_of(records: Part) -> list[Part]:
    return [struct.pack(">i", part_size(records)), records]


async def answers(handler: Callable[[], list[Part]], requests: int = 1) -> list[bytes]:
    """Serve `requests` requests on one connection with `handler`'s parts; what the
    client reads back for each (up to the end of the stream if it ends first)."""

    async def handle(conn: Connection, payload: memoryview) -> Answer:
        return handler()

    server = SocketServer("127.0.0.1", 0, "PLAINTEXT", handle, 1 << 20, 10, lambda: 0)
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    got = []
    try:
        for _ in range(requests):
            writer.write(struct.pack(">i", 1) + b"x")
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
            try:
                got.append(await asyncio.wait_for(reader.readexactly(size), 5))
            except asyncio.IncompleteReadError as e:
                got.append(e.partial)
                break
        return got
    finally:
        writer.close()
        await server.stop()


def first_segment_files_open(directory: Path) -> list[str]:
    """What this process's descriptors name of the first segment's files in
    `directory` (deleted ones too)."""
    prefix = str(directory / segment_file_name(0, ""))
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the descriptor listdir itself used
            continue
        if target.startswith(prefix):
            names.append(target)
    return names


@pytest.fixture(params=["pread", "sendfile"])
def send_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "sendfile":
        monkeypatch.setattr(network, "SENDFILE_MIN_BYTES", 0)
    else:
        monkeypatch.setattr(network, "SENDFILE_MIN_BYTES", 1 << 30)
    return str(request.param)


@pytest.mark.parametrize("closer", CLOSERS)
def test_an_answer_sends_the_records_it_read_though_their_segment_let_go_of_its_file(
    tmp_path: Path, closer: str, send_path: str, impostors: Callable[[int], None]
) -> None:
    log = open_log(tmp_path)
    read: list[bytes] = []
    opened_after_sent: list[list[str]] = []

    def handler() -> list[Part]:
        if read:  # the next request: the first answer was sent
            opened_after_sent.append(first_segment_files_open(log.dir))
            return frame_of(b"")
        records = log.read(0, 1 << 20, log.log_end_offset, True).records
        assert isinstance(records, FileRecords)
        read.append(records.read())
        CLOSERS[closer](log)
        impostors(records.size)
        return frame_of(records)

    got = asyncio.run(answers(handler, requests=2))
    assert got[0] == read[0] != b""
    # Sent, the slice let go of the file: none stays open (nor its disk space used).
    assert opened_after_sent == [[]]


def test_a_slice_cut_short_since_it_was_read_closes_the_connection(
    tmp_path: Path, send_path: str
) -> None:
    """A follower truncating within the segment the slice lies in: Kafka's
    FileRecords.writeTo fails on a file shorter than the slice, and the response
    is never sent half."""
    log = open_log(tmp_path)
    info = log.read(0, 1 << 20, log.log_end_offset, True)

    def handler() -> list[Part]:
        log.truncate_to(3)  # the first batch stays
        return frame_of(info.records)

    (got,) = asyncio.run(answers(handler))
    assert len(got) < info.size  # the end of the stream came first


def test_old_message_formats_convert_the_records_read_though_their_segment_is_deleted(
    tmp_path: Path, impostors: Callable[[int], None]
) -> None:
    """Fetch v0-v3 convert a slice on a worker thread, after the read."""
    log = open_log(tmp_path)
    info = log.read(0, 1 << 20, log.log_end_offset, True)
    delete_by_retention(log)
    impostors(info.size)
    converted = in_message_format(1, info, 1 << 20)
    assert [(m.offset, m.value) for m in iter_messages(converted)] == [
        (3 * i + j, b"value-%d-%d" % (i, j)) for i in range(BATCHES) for j in range(3)
    ]
    assert {m.magic for m in iter_messages(converted)} == {MAGIC_V0}


def test_old_message_formats_answer_a_storage_error_for_records_that_cannot_be_read(
    tmp_path: Path,
) -> None:
    """A read that fails (here a directory, as a failing disk fails) is the
    partition's KAFKA_STORAGE_ERROR, not an error of the handler."""
    unreadable = FileRecords(SegmentFile(os.open(tmp_path, os.O_RDONLY)), 0, 100)
    with pytest.raises(KafkaStorageError):
        in_message_format(1, FetchDataInfo(0, unreadable), 1 << 20)
