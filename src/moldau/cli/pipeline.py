"""`moldau pipeline demo`: the data pipeline, end to end, with one command.

It writes orders (keys, JSON values, event times, some late) into a topic, runs a
Spark Structured Streaming job that reads them through the "moldau" data source and
totals them per product and event-time minute with a watermark, writes the totals
to a compacted topic and to Parquet, and checks both against the same sums done in
plain Python. With no --bootstrap-server it starts a broker of its own. Against a
secured cluster, --command-config gives its admin, producer and consumers and the
Spark job's `kafka.*` options the same client settings (librdkafka names).

A run keeps what it needs to go on in its work directory (`demo.json`: its topics,
group and orders; Spark's checkpoint; its broker's data): stopped part-way
(`--stop-after-batches`, Ctrl-C, a failure), the same command with `--work-dir`
resumes it from the checkpoint. A run that ends with matching totals removes its
topics, group and work directory, unless told to keep them (`--keep`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.cli.common import (
    BrokerWatch,
    add_command_config_argument,
    client_config,
    error_text,
    fetch_metadata,
    kafka_error,
    make_client,
    read_config_file,
    wait_result,
)
from moldau.cli.errors import CliError

DEFAULT_EVENTS = 20_000
#: Two cores of this machine; --master runs the job elsewhere.
DEFAULT_MASTER = "local[2]"
#: The run's record in its work directory.
STATE_FILE = "demo.json"
#: What a run makes in its work directory, besides STATE_FILE.
CHECKPOINT, PARQUET, BROKER_DATA = "checkpoint", "totals.parquet", "broker-data"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "pipeline",
        help="run the Spark data pipeline demo",
        description="Run Moldau's data pipeline on Spark (needs moldau[spark] and Java 17+).",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    demo = actions.add_parser(
        "demo",
        help="orders -> Spark Structured Streaming -> totals in a topic and Parquet, checked",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    demo.add_argument(
        "--bootstrap-server",
        dest="bootstrap_server",
        metavar="HOST:PORT",
        help="the broker(s) to use (default: start one for the demo)",
    )
    add_command_config_argument(demo)
    demo.add_argument("--events", type=int, help=f"orders to generate (default {DEFAULT_EVENTS:,})")
    demo.add_argument(
        "--work-dir",
        type=Path,
        help="where the checkpoint, the Parquet output and the run's record go (default: a "
        "new temporary directory); a directory of a run stopped part-way resumes it",
    )
    demo.add_argument(
        "--stop-after-batches",
        type=int,
        metavar="N",
        help="stop the streaming job after N micro-batches, as an operator would mid-run; "
        "the same command with --work-dir resumes it",
    )
    demo.add_argument(
        "--master",
        default=DEFAULT_MASTER,
        metavar="MASTER_URL",
        help=f"the Spark master to run the job on, as spark-submit takes it, e.g. "
        f"spark://HOST:7077 for a standalone cluster (default {DEFAULT_MASTER}); its "
        "executors need Python with moldau, pyspark, confluent-kafka and pyarrow, and must "
        "reach the broker, the checkpoint and the Parquet directory (--work-dir)",
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the topics, the consumer group and the work directory at the end",
    )
    demo.set_defaults(run=run)


def _say(line: str) -> None:
    print(line, flush=True)


@dataclass
class DemoRun:
    """A run's record (`<work-dir>/demo.json`): enough to resume it and to check
    its totals, and to remove what it made."""

    orders_topic: str
    totals_topic: str
    events: int
    seed: int
    #: When the orders were made: with the seed, the same orders again.
    now_ms: int
    #: The broker given with --bootstrap-server; None: the demo's own, whose data
    #: is in the work directory.
    bootstrap: str | None
    #: Whether the demo made the work directory (then it removes all of it).
    made_work_dir: bool
    orders_written: bool = False

    @property
    def group(self) -> str:
        return f"{self.orders_topic}-pipeline"

    @property
    def writes_topic(self) -> str:
        """Where the exactly-once sink of the totals keeps its bookkeeping offsets."""
        return f"{self.totals_topic}-writes"

    def is_sink_group(self, group_id: str) -> bool:
        """A bookkeeping group of the totals sink (moldau.spark.exactly_once)."""
        return group_id.startswith("moldau-spark-") and f"-{self.totals_topic}-" in group_id

    @staticmethod
    def new(events: int, bootstrap: str | None, made_work_dir: bool) -> DemoRun:
        run_id = uuid.uuid4().hex[:6]
        return DemoRun(
            f"orders-{run_id}", f"order-totals-{run_id}", events, 7,
            int(time.time() * 1000), bootstrap, made_work_dir,
        )  # fmt: skip

    def save(self, work: Path) -> None:
        tmp = work / f"{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(work / STATE_FILE)

    @staticmethod
    def load(work: Path) -> DemoRun:
        path = work / STATE_FILE
        try:
            return DemoRun(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as e:
            raise CliError(f"cannot read {path}: {e}") from None


def _resume_command(work: Path) -> str:
    return f"moldau pipeline demo --work-dir {work}"


#: Client settings (librdkafka names) from --command-config: security.protocol, sasl.*, ssl.*.
Settings = Mapping[str, str]


def _admin(bootstrap: str, settings: Settings) -> tuple[AdminClient, BrokerWatch]:
    """An AdminClient that fails at once on an unreachable broker, its log quiet."""
    watch = BrokerWatch(bootstrap)
    return make_client(AdminClient, client_config(bootstrap, watch, settings)), watch


def _create_topics(bootstrap: str, run: DemoRun, settings: Settings) -> None:
    admin, watch = _admin(bootstrap, settings)
    futures = admin.create_topics(
        [
            NewTopic(run.orders_topic, 3, -1),
            NewTopic(run.totals_topic, 1, -1, config={"cleanup.policy": "compact"}),
            NewTopic(run.writes_topic, 1, -1, config={"cleanup.policy": "compact"}),
        ]
    )
    for topic, future in futures.items():
        try:
            wait_result(admin, watch, future, f"topic {topic} to be created")
        except KafkaException as e:
            err = kafka_error(e)
            raise CliError(
                f"cannot create topic {topic}: {error_text(err) if err else e}"
            ) from None


def _check_topics(bootstrap: str, run: DemoRun, work: Path, settings: Settings) -> None:
    admin, watch = _admin(bootstrap, settings)
    topics = fetch_metadata(admin, watch).topics
    for topic in (run.orders_topic, run.totals_topic):
        if topic not in topics:
            raise CliError(
                f"topic {topic} of the run in {work} is not on {bootstrap} (deleted, or "
                "another cluster): it cannot be resumed; start afresh with another --work-dir"
            )


def _remove_from_broker(bootstrap: str, run: DemoRun, settings: Settings) -> None:
    """Delete the run's topics and consumer groups, where they are."""
    admin, watch = _admin(bootstrap, settings)
    gone = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.GROUP_ID_NOT_FOUND)
    listed = wait_result(admin, watch, admin.list_consumer_groups(), "the groups to be listed")
    groups = [run.group, *(g.group_id for g in listed.valid if run.is_sink_group(g.group_id))]
    futures = {
        **admin.delete_topics([run.orders_topic, run.totals_topic, run.writes_topic]),
        **admin.delete_consumer_groups(groups),
    }
    for name, future in futures.items():
        try:
            wait_result(admin, watch, future, f"{name} to be deleted")
        except KafkaException as e:
            err = kafka_error(e)
            if err is None or err.code() not in gone:
                raise CliError(f"cannot delete {name}: {error_text(err) if err else e}") from None


def _remove_work(work: Path, run: DemoRun) -> None:
    if run.made_work_dir:
        shutil.rmtree(work, ignore_errors=True)
        return
    for name in (CHECKPOINT, PARQUET, BROKER_DATA):
        shutil.rmtree(work / name, ignore_errors=True)
    for name in (STATE_FILE, f"{BROKER_DATA}.log"):
        (work / name).unlink(missing_ok=True)


def _start_or_resume(args: argparse.Namespace) -> tuple[Path, DemoRun, bool]:
    """The work directory, the run's record, and whether it resumes a run."""
    work: Path | None = args.work_dir
    if work is not None and (work / STATE_FILE).exists():
        run = DemoRun.load(work)
        if args.events is not None and args.events != run.events:
            raise CliError(
                f"the run in {work} is of {run.events:,} orders: resume it without --events, "
                "or use another --work-dir"
            )
        if run.bootstrap is None and args.bootstrap_server is not None:
            raise CliError(
                f"the run in {work} ran on a broker of its own ({work / BROKER_DATA}): "
                "resume it without --bootstrap-server"
            )
        if args.bootstrap_server is not None:
            run.bootstrap = args.bootstrap_server
        return work, run, True
    events = DEFAULT_EVENTS if args.events is None else args.events
    if work is None:
        work = Path(tempfile.mkdtemp(prefix="moldau-pipeline-"))
        made = True
    else:
        if (work / CHECKPOINT).exists():
            raise CliError(
                f"{work / CHECKPOINT} is not a checkpoint this demo can resume (no "
                f"{work / STATE_FILE}): remove it, or use another --work-dir"
            )
        made = not work.exists()
        work.mkdir(parents=True, exist_ok=True)
    return work, DemoRun.new(events, args.bootstrap_server, made), False


@contextmanager
def _broker(work: Path, run: DemoRun) -> Iterator[str]:
    """The broker the run uses: the one given, or its own, started on the data of
    the work directory (so a resumed run finds its topics)."""
    if run.bootstrap is not None:
        yield run.bootstrap
        return
    from moldau.testing.process import BrokerProcess

    broker = BrokerProcess(work / BROKER_DATA)
    try:
        broker.start()
    except RuntimeError:
        raise CliError(f"the demo's broker did not start; see {broker.log_path}") from None
    _say(f"started a broker at {broker.bootstrap} (data in {work / BROKER_DATA})")
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def run(args: argparse.Namespace) -> int:
    try:
        from pyspark.sql import SparkSession  # noqa: F401 (only whether it is there)
    except ImportError:
        raise CliError(
            "needs pyspark: pip install 'moldau[spark]' (and Java 17 or newer)"
        ) from None
    if args.events is not None and args.events <= 0:
        raise CliError("--events must be positive")
    if args.stop_after_batches is not None and args.stop_after_batches <= 0:
        raise CliError("--stop-after-batches must be positive")
    # Not kept in the run's record (it may hold a password): a resumed run is given it again.
    settings = read_config_file(args.command_config, "--command-config")
    work, state, resuming = _start_or_resume(args)
    recorded = resuming
    try:
        if settings and state.bootstrap is None:
            raise CliError(
                "--command-config is for a secured cluster given with --bootstrap-server; "
                "the demo's own broker listens on PLAINTEXT"
            )
        with _broker(work, state) as bootstrap:
            if resuming and not state.orders_written:
                _say(f"the run in {work} stopped while writing its orders: writing them again")
                _remove_from_broker(bootstrap, state, settings)
                state = DemoRun.new(state.events, state.bootstrap, state.made_work_dir)
                resuming = False
            if resuming:
                _check_topics(bootstrap, state, work, settings)
                _say(
                    f"resuming the run in {work}: {state.events:,} orders in "
                    f"{state.orders_topic}, from its checkpoint"
                )
            else:
                _create_topics(bootstrap, state, settings)
                state.save(work)
                recorded = True
                _write_orders(bootstrap, state, settings)
                state.orders_written = True
                state.save(work)
            outcome = _stream_and_check(args, work, state, bootstrap, settings)
    except BaseException:
        # Stopped by Ctrl-C or a failure: what is recorded can be resumed; a work
        # directory the demo made for nothing goes.
        if recorded:
            _say(f"the run is kept in {work}; resume it with: {_resume_command(work)}")
        elif state.made_work_dir:
            shutil.rmtree(work, ignore_errors=True)
        raise
    if outcome == "stopped":
        _say(f"stopped after {args.stop_after_batches} batches, as asked; resume with: "
             f"{_resume_command(work)}")  # fmt: skip
    elif outcome == "mismatch" or args.keep:
        _say(
            f"kept {work}, topics {state.orders_topic}, {state.totals_topic} and "
            f"{state.writes_topic}, group {state.group}"
        )
    else:
        if state.bootstrap is not None:
            _remove_from_broker(state.bootstrap, state, settings)
        _remove_work(work, state)
        where = work if state.made_work_dir else f"the run's files in {work}"
        _say(
            f"removed topics {state.orders_topic}, {state.totals_topic} and "
            f"{state.writes_topic}, group {state.group}, the sink's bookkeeping groups "
            f"and {where} (--keep keeps them)"
        )
    return 1 if outcome == "mismatch" else 0


def _write_orders(bootstrap: str, run: DemoRun, settings: Settings) -> None:
    from moldau.spark import pipeline as demo

    orders = demo.make_orders(run.events, run.seed, now_ms=run.now_ms)
    try:
        demo.send_orders(bootstrap, run.orders_topic, orders, settings)
    except RuntimeError as e:
        raise CliError(f"cannot write the orders to {run.orders_topic}: {e}") from None
    late = sum(1 for a, b in itertools.pairwise(orders) if b.event_time_ms < a.event_time_ms)
    _say(f"wrote {len(orders):,} orders ({late:,} late) to {run.orders_topic}")


def _stream_and_check(
    args: argparse.Namespace, work: Path, run: DemoRun, bootstrap: str, settings: Settings
) -> str:
    """Runs the streaming job and checks its totals: "match", "mismatch", or
    "stopped" (after --stop-after-batches)."""
    from moldau.spark import pipeline as demo
    from moldau.spark import session_builder

    if args.master.startswith("local"):
        # Loopback is enough for a local job; a cluster's executors must reach the driver.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    _say(f"starting Spark ({args.master}) ...")
    spark = (
        session_builder()
        .master(args.master)
        .appName("moldau-pipeline-demo")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        parquet = str(work / PARQUET)
        started = time.monotonic()
        sink = demo.TotalsWriter(bootstrap, run.totals_topic, parquet, settings)
        query = demo.start_job(
            spark,
            bootstrap,
            run.orders_topic,
            str(work / CHECKPOINT),
            max_per_trigger=max(1_000, run.events // 4),
            sink=sink,
            client=settings,
        )
        try:
            stopped = demo.watch(query, sink, _say, stop_after_batches=args.stop_after_batches)
        except demo.JobFailed as e:
            raise CliError(f"the streaming job failed: {e}") from None
        _say(f"streaming job {'stopped' if stopped else 'done'} after "
             f"{time.monotonic() - started:.1f} s")  # fmt: skip
        if stopped:
            return "stopped"
        expected = demo.expected_totals(demo.make_orders(run.events, run.seed, now_ms=run.now_ms))
        outputs = {
            f"topic {run.totals_topic}": demo.totals_from_topic(
                spark, bootstrap, run.totals_topic, settings
            ),
            f"Parquet {parquet}": demo.totals_from_parquet(spark, parquet),
        }
        problems = [
            f"{where}: {line}"
            for where, got in outputs.items()
            for line in demo.differences(expected, got)
        ]
    finally:
        spark.stop()
    if problems:
        for line in problems[:20]:
            _say(line)
        _say(f"MISMATCH: {len(problems)} totals differ from plain Python's")
        return "mismatch"
    _say(
        f"match: {len(expected)} totals (product x minute) in {run.totals_topic} and in "
        f"{parquet} equal plain Python's over all {run.events:,} orders"
    )
    return "match"
