"""A Spark driver in a process of its own, which runs functions it is asked to run
in its one SparkSession.

PySpark allows one SparkContext per Python process, and its master is fixed when
it starts: a test process that already holds a local session cannot also drive a
cluster. This process does, for as long as it lives, so the tests of a file share
one session (and its executors) on the cluster. Requests are JSON lines on its
stdin, `{"call": "package.module:function", "kwargs": {...}}`; it runs
`function(spark, **kwargs)` and answers one JSON line, `{"result": ...}` or
`{"error": traceback}`, on a pipe of its own: Spark's JVM writes to stdout and
stderr, which go to the log file.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import queue
import subprocess
import sys
import threading
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO


class DriverError(RuntimeError):
    """A function run in the driver raised; the message holds its traceback."""


class SparkDriver:
    """`python -m moldau.testing.spark_driver` on `master` with Spark settings
    `conf`, its output in `log_path`; `env` is added to its environment."""

    def __init__(
        self,
        master: str,
        conf: Mapping[str, str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.master = master
        self.conf = dict(conf)
        self.log_path = Path(log_path)
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._answers: queue.Queue[bytes] = queue.Queue()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 120.0, wait: bool = True) -> SparkDriver:
        """Starts the process and waits until its SparkSession is up (with
        `wait=False`, `wait_ready` does that later)."""
        read_end, write_end = os.pipe()
        setup = json.dumps({"master": self.master, "conf": self.conf, "answers": write_end})
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moldau.testing.spark_driver", setup],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                pass_fds=(write_end,),
            )
        os.close(write_end)
        threading.Thread(
            target=self._read_answers, args=(os.fdopen(read_end, "rb"),), daemon=True
        ).start()
        return self.wait_ready(timeout) if wait else self

    def wait_ready(self, timeout: float = 120.0) -> SparkDriver:
        """Waits until the SparkSession is up; stops the process if it fails to."""
        try:
            self._answer(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _read_answers(self, answers: BinaryIO) -> None:
        with answers:
            for line in answers:
                self._answers.put(line)
        self._answers.put(b"")  # the process is gone

    def _answer(self, timeout: float) -> Any:
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer from the Spark driver in {timeout} s; see "
                               f"{self.log_path}") from None  # fmt: skip
        if not line:
            raise DriverError(f"the Spark driver exited; see {self.log_path}")
        answer = json.loads(line)
        if "error" in answer:
            raise DriverError(answer["error"])
        return answer.get("result")

    def call(self, function: str, timeout: float = 180.0, **kwargs: Any) -> Any:
        """Runs `function(spark, **kwargs)` ("package.module:function") in the
        driver and returns what it returned (JSON); raises DriverError with its
        traceback if it raised."""
        assert self.proc is not None and self.proc.stdin is not None
        request = json.dumps({"call": function, "kwargs": kwargs}).encode() + b"\n"
        self.proc.stdin.write(request)
        self.proc.stdin.flush()
        return self._answer(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Closes its input, so it stops its session and exits; killed after
        `timeout` seconds."""
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):  # it is gone already
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> SparkDriver:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _run(spark: Any, request: dict[str, Any]) -> Any:
    module, _, name = request["call"].partition(":")
    return getattr(importlib.import_module(module), name)(spark, **request["kwargs"])


def main(setup_json: str) -> None:
    setup = json.loads(setup_json)
    answers = os.fdopen(setup["answers"], "w")
    from moldau.spark.session import session_builder

    builder = session_builder().master(setup["master"]).appName("moldau-spark-driver")
    for key, value in setup["conf"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()

    def answer(message: dict[str, Any]) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    try:
        answer({"result": "ready"})
        for line in sys.stdin:
            try:
                answer({"result": _run(spark, json.loads(line))})
            except Exception:
                answer({"error": traceback.format_exc()})
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
