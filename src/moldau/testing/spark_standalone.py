"""A Spark standalone cluster as real OS processes, for tests: one master and N
workers on loopback, started with pyspark's own `bin/spark-class` (pyspark ships
no sbin start scripts), stopped by PID; and a way to SIGKILL an executor, the
CoarseGrainedExecutorBackend a worker starts for an application.

Ports are Spark's to choose (0); the master's address and web UI are read from
its log, and the workers count as up once the master's `/json` lists them ALIVE.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from moldau.testing.process import wait_for

_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_WEB_UI = re.compile(r"Bound MasterWebUI to \S+, and started at (http://\S+)")
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def spark_class() -> Path:
    """pyspark's `bin/spark-class`, which runs a Spark JVM class."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def children(pid: int) -> list[int]:
    """The direct children of `pid` (from /proc: Linux only)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # The command name in parentheses may hold spaces: the parent is after it.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def parent(pid: int) -> int:
    """The parent of `pid`, 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def ancestors(pid: int) -> list[int]:
    """`pid`'s parent, grandparent, ... up to init: which processes it runs under."""
    chain: list[int] = []
    while (pid := parent(pid)) > 1:
        chain.append(pid)
    return chain


def command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


class SparkStandalone:
    """One master and `workers` workers of `cores` cores and `memory` each. `env`
    is added to their environment, which the executors they start inherit: a
    PYTHONPATH there is how executors' Python workers find moldau and pyspark_moldau
    when the package is not installed where they run."""

    def __init__(
        self,
        base_dir: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        env: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.base_dir = Path(base_dir)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.host = host
        self.env = {
            **os.environ,
            "SPARK_LOCAL_IP": host,
            # The daemons need little heap; the executors get spark.executor.memory.
            "SPARK_DAEMON_MEMORY": "256m",
            # Off: its port (6066) is fixed, so two clusters on a machine would collide.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            **(env or {}),
        }
        self.master: subprocess.Popen[bytes] | None = None
        self.worker_procs: list[subprocess.Popen[bytes]] = []
        self.url = ""
        self.web_url = ""

    @property
    def master_log(self) -> Path:
        return self.base_dir / "master.log"

    def worker_log(self, i: int) -> Path:
        return self.base_dir / f"worker-{i}.log"

    def _spawn(self, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            return subprocess.Popen(
                [str(spark_class()), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.base_dir,
            )

    def start(self, timeout: float = 60.0) -> SparkStandalone:
        """Starts the master, then the workers, and waits until the master has
        every worker registered; on failure stops what started and raises."""
        self.launch(timeout)
        return self.wait_for_workers(timeout)

    def launch(self, timeout: float = 60.0) -> SparkStandalone:
        """Starts the master, waits for its address, and starts the workers
        without waiting for them (a driver may start meanwhile: its application
        waits for executors); on failure stops what started and raises."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.master = self._spawn(
                ["org.apache.spark.deploy.master.Master", "--host", self.host,
                 "--port", "0", "--webui-port", "0"],
                self.master_log,
            )  # fmt: skip
            if not wait_for(self._read_master_addresses, timeout, 0.1):
                raise RuntimeError(f"the Spark master did not start; see {self.master_log}")
            for i in range(self.workers):
                work = self.base_dir / f"worker-{i}"
                work.mkdir(exist_ok=True)
                self.worker_procs.append(
                    self._spawn(
                        ["org.apache.spark.deploy.worker.Worker", self.url,
                         "--host", self.host, "--port", "0", "--webui-port", "0",
                         "--cores", str(self.cores), "--memory", self.memory,
                         "--work-dir", str(work)],
                        self.worker_log(i),
                    )
                )  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def wait_for_workers(self, timeout: float = 60.0) -> SparkStandalone:
        """Waits until the master lists every worker ALIVE; else stops all and raises."""
        if not wait_for(lambda: self.alive_workers() == self.workers, timeout, 0.2):
            alive = self.alive_workers()
            self.stop()
            raise RuntimeError(
                f"{alive} of {self.workers} Spark workers registered; see {self.base_dir}"
            )
        return self

    def _read_master_addresses(self) -> bool:
        if self.master is not None and self.master.poll() is not None:
            raise RuntimeError(f"the Spark master exited; see {self.master_log}")
        text = self.master_log.read_text(errors="replace")
        url, web = _MASTER_URL.search(text), _WEB_UI.search(text)
        if url is None or web is None:
            return False
        self.url, self.web_url = url.group(1), web.group(1)
        return True

    def status(self) -> dict[str, Any]:
        """The master's state as its web UI gives it (`/json`): workers, apps."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as r:
            state: dict[str, Any] = json.load(r)
        return state

    def alive_workers(self) -> int:
        try:
            return int(self.status().get("aliveworkers", 0))
        except OSError:
            return 0

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.worker_procs if p.poll() is None]

    def executor_pids(self) -> list[int]:
        """The executors the workers run now (for whatever application)."""
        return [
            pid
            for worker in self.worker_pids
            for pid in children(worker)
            if EXECUTOR_CLASS in command_line(pid)
        ]

    def kill_executor(self) -> int:
        """SIGKILLs one running executor (its Python workers go with it) and
        returns its PID; raises when no worker runs one."""
        pids = self.executor_pids()
        if not pids:
            raise RuntimeError("no executor is running")
        os.kill(pids[0], signal.SIGKILL)
        return pids[0]

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the workers (they stop their executors), then the master; a
        process that does not exit in time is killed, and so is an executor left
        behind by its worker."""
        executors = self.executor_pids()
        for proc in [*self.worker_procs, *([self.master] if self.master else [])]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for pid in executors:
            if EXECUTOR_CLASS in command_line(pid):
                os.kill(pid, signal.SIGKILL)
        self.worker_procs = []
        self.master = None

    def __enter__(self) -> SparkStandalone:
        return self.start() if self.master is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
