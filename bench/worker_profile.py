"""Sampling profiles of Spark's Python workers with py-spy.

Spark runs a data source's tasks in Python workers that `pyspark.daemon` forks, so
no profiler started in the driver reaches them; py-spy attaches from outside and
follows the daemon's children (--subprocesses). Only samples of running threads are
kept (py-spy's default), so the profile says where the workers' CPU goes, not where
they wait for the JVM. Samples of the daemon's own loop are left out: it forks the
workers and waits, and py-spy cannot always tell its waits from work.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

_LINE = re.compile(r":\d+\)$")
#: The frame under which a forked worker runs its tasks.
_WORKER = "worker (daemon.py)"


def python_daemons() -> list[int]:
    """The pyspark.daemon processes under this driver (started by the first Python task)."""
    pids = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "pyspark.daemon" in " ".join(p.cmdline()):
                pids.append(p.pid)
        except psutil.Error:
            continue  # a worker that just ended
    return pids


@contextmanager
def recording(pids: list[int], out: Path, rate: int = 250) -> Iterator[None]:
    """Record `pids` and their children into `out` (py-spy's raw, collapsed stacks)."""
    spy = str(Path(sys.executable).parent / "py-spy")
    procs = [
        subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--subprocesses", "--nonblocking",
             "--format", "raw", "--rate", str(rate), "--output", f"{out}.{pid}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]  # fmt: skip
    time.sleep(1.0)  # py-spy needs a moment to attach; samples before that are lost
    try:
        yield
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        with open(out, "w") as merged:
            for pid in pids:
                part = Path(f"{out}.{pid}")
                if part.exists():
                    merged.write(part.read_text())
                    part.unlink()


def summary(raw: Path, title: str, top: int = 12) -> str:
    """The functions with the most samples: own (the frame running) and inclusive."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [_LINE.sub(")", f) for f in stack.split(";") if not f.startswith("process ")]
        if _WORKER not in frames:
            continue  # the daemon's own loop, forking workers and waiting for the JVM
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    if total == 0:
        return f"{title}: no samples"
    lines = [
        f"{title}: {total:,} samples of the workers' running threads",
        "  own%  incl%  function",
    ]
    for f, n in own.most_common(top):
        lines.append(f"{100 * n / total:6.1f} {100 * inclusive[f] / total:6.1f}  {f}")
    return "\n".join(lines)
