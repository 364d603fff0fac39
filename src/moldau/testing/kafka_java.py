"""Apache Kafka's own client, tools, Streams and broker, run from the jars Maven
fetches for tests/java, and Spark's own Kafka connector from tests/java/spark (a
source checkout only: the jars are not part of the package).

scripts/test.sh builds them; a test run without it builds them on first use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

JAVA_DIR = Path(__file__).resolve().parents[3] / "tests" / "java"
KAFKA_RUN_CLASS = JAVA_DIR / "kafka-run-class"
_BUILT = JAVA_DIR / "target" / "lib"
CDS_ARCHIVE = JAVA_DIR / "target" / "classes.jsa"
SPARK_CONNECTOR_DIR = JAVA_DIR / "spark"


def java_unavailable() -> str | None:
    """Why Kafka's jars cannot be built or run here, or None."""
    if not (JAVA_DIR / "pom.xml").is_file():
        return f"{JAVA_DIR}/pom.xml is missing (not a source checkout)"
    for tool in ("java", "javac", "mvn"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def ensure_built() -> Path:
    """Runs `mvn package` in tests/java unless its output is newer than every source."""
    why = java_unavailable()
    if why is not None:
        raise RuntimeError(f"Kafka's Java tools cannot run: {why}; scripts/test.sh installs them")
    sources = [JAVA_DIR / "pom.xml", *JAVA_DIR.glob("src/**/*.java")]
    if not (_BUILT.is_dir() and all(p.stat().st_mtime <= _BUILT.stat().st_mtime for p in sources)):
        subprocess.run(["mvn", "-q", "-B", "package"], cwd=JAVA_DIR, check=True, timeout=900)
        _BUILT.touch()
    archive_classes()
    return JAVA_DIR


def archive_classes() -> None:
    """Makes kafka-run-class's Class Data Sharing archive of the classes its JVMs load
    most (moldau.it.ClassWarmUp), unless one newer than every jar is there: each JVM
    then starts about half a second sooner. Without it (the dump failed) they start
    as before."""
    jars = [*_BUILT.glob("*.jar"), *(JAVA_DIR / "target").glob("*.jar")]
    if CDS_ARCHIVE.is_file() and all(
        p.stat().st_mtime <= CDS_ARCHIVE.stat().st_mtime for p in jars
    ):
        return
    # Made aside and renamed: a JVM never maps a half-written archive.
    partial = CDS_ARCHIVE.with_name(f"{CDS_ARCHIVE.name}.{os.getpid()}")
    run("moldau.it.ClassWarmUp", timeout=120, env={"MOLDAU_CDS_DUMP": str(partial)})
    if partial.is_file():
        partial.replace(CDS_ARCHIVE)


def spark_connector_jars() -> list[Path]:
    """Spark's own Kafka connector and what it needs beyond PySpark's jars, for a
    session's spark.jars; `mvn package` in tests/java/spark first, unless done."""
    why = java_unavailable()
    if why is not None:
        raise RuntimeError(f"Spark's Kafka connector cannot be fetched: {why}")
    lib = SPARK_CONNECTOR_DIR / "target" / "lib"
    pom = SPARK_CONNECTOR_DIR / "pom.xml"
    if not lib.is_dir() or pom.stat().st_mtime > lib.stat().st_mtime:
        shutil.rmtree(lib, ignore_errors=True)  # no jar of an older version left behind
        subprocess.run(
            ["mvn", "-q", "-B", "package"], cwd=SPARK_CONNECTOR_DIR, check=True, timeout=900
        )
        lib.touch()
    return sorted(lib.glob("*.jar"))


def command(main_class: str, *args: str) -> list[str]:
    """The command line that runs a class of Kafka's (or of tests/java) with its arguments."""
    return [str(KAFKA_RUN_CLASS), main_class, *args]


def run(
    main_class: str,
    *args: str,
    input: str | None = None,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Runs a class to its end and returns its exit status, stdout and stderr."""
    return subprocess.run(
        command(main_class, *args),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=check,
    )


def popen(main_class: str, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """Starts a class as a process of its own (the caller stops it)."""
    return subprocess.Popen(command(main_class, *args), text=True, **kwargs)
