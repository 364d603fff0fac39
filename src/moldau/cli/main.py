"""The `moldau` command. Flags follow Kafka's tools so a Kafka user's habits work.

A user mistake prints one clear line and exits non-zero; no traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from moldau.cli.errors import CliError


def build_parser() -> argparse.ArgumentParser:
    from moldau import __version__
    from moldau.cli import serve

    parser = argparse.ArgumentParser(
        prog="moldau", description="Moldau: a Kafka-compatible streaming platform in Python."
    )
    parser.add_argument(
        "--version", action="version", version=f"moldau {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.add_parser(sub)
    for name in (
        "topics",
        "produce",
        "consume",
        "groups",
        "leader-election",
        "reassign-partitions",
        "transactions",
        "configs",
        "pipeline",
        "acls",
        "get-offsets",
        "delete-records",
        "log-dirs",
        "broker-api-versions",
        "ui",
        "dump-log",
        "perf",
    ):
        module = _tool(name)
        if module is not None:
            module.add_parser(sub)
    return parser


def _tool(name: str) -> Any:
    import importlib

    try:
        module = name.replace("-", "_")
        return importlib.import_module(f"moldau.cli.{module}")
    except ModuleNotFoundError as e:
        if e.name == f"moldau.cli.{module}":
            return None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
        sys.stdout.flush()  # here, so that a closed pipe is answered below, not at exit
    except CliError as e:
        print(f"moldau {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`moldau ... | head`): stop quietly, as a shell tool does.
        # Python would report the pipe again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
    return code


if __name__ == "__main__":
    sys.exit(main())
