"""`moldau ui`: the web console for any Kafka-compatible cluster.

    moldau ui --bootstrap-server localhost:9092 [--command-config F] [--port 8080]

It prints where it serves and runs until SIGTERM or SIGINT, then stops cleanly."""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from moldau.cli.client_security import client_security
from moldau.cli.common import add_bootstrap_argument, add_command_config_argument, read_config_file
from moldau.cli.errors import CliError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "ui", help="serve the web console", description="Serve Moldau's web console."
    )
    add_bootstrap_argument(p)
    add_command_config_argument(p)
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080; 0: any free)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument(
        "--metrics-url",
        action="append",
        default=[],
        metavar="URL",
        help="a broker's Prometheus endpoint (repeatable), for bytes in/out per second",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port {args.port} is not a valid port")
    config = read_config_file(args.command_config, "--command-config")
    # A setting the console's own wire requests cannot honour is refused now, in
    # one line, rather than on every page later.
    client_security(config)
    try:
        asyncio.run(_serve(args, config))
    except OSError as e:
        raise CliError(f"cannot serve on {args.host}:{args.port}: {e.strerror or e}") from None
    return 0


async def _serve(args: argparse.Namespace, config: dict[str, str]) -> None:
    from moldau.ui.cluster import ClusterClient
    from moldau.ui.server import UiServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = UiServer(ClusterClient(args.bootstrap_server, config, args.metrics_url))
    try:
        port = await server.start(args.host, args.port)
        print(f"Moldau console at {url(args.host, port)} for {args.bootstrap_server}", flush=True)
        await stop.wait()
    finally:
        await server.stop()


def url(host: str, port: int) -> str:
    shown = "localhost" if host in ("", "0.0.0.0", "::") else host
    return f"http://{shown}:{port}/"
