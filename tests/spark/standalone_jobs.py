"""The Spark jobs of test_standalone.py, run inside its driver process
(moldau.testing.spark_driver) on the standalone cluster: each takes the session
first and returns JSON. Executors import this module too (the UDFs and lambdas
are pickled by reference), from the PYTHONPATH the workers were started with."""

from __future__ import annotations

import os
import time
from typing import Any

from moldau.testing.spark_standalone import ancestors

#: Streams left running between calls, by name.
_QUERIES: dict[str, Any] = {}


def batch_read(spark: Any, bootstrap: str, topic: str) -> dict[str, Any]:
    df = (
        spark.read.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    rows = df.selectExpr("partition", "offset", "CAST(key AS STRING)", "CAST(value AS STRING)")
    # Each task's process and its ancestors, from the same read.
    chains = df.rdd.mapPartitions(lambda _: [[os.getpid(), *ancestors(os.getpid())]]).collect()
    return {
        "master": spark.sparkContext.master,
        "rows": [list(r) for r in rows.collect()],
        "chains": chains,
    }


def stream_available_now(
    spark: Any, bootstrap: str, topic: str, checkpoint: str, max_per_trigger: int
) -> list[list[Any]]:
    """Runs the stream from its checkpoint to the end of the topic (AvailableNow);
    returns [batch id, partition, offset] of every row its micro-batches held."""
    seen: list[list[Any]] = []

    def keep(df: Any, batch_id: int) -> None:
        seen.extend([batch_id, r[0], r[1]] for r in df.select("partition", "offset").collect())

    query = (
        spark.readStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_per_trigger))
        .load()
        .writeStream.foreachBatch(keep)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return seen


def _copy(
    spark: Any,
    bootstrap: str,
    source: str,
    sink: str,
    checkpoint: str,
    slow_ms: float,
    per_trigger: int = 200,
    exactly_once: bool = True,
    sink_options: dict[str, str] | None = None,
) -> Any:
    """The source topic into the sink topic, with the exactly-once sink or the
    plain one; each row takes `slow_ms` in its task, so that tasks are running
    when a test kills an executor."""
    from pyspark.sql.functions import udf

    @udf("binary")
    def slowly(value):  # type: ignore[no-untyped-def]  (hints would make it a pandas UDF)
        time.sleep(slow_ms / 1000)
        return value

    return (
        spark.readStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .load()
        .select("key", slowly("value").alias("value"))
        .writeStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", str(exactly_once).lower())
        .options(**(sink_options or {}))
        .option("checkpointLocation", checkpoint)
    )


def copy_available_now(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: str) -> int:
    """Copies what the source holds, then stops; returns the batches run."""
    query = _copy(spark, bootstrap, source, sink, checkpoint, 0).trigger(availableNow=True).start()
    query.awaitTermination(120)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return len(query.recentProgress)


def start_copy(spark: Any, **copy: Any) -> None:
    """Starts copying (`copy`: _copy's arguments), a micro-batch every half second,
    and leaves it running."""
    _QUERIES[copy["source"]] = (
        _copy(spark, **copy).trigger(processingTime="500 milliseconds").start()
    )


def rows_copied(spark: Any, source: str) -> int:
    """Rows the running copy of `source` has read in completed micro-batches;
    raises if it failed."""
    query = _QUERIES[source]
    if not query.isActive:
        raise RuntimeError(f"the copy stopped: {query.exception()}")
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def copy_progress(spark: Any, source: str) -> list[Any]:
    """[{task's partition: its executor's id} of the tasks running, rows copied],
    read together."""
    tracker = spark.sparkContext.statusTracker()
    # Which executor runs a task is in Spark's status store, not in PySpark's tracker.
    store = spark.sparkContext._jsc.sc().statusStore()
    running: dict[int, str] = {}
    for stage_id in tracker.getActiveStageIds():
        stage = tracker.getStageInfo(stage_id)
        if stage is None:
            continue
        tasks = store.taskList(stage_id, stage.currentAttemptId, 100)
        for i in range(tasks.size()):
            task = tasks.apply(i)
            if task.status() == "RUNNING":
                running[task.index()] = task.executorId()
    return [running, rows_copied(spark, source)]


def tasks_running(spark: Any) -> int:
    """Tasks the executors run now, in every active stage."""
    tracker = spark.sparkContext.statusTracker()
    stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
    return sum(s.numActiveTasks for s in stages if s is not None)


def stop_copy(spark: Any, source: str) -> str | None:
    """Stops the running copy; returns its error, if it failed."""
    query = _QUERIES.pop(source)
    error = query.exception()
    query.stop()
    return None if error is None else str(error)
