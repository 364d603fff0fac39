"""`moldau serve`: run a broker (embedded metadata store by default)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import resource
import signal
from pathlib import Path
from typing import Any

from moldau.cli.errors import CliError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

#: The broker properties each convenience flag sets: giving both the flag and an
#: --override of one of them is a contradiction, refused rather than resolved.
_FLAG_PROPERTIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "port": ("--port", ("listeners",)),
    "host": ("--host", ("listeners",)),
    "data_dir": ("--data-dir", ("log.dirs", "log.dir")),
    "metrics_port": ("--metrics-port", ("metrics.port",)),
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="run a broker", description="Run a Moldau broker.")
    p.add_argument("--port", type=int, help="port of the PLAINTEXT listener (default 9092)")
    p.add_argument("--host", help="host the listener binds and advertises (default localhost)")
    p.add_argument("--data-dir", type=Path, help="where logs and metadata live (default ./data)")
    p.add_argument("--config", type=Path, help="a Kafka server.properties file")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a broker property (repeatable), as kafka-server-start's --override",
    )
    p.add_argument(
        "--brokers",
        type=int,
        default=1,
        metavar="N",
        help="run brokers 1..N in this process, broker i on each listener's port + i - 1 "
        "(0 stays ephemeral), each logging under DATA_DIR/broker-<id>, replicating over "
        "sockets (embedded store only)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (metrics.port); "
        "with --brokers N, brokers take PORT..PORT+N-1",
    )
    p.add_argument(
        "--ui-port",
        type=int,
        metavar="PORT",
        help="also serve the web console on this port (0: any free port), as `moldau ui` "
        "would for these brokers",
    )
    p.add_argument(
        "--ui-host", default="127.0.0.1", help="address the console binds (default 127.0.0.1)"
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=LOG_LEVELS,
        metavar="LEVEL",
        help=f"what the broker logs on stderr: {', '.join(LOG_LEVELS)} (default INFO)",
    )
    p.set_defaults(run=run)


def broker_properties(args: argparse.Namespace) -> dict[str, str]:
    """Properties from --config, then --override, then the convenience flags."""
    from moldau.config.broker import read_properties

    props: dict[str, str] = {}
    if args.config is not None:
        if not args.config.is_file():
            raise CliError(f"config file {args.config} does not exist")
        props.update(read_properties(args.config))
    overrides: dict[str, str] = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--override expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    for dest, (flag, keys) in _FLAG_PROPERTIES.items():
        value = getattr(args, dest)
        for key in keys:
            if value is not None and key in overrides and not _agrees(dest, value, overrides[key]):
                raise CliError(
                    f"{flag} {value} and --override {key}={overrides[key]} both set {key}: "
                    "give only one of them"
                )
    props.update(overrides)
    if args.port is not None or args.host is not None or "listeners" not in props:
        # A flag changes only its part of the configured listener: --port on a
        # config that listens on 0.0.0.0 still listens on 0.0.0.0.
        name, conf_host, conf_port = _listener_parts(props.get("listeners", ""))
        host = args.host if args.host is not None else conf_host
        port = args.port if args.port is not None else conf_port
        if not 0 <= port <= 65535:
            raise CliError(f"--port {port} is not a valid port")
        # Listeners after the first (a SASL one, say) stay as configured.
        others = [x.strip() for x in props.get("listeners", "").split(",")[1:] if x.strip()]
        props["listeners"] = ",".join([f"{name}://{host}:{port}", *others])
    if args.metrics_port is not None:
        if not 0 <= args.metrics_port <= 65535:
            raise CliError(f"--metrics-port {args.metrics_port} is not a valid port")
        props["metrics.port"] = str(args.metrics_port)
    if args.data_dir is not None:
        props["log.dirs"] = str(args.data_dir)
    elif "log.dirs" not in props and "log.dir" not in props:
        props["log.dirs"] = "./data"
    return props


def _agrees(dest: str, value: object, listeners: str) -> bool:
    """--port/--host say what an overridden `listeners` says of its first listener
    (a test broker's extra listeners come by --override with the flags' values)."""
    if "://" not in listeners:
        return False
    _, host, port = _listener_parts(listeners)
    return (port if dest == "port" else host) == value


def _listener_parts(listeners: str) -> tuple[str, str, int]:
    """(name, host, port) of a one-listener `listeners` value; Moldau's defaults for
    what it leaves out (PLAINTEXT, localhost, 9092)."""
    first = listeners.partition(",")[0].strip()
    name, sep, address = first.partition("://")
    if not sep:
        return "PLAINTEXT", "localhost", 9092
    host, _, port_text = address.rpartition(":")
    port = int(port_text) if port_text.isdigit() else 9092
    return name or "PLAINTEXT", host, port  # an empty host listens on every interface


def cluster_properties(props: dict[str, str], brokers: int) -> list[dict[str, str]]:
    """Each broker's properties for `--brokers N`: ids 1..N, a log dir each under
    the data dir (which then holds only those and the metadata store), and each
    listener's port (and advertised port, and metrics.port) plus i - 1 for broker i,
    0 staying ephemeral."""
    if brokers < 1:
        raise CliError(f"--brokers must be 1 or more, got {brokers}")
    data_dir = Path(props.get("log.dirs") or props.get("log.dir") or "./data")
    if brokers == 1:
        if (data_dir / "broker-1" / "meta.properties").exists():
            raise CliError(
                f"{data_dir} holds the data of a --brokers cluster (broker-1, ...); "
                "run with --brokers N, or use another --data-dir"
            )
        if "broker.id" not in props and "node.id" not in props:
            props["broker.id"] = "1"
        return [props]
    for key, why in [
        ("zookeeper.connect", "they share the embedded metadata store"),
        ("broker.id", "they take ids 1..N"),
        ("node.id", "they take ids 1..N"),
    ]:
        if props.get(key):
            raise CliError(f"--brokers {brokers} cannot be used with {key}: {why}")
    if "," in data_dir.as_posix():
        raise CliError(f"--brokers {brokers} takes one data dir")
    if (data_dir / "meta.properties").exists():
        raise CliError(
            f"{data_dir} holds the data of a single broker; use another --data-dir "
            f"for --brokers {brokers}"
        )
    listeners = _split_listeners(props["listeners"])
    advertised = _split_listeners(props.get("advertised.listeners", ""))
    metrics_text = props.get("metrics.port", "").strip()
    metrics = int(metrics_text) if metrics_text.isdigit() else None
    _check_port_ranges(listeners, metrics, brokers)
    out = []
    for i in range(1, brokers + 1):
        p = dict(props)
        p.pop("log.dir", None)
        p["broker.id"] = str(i)
        # Kafka's 3, or all of them if fewer (a lone embedded broker's default is 1).
        p.setdefault("offsets.topic.replication.factor", str(min(3, brokers)))
        p["log.dirs"] = str(data_dir / f"broker-{i}")
        p["listeners"] = _shifted(listeners, i - 1)
        if advertised:
            p["advertised.listeners"] = _shifted(advertised, i - 1)
        if metrics is not None:
            p["metrics.port"] = str(metrics + i - 1 if metrics else 0)
        out.append(p)
    return out


# A listener as `moldau serve` shifts it: (name, host, port).
_Entry = tuple[str, str, int]
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})


def _split_listeners(value: str) -> list[_Entry]:
    out = []
    for item in value.split(","):
        if not item.strip():
            continue
        name, sep, address = item.strip().partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise CliError(f"listener {item.strip()!r} is not NAME://host:port")
        out.append((name, host, int(port)))
    return out


def _shifted(listeners: list[_Entry], offset: int) -> str:
    return ",".join(
        f"{name}://{host}:{port + offset if port else 0}" for name, host, port in listeners
    )


def _check_port_ranges(listeners: list[_Entry], metrics: int | None, brokers: int) -> None:
    """Every port range a listener (or metrics.port) takes is valid and meets no
    other on an address both may bind: else two brokers would want one port."""
    ranges = [(f"listener {name}", host, port) for name, host, port in listeners if port]
    if metrics:
        ranges.append(("metrics.port", "", metrics))  # its host: assume it may meet any
    for what, _, first in ranges:
        if first + brokers - 1 > 65535:
            raise CliError(f"{what}: ports {first}..{first + brokers - 1} are not all valid ports")
    for a, (what_a, host_a, first_a) in enumerate(ranges):
        for what_b, host_b, first_b in ranges[a + 1 :]:
            same_address = host_a == host_b or host_a in _WILDCARDS or host_b in _WILDCARDS
            if same_address and abs(first_a - first_b) < brokers:
                raise CliError(
                    f"--brokers {brokers}: {what_a} takes ports {first_a}..{first_a + brokers - 1}"
                    f" and {what_b} {first_b}..{first_b + brokers - 1}; they overlap: space "
                    f"their ports at least {brokers} apart"
                )


def raise_open_files_limit() -> None:
    """Take the hard limit on open files as the soft one: every segment of every
    partition holds its log file open (and its index files once written), so
    thousands of partitions need more than the usual soft limit of 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    logging.getLogger("moldau").info("open files limit: %s", soft)


def run(args: argparse.Namespace) -> int:
    from moldau.config.broker import BrokerConfig
    from moldau.metadata.store import StoreError
    from moldau.protocol.errors import KafkaError
    from moldau.server.event_loop import loop_factory

    if args.ui_port is not None and not 0 <= args.ui_port <= 65535:
        raise CliError(f"--ui-port {args.ui_port} is not a valid port")
    logging.basicConfig(
        level=args.log_level,
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
    )
    raise_open_files_limit()
    try:
        props = broker_properties(args)
        configs = [BrokerConfig(p) for p in cluster_properties(props, args.brokers)]
        with asyncio.Runner(loop_factory=loop_factory(configs[0]["event.loop"])) as runner:
            ui = (args.ui_host, args.ui_port) if args.ui_port is not None else None
            return runner.run(_serve(configs, ui))
    except (KafkaError, StoreError) as e:
        raise CliError(str(e)) from None
    except OSError as e:
        raise CliError(str(e)) from None


async def _serve(configs: list[Any], ui_address: tuple[str, int] | None = None) -> int:
    from moldau.server.embedded import METADATA_DIR, EmbeddedCluster
    from moldau.server.zookeeper_mode import ZooKeeperModeServer

    cluster: EmbeddedCluster | ZooKeeperModeServer
    config = configs[0]
    if config["zookeeper.connect"]:
        cluster = ZooKeeperModeServer(config)
    elif len(configs) == 1:
        cluster = EmbeddedCluster(configs, config.log_dirs[0] / METADATA_DIR)
    else:
        cluster = EmbeddedCluster(configs, config.log_dirs[0].parent / METADATA_DIR)
    ui: Any = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # SIGUSR1 logs what every task is waiting for (as jstack does for Kafka).
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
    try:
        if not await _start_unless_stopped(cluster, stop):
            logging.getLogger("moldau").warning("stopped before start-up finished")
            return 0
        for b in cluster.brokers:
            where = ", ".join(f"{ep.host}:{ep.port}" for ep in b.advertised_endpoints())
            # Before the line that says it is up (BrokerProcess waits for that one).
            if len(b.servers) > 1 or b.servers[0].security_protocol != "PLAINTEXT":
                for s in b.servers:
                    print(
                        f"Moldau broker {b.broker_id} listener {s.listener_name} "
                        f"({s.security_protocol}) on {s.host or '0.0.0.0'}:{s.port}",
                        flush=True,
                    )
            print(
                f"Moldau broker {b.broker_id} listening on {where} "
                f"(cluster {b.cluster_id}, data in {', '.join(map(str, b.config.log_dirs))})",
                flush=True,
            )
            if b.metrics_server is not None:
                m = b.metrics_server
                print(
                    f"Moldau broker {b.broker_id} metrics at "
                    f"http://{m.host or 'localhost'}:{m.port}/metrics",
                    flush=True,
                )
        if ui_address is not None:
            ui = await _start_ui(cluster.brokers, *ui_address)
        failure = await _wait_for_stop(stop, cluster.brokers)
    finally:
        if ui is not None:
            await ui.stop()
        await cluster.shutdown()
    if failure is not None:
        raise CliError(failure)
    logging.getLogger("moldau").info("shut down cleanly")
    return 0


async def _start_unless_stopped(cluster: Any, stop: asyncio.Event) -> bool:
    """Start the cluster; False if a signal asked to stop first. A start can wait on
    ZooKeeper for as long as it takes (as Kafka's does), so a stop must not wait for
    it: the start is cancelled and the caller shuts down what it had started."""
    start = asyncio.ensure_future(cluster.start())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([start, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not start.done():
        start.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await start
        return False
    start.result()
    return True


async def _start_ui(brokers: list[Any], host: str, port: int) -> Any:
    """The console in this process and loop, a client of these brokers like any
    other (over loopback, the Kafka protocol), reading their metrics endpoints."""
    from moldau.cli.ui import url
    from moldau.ui.cluster import ClusterClient
    from moldau.ui.server import UiServer

    plain = [
        f"{s.host or '127.0.0.1'}:{s.port}"
        for b in brokers
        for s in b.servers
        if s.security_protocol == "PLAINTEXT"
    ]
    if not plain:
        raise CliError(
            "--ui-port needs a PLAINTEXT listener to connect to; for secured listeners "
            "only, run `moldau ui --bootstrap-server H:P --command-config F` beside the broker"
        )
    metrics = [
        f"http://{b.metrics_server.host or '127.0.0.1'}:{b.metrics_server.port}/metrics"
        for b in brokers
        if b.metrics_server is not None
    ]
    server = UiServer(ClusterClient(",".join(plain), metrics_urls=metrics))
    try:
        bound = await server.start(host, port)
    except BaseException:
        await server.stop()
        raise
    print(f"Moldau console at {url(host, bound)}", flush=True)
    return server


def _dump_tasks() -> None:
    import io

    out = io.StringIO()
    for task in asyncio.all_tasks():
        print(f"-- {task.get_name()}", file=out)
        task.print_stack(limit=12, file=out)
    logging.getLogger("moldau").warning("tasks:\n%s", out.getvalue())


async def _wait_for_stop(stop: asyncio.Event, brokers: list[Any]) -> str | None:
    """Until a signal asks to stop (None) or a broker must stop by itself, e.g.
    with every log directory failed (its reason)."""
    waits = [asyncio.ensure_future(stop.wait())]
    waits += [asyncio.ensure_future(b.failed.wait()) for b in brokers]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return next((b.failure for b in brokers if b.failure is not None), None)
