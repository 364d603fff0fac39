"""`moldau dump-log`: print what a broker's log files hold, as kafka-dump-log.sh
(DumpLogSegments): `.log` segments (dump_log_records), `.index` and `.timeindex`
with their checks (dump_log_index), `.txnindex` aborted transactions and `.snapshot`
producer state. The checks' findings are printed on stderr after every file, as
Kafka's tool prints them. Only reads: safe on a live broker's log directory.

A file that cannot be read further ends the run with the reason (Kafka's words
where Kafka's tool has them) and exit code 1, after what could be printed.
Moldau's producer state snapshots are its own format (not Kafka's), so only this
tool reads them.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from pathlib import Path
from typing import Any, TextIO

from moldau.cli import coordinator_json
from moldau.cli.dump_log_index import IndexErrors, IndexMode, dump_index, dump_time_index
from moldau.cli.dump_log_records import (
    DumpError,
    LogDumpOptions,
    Parser,
    dump_log,
    string_parser,
)
from moldau.cli.errors import CliError
from moldau.cli.progress import Progress, output_redirected
from moldau.storage.producer_state import read_snapshot
from moldau.storage.txn_index import decode_entries

_STRING_DECODER = "org.apache.kafka.tools.api.StringDecoder"
_DECODE_ERRORS = (ValueError, struct.error, UnicodeDecodeError)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "dump-log",
        help="print what log segment, index and snapshot files hold, as kafka-dump-log.sh",
        description="Parse log files and dump their contents, as kafka-dump-log.sh does: "
        "useful to look into a seemingly corrupt segment. Read-only: safe on a live "
        "broker's files.",
    )
    p.add_argument(
        "--files",
        required=True,
        metavar="FILE1,FILE2",
        help="the comma-separated .log, .index, .timeindex, .txnindex and .snapshot files",
    )
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="print the records' keys and values (implies --deep-iteration)",
    )
    p.add_argument(
        "--deep-iteration", action="store_true", help="print each record, not only each batch"
    )
    p.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check the indexes against the log without printing their entries",
    )
    p.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="only run the check a broker runs on its indexes at start-up",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        metavar="N",
        help="read at most this many bytes of each .log file",
    )
    p.add_argument(
        "--max-message-size",
        type=int,
        default=5 * 1024 * 1024,
        metavar="N",
        help="accepted for Kafka's flag; batches are read whole whatever their size",
    )
    p.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode the records as __consumer_offsets' (offsets and group metadata)",
    )
    p.add_argument(
        "--transaction-log-decoder",
        action="store_true",
        help="decode the records as __transaction_state's",
    )
    for which in ("value", "key"):
        p.add_argument(
            f"--{which}-decoder-class",
            nargs="?",
            const=_STRING_DECODER,
            metavar="CLASS",
            help=f"print {which}s as UTF-8 text (Kafka's StringDecoder, the only one)",
        )
    p.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="print only the keys and values of records, not their offsets and sizes",
    )
    p.set_defaults(run=run)


def _parser(args: argparse.Namespace) -> Parser:
    if args.offsets_decoder:
        return _coordinator_parser(coordinator_json.offsets_key_and_value, "offset topic")
    if args.transaction_log_decoder:
        return _coordinator_parser(coordinator_json.transaction_key_and_value, "transaction log")
    for cls in (args.value_decoder_class, args.key_decoder_class):
        if cls not in (None, _STRING_DECODER, "kafka.serializer.StringDecoder"):
            raise CliError(f"decoder class {cls} is not available (only {_STRING_DECODER})")
    return string_parser


def _coordinator_parser(decode: Any, topic: str) -> Parser:
    def parse(offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
        if key is None:
            raise DumpError(
                f"Failed to decode message at offset {offset} using {topic} decoder "
                "(message had a missing key)"
            )
        try:
            key_text, value_text = decode(key, value)
        except coordinator_json.UnknownRecordTypeError as e:
            return f"Unknown record type {e.record_type} at offset {offset}, skipping.", None
        except _DECODE_ERRORS as e:
            return f"Error at offset {offset}, skipping. {e}", None
        return key_text, value_text

    return parse


def run(args: argparse.Namespace) -> int:
    decoding = bool(
        args.offsets_decoder
        or args.transaction_log_decoder
        or args.value_decoder_class
        or args.key_decoder_class
    )
    print_data = args.print_data_log or decoding
    options = LogDumpOptions(
        deep=args.deep_iteration or print_data,
        print_data=print_data,
        parser=_parser(args),
        skip_record_metadata=args.skip_record_metadata,
        max_bytes=args.max_bytes,
    )
    out = sys.stdout
    index_errors = IndexErrors()
    index_mode = IndexMode(args.index_sanity_check, args.verify_index_only)
    non_consecutive: dict[str, list[tuple[int, int]]] = {}
    try:
        for path in args.files.split(","):
            out.write(f"Dumping {path}\n")
            suffix = os.path.splitext(path)[1]
            try:
                if suffix == ".log":
                    # A bar for `dump-log ... > file`; on a terminal the lines show progress.
                    bar = Progress(0, os.path.basename(path), "bytes", enabled=output_redirected())
                    with bar as progress:
                        result = dump_log(path, out, options, progress)
                    if result.non_consecutive:
                        non_consecutive[str(Path(path).absolute())] = result.non_consecutive
                elif suffix == ".index":
                    dump_index(path, out, index_errors, index_mode)
                elif suffix == ".timeindex":
                    dump_time_index(path, out, index_errors, index_mode)
                elif suffix == ".snapshot":
                    _dump_producer_snapshot(path, out)
                elif suffix == ".txnindex":
                    _dump_txn_index(path, out)
                else:
                    print(f"Ignoring unknown file {path}", file=sys.stderr)
            except FileNotFoundError as e:
                raise CliError(f"{e.filename}: no such file") from e
            except (DumpError, *_DECODE_ERRORS) as e:
                raise CliError(str(e) if path in str(e) else f"{path}: {e}") from e
    finally:
        out.flush()
        _report(index_errors, non_consecutive, sys.stderr)
    return 0


def _report(
    index_errors: IndexErrors, non_consecutive: dict[str, list[tuple[int, int]]], err: TextIO
) -> None:
    lines = index_errors.lines()
    for name, pairs in non_consecutive.items():
        lines.append(f"Non-consecutive offsets in {name}")
        # Kafka prepends each pair to its list: the last found comes first.
        lines += [f"  {a} is followed by {b}" for a, b in reversed(pairs)]
    for line in lines:
        err.write(line + "\n")


def _dump_txn_index(path: str, out: TextIO) -> None:
    for txn in decode_entries(Path(path).read_bytes()):
        out.write(
            f"version: 0 producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
            f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}\n"
        )


def _dump_producer_snapshot(path: str, out: TextIO) -> None:
    """A producer state snapshot, one producer a line as Kafka's tool prints one;
    of a producer's retained batches, the last (Kafka's snapshots keep only it)."""
    try:
        producers = read_snapshot(Path(path).read_bytes())
    except (ValueError, struct.error) as e:
        # Kafka's tool reports a corrupt snapshot and goes on with the next file.
        print(f"Snapshot {path} is corrupt: {e}", file=sys.stderr)
        return
    for p in producers.values():
        first = (
            f"OptionalLong[{p.current_txn_first_offset}]"
            if p.current_txn_first_offset >= 0
            else "OptionalLong.empty"
        )
        line = (
            f"producerId: {p.producer_id} producerEpoch: {p.epoch} "
            f"coordinatorEpoch: {p.coordinator_epoch} currentTxnFirstOffset: {first} "
            f"lastTimestamp: {p.last_timestamp} "
        )
        if p.batches:
            b = p.batches[-1]
            line += (
                f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} "
                f"lastOffset: {b.last_offset} offsetDelta: {b.last_offset - b.first_offset} "
                f"timestamp: {b.timestamp}"
            )
        out.write(line + "\n")
