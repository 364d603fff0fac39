"""The pipeline on a Spark standalone cluster: a master and two workers of one
core each as processes of their own, the tasks in their executors, the driver
in a process of its own (moldau.testing.spark_driver: this process already
drives the local session of the other Spark tests, and PySpark allows one).
Reads, a stream restarted from its checkpoint, the exactly-once sink, an executor
killed while its task writes, `moldau pipeline demo --master`, and the README's
spark-submit recipes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from packaging.requirements import Requirement

import moldau
from moldau.testing.jvm import spark_cluster_env, spark_submit_env
from moldau.testing.process import wait_for
from moldau.testing.spark_driver import SparkDriver
from moldau.testing.spark_standalone import SparkStandalone, command_line
from tests.integration.clients import confluent_produce, create_topic
from tests.spark.readme_recipes import Recipes, stop_group
from tests.spark.test_read import produce
from tests.spark.test_write import consume_all

pytestmark = pytest.mark.spark

JOBS = "tests.spark.standalone_jobs"
ROOT = Path(__file__).parents[2]


def python_path() -> str:
    """moldau and these tests' jobs, for the Python of the module's driver and of
    its executors (as --py-files would give them)."""
    return os.pathsep.join([str(Path(moldau.__file__).parents[1]), str(ROOT)])


def python_env() -> dict[str, str]:
    """A driver's environment: this interpreter, moldau and the jobs on its path."""
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": python_path(),
        "SPARK_LOCAL_IP": "127.0.0.1",
        **spark_submit_env(),
    }


TWO_CORES_AN_APP = {
    "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false -Dspark.deploy.defaultCores=2",
    **spark_cluster_env(),
}
#: Given to an application's executors (not to the workers: the README's
#: spark-submit recipes must find moldau where they put it, or fail).
EXECUTOR_PATH = "spark.executorEnv.PYTHONPATH"


class Driver:
    """The cluster, and the module's driver on it: started beside the workers,
    waited for on first use. The demo test stops it: the cluster is the demo's
    and then the spark-submit recipes'."""

    def __init__(self, cluster: SparkStandalone, log: Path) -> None:
        self.cluster, self.log = cluster, log
        self.driver: SparkDriver | None = None
        self.ready = False

    def begin(self) -> None:
        conf = {
            "spark.executor.memory": "512m",
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.session.timeZone": "UTC",
            EXECUTOR_PATH: python_path(),
        }
        driver = SparkDriver(self.cluster.url, conf, self.log, python_env())
        self.driver = driver.start(wait=False)

    def get(self) -> SparkDriver:
        assert self.driver is not None, "the driver was stopped"
        if not self.ready:
            self.driver.wait_ready()
            self.ready = True
        return self.driver

    def stop(self) -> None:
        if self.driver is not None:
            self.driver.stop()
            self.driver = None


@pytest.fixture(scope="module")
def drivers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driver]:
    base = tmp_path_factory.mktemp("spark-standalone")
    # Two cores a worker, and an application takes two of the four unless it asks
    # for more (one executor of one core on each worker): the README's two
    # spark-submit recipes run side by side.
    cluster = SparkStandalone(base, workers=2, cores=2, memory="2g", env=TWO_CORES_AN_APP)
    holder = Driver(cluster, base / "driver.log")
    try:
        # The driver's JVM starts while the workers' do.
        cluster.launch()
        holder.begin()
        cluster.wait_for_workers()
        yield holder
    finally:
        holder.stop()
        cluster.stop()


RECIPES_TEST = "test_the_readme_spark_submit_recipes_run_as_written"


@pytest.fixture(scope="module", autouse=True)
def recipes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Recipes | None]:
    """The README's recipes set up in the background from the module's start (the
    wheel's build takes seconds), when their test is to run."""
    if not any(item.name == RECIPES_TEST for item in request.session.items):
        yield None
        return
    made = Recipes(tmp_path_factory.mktemp("readme-recipes"))
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture(scope="module")
def cluster(drivers: Driver) -> SparkStandalone:
    return drivers.cluster


@pytest.fixture
def driver(drivers: Driver) -> SparkDriver:
    return drivers.get()


def keys(records: list[tuple[int, bytes | None, bytes | None, object]]) -> Counter[bytes | None]:
    return Counter(key for _, key, _, _ in records)


def test_a_batch_read_runs_in_the_executors_and_returns_what_was_produced(
    cluster: SparkStandalone, driver: SparkDriver, bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name, partitions=3)
    produce(bootstrap, topic_name, [(i % 3, b"k%d" % i, b"v%d" % i) for i in range(300)])
    got = driver.call(f"{JOBS}:batch_read", bootstrap=bootstrap, topic=topic_name)
    assert got["master"] == cluster.url
    assert sorted(tuple(r) for r in got["rows"]) == sorted(
        (i % 3, i // 3, f"k{i}", f"v{i}") for i in range(300)
    )
    # Every task ran in a Python worker under an executor of a worker, not in the driver.
    executors = set(cluster.executor_pids())
    assert len(executors) == 2, executors
    for chain in got["chains"]:
        assert executors & set(chain), chain
        assert driver.pid not in chain
    apps = cluster.status()["activeapps"]
    assert [a["name"] for a in apps] == ["moldau-spark-driver"]


def test_a_stream_restarted_from_its_checkpoint_reads_every_record_once(
    driver: SparkDriver, bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, [(i % 2, b"k", b"v") for i in range(100)])
    run = {"bootstrap": bootstrap, "topic": topic_name, "checkpoint": str(tmp_path / "cp")}
    first = driver.call(f"{JOBS}:stream_available_now", max_per_trigger=30, **run)
    assert sorted({b for b, _, _ in first}) == [0, 1, 2, 3]  # 30 + 30 + 30 + 10
    produce(bootstrap, topic_name, [(i % 2, b"k", b"v") for i in range(40)])
    second = driver.call(f"{JOBS}:stream_available_now", max_per_trigger=30, **run)
    assert min(b for b, _, _ in second) == 4  # the restart goes on from the checkpoint
    read = [(p, o) for _, p, o in first + second]
    assert sorted(read) == sorted((p, o) for p in (0, 1) for o in range(70))


def source_and_sink(bootstrap: str, topic_name: str) -> tuple[str, str]:
    """Two topics of two partitions, to copy from one to the other."""
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    for topic in (source, sink):
        create_topic(bootstrap, topic, partitions=2)
    return source, sink


def test_the_exactly_once_sink_writes_each_row_once(
    driver: SparkDriver, bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    source, sink = source_and_sink(bootstrap, topic_name)
    produce(bootstrap, source, [(i % 2, b"k%d" % i, b"v") for i in range(300)])
    batches = driver.call(
        f"{JOBS}:copy_available_now",
        bootstrap=bootstrap, source=source, sink=sink, checkpoint=str(tmp_path / "cp"),
    )  # fmt: skip
    assert batches == 2  # 200 + 100
    written = consume_all(bootstrap, sink, 2, 300, read_committed=True)
    assert keys(written) == Counter(b"k%d" % i for i in range(300))


class SinkWatch:
    """The sink's records as they land, read_uncommitted: what a batch's tasks
    wrote before the batch commits, counted by the source partition each key came
    from (k<i> is from partition i % 2, and a partition is one task's)."""

    def __init__(self, bootstrap: str, sink: str) -> None:
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"watch-{sink}",
             "enable.auto.commit": False, "isolation.level": "read_uncommitted"}
        )  # fmt: skip
        self.consumer.assign([TopicPartition(sink, p, 0) for p in (0, 1)])
        self.by_task = [0, 0]

    def poll(self) -> list[int]:
        for m in self.consumer.consume(1000, 0.05):
            if m.error() is None:
                self.by_task[int(m.key()[1:]) % 2] += 1
        return self.by_task

    def close(self) -> None:
        self.consumer.close()


#: Rows of the source, and of each task of a micro-batch.
TOTAL, PER_TASK = 6000, 1000
#: librdkafka settings (the client path honours them; the batch path sends a write
#: with them there).
ONE_RECORD_A_REQUEST = {
    "kafka.batch.num.messages": "1",
    "kafka.max.in.flight.requests.per.connection": "1",
}


def executor_pid(cluster: SparkStandalone, executor_id: str) -> int:
    [pid] = [
        pid for pid in cluster.executor_pids()
        if command_line(pid)[command_line(pid).index("--executor-id") + 1] == executor_id
    ]  # fmt: skip
    return pid


def kill_mid_write(
    cluster: SparkStandalone, driver: SparkDriver, bootstrap: str, source: str, sink: str,
    checkpoint: Path, exactly_once: bool,
) -> tuple[int, int]:  # fmt: skip
    """Copies TOTAL rows and SIGKILLs the executor of a task that has written some
    but not all of its rows of a micro-batch to the sink; waits until the copy has
    read every row. Returns the executor's PID and the rows its task had written."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(TOTAL):
        producer.produce(source, b"v", b"k%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    copy = {"bootstrap": bootstrap, "source": source, "sink": sink}
    # PER_TASK rows a task, 2 ms each in the UDF. Spark hands them to the sink at the
    # task's end; each goes to the broker in a request of its own, one at a time, so
    # that writing them takes a while.
    driver.call(
        f"{JOBS}:start_copy", checkpoint=str(checkpoint), slow_ms=2, per_trigger=2 * PER_TASK,
        exactly_once=exactly_once, sink_options=ONE_RECORD_A_REQUEST, **copy,
    )  # fmt: skip
    watch = SinkWatch(bootstrap, sink)
    target: tuple[str, int] | None = None
    try:

        def mid_write() -> bool:
            nonlocal target
            by_task = list(watch.poll())
            # Read after the sink: a batch that ended meanwhile is in `copied` already.
            running, copied = driver.call(f"{JOBS}:copy_progress", source=source)
            for task, executor in running.items():
                written = by_task[int(task)] - copied // 2
                if 50 <= written < PER_TASK:
                    target = (executor, written)
                    return True
            return False

        assert wait_for(mid_write, 90, 0)
        assert target is not None
        killed = executor_pid(cluster, target[0])
        os.kill(killed, signal.SIGKILL)
        assert wait_for(
            lambda: driver.call(f"{JOBS}:rows_copied", source=source) == TOTAL, 90, 0.5
        ), driver.call(f"{JOBS}:rows_copied", source=source)
    finally:
        watch.close()
        error = driver.call(f"{JOBS}:stop_copy", source=source)
    assert error is None, error
    return killed, target[1]


def test_an_executor_killed_mid_write_loses_and_repeats_nothing(
    cluster: SparkStandalone,
    drivers: Driver,
    driver: SparkDriver,
    bootstrap: str,
    topic_name: str,
    tmp_path: Path,
) -> None:
    """SIGKILL to an executor while its task writes a micro-batch to the
    exactly-once sink: rows of the batch are in the sink's log, in the task's open
    transaction. Spark runs the task again on the other executor, whose attempt
    fences the lost one and aborts what it wrote; read read_committed, the sink
    holds every record once. (The plain sink, in the same run, holds the rows the
    lost task wrote twice.)"""
    source, sink = source_and_sink(bootstrap, topic_name)
    before = set(cluster.executor_pids())
    killed, written = kill_mid_write(
        cluster, driver, bootstrap, source, sink, tmp_path / "cp", exactly_once=True
    )
    assert 50 <= written < PER_TASK
    # Spark saw the task lost with its executor, and ran it again.
    assert "ExecutorLostFailure" in drivers.log.read_text(errors="replace")
    assert killed in before and killed not in cluster.executor_pids()
    records = consume_all(bootstrap, sink, 2, TOTAL, read_committed=True)
    assert keys(records) == Counter(b"k%d" % i for i in range(TOTAL))


def test_the_demo_runs_on_the_cluster_with_master(
    cluster: SparkStandalone, drivers: Driver, bootstrap: str, tmp_path: Path
) -> None:
    # The module's application is done with: the demo's has the cluster to itself.
    drivers.stop()
    done = subprocess.run(
        [sys.executable, "-m", "moldau", "pipeline", "demo", "--master", cluster.url,
         "--bootstrap-server", bootstrap, "--events", "1000"],
        check=False, capture_output=True, text=True, timeout=300,
        env={**os.environ, **python_env(), "TMPDIR": str(tmp_path),
             "PYSPARK_SUBMIT_ARGS": f"--conf {EXECUTOR_PATH}={python_path()} pyspark-shell"},
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert f"starting Spark ({cluster.url}) ..." in out
    assert "match: " in out, out
    finished = cluster.status()["completedapps"]
    assert "moldau-pipeline-demo" in [a["name"] for a in finished]


@pytest.mark.timeout(300)  # two applications from their start, then the module's
def test_the_readme_spark_submit_recipes_run_as_written(
    cluster: SparkStandalone, drivers: Driver, recipes: Recipes | None, bootstrap: str
) -> None:
    """Both recipes: a wheel installed in a venv, and --py-files with a Python that
    has the dependencies the README lists (and no moldau)."""
    assert recipes is not None
    # The dependencies the README lists are moldau's pins.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {r.split("==")[0]: r for r in project["dependencies"]}
    pins |= {r.split("==")[0]: r for r in project["optional-dependencies"]["spark"]}
    assert {pins[Requirement(r).name] for r in recipes.recipes[1].packages} == set(
        recipes.recipes[1].packages
    )
    drivers.stop()  # (if the demo's test did not): its application holds two cores
    create_topic(bootstrap, "orders", partitions=3)
    create_topic(bootstrap, "orders-upper", partitions=1)
    confluent_produce(bootstrap, "orders", [(b"k1", b"hello", []), (b"k2", b"world", [])])
    submits = recipes.submit(cluster.url, bootstrap)
    try:
        for i, proc in enumerate(submits):
            code = proc.wait(240)
            log = (recipes.root / f"submit-{i}.log").read_text(errors="replace")
            errors = [line for line in log.splitlines() if "Error" in line or "Exception:" in line]
            assert code == 0, "\n".join(errors[-5:]) or log[-3000:]
    finally:
        for proc in submits:
            stop_group(proc)
    # Neither venv has moldau but by the recipe: the wheel's in one, none in the other.
    installed, shipped = recipes.recipes[0].venvs[0], recipes.recipes[1].venvs[0]
    where = subprocess.run(
        [installed / "bin" / "python", "-c", "import moldau; print(moldau.__file__)"],
        capture_output=True, text=True, env=recipes.env, check=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(installed)), where
    lacking = subprocess.run(
        [shipped / "bin" / "python", "-c", "import moldau"],
        capture_output=True, env=recipes.env, check=False,
    )  # fmt: skip
    assert lacking.returncode != 0
    finished = [a["name"] for a in cluster.status()["completedapps"]]
    assert finished.count("orders-job") == 2, finished
    written = consume_all(bootstrap, "orders-upper", 1, 4)
    assert Counter((key, value) for _, key, value, _ in written) == {
        (b"k1", b"HELLO"): 2,
        (b"k2", b"WORLD"): 2,
    }
