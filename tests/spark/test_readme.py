"""The README's Spark example, exactly as written (only its broker address is this
test's), run as a user runs it: the venv's python, the venv not activated, no
PYTHONPATH, and a `python3` on PATH that is not the venv's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from confluent_kafka import Consumer

import moldau
from moldau.testing.jvm import spark_submit_env
from moldau.testing.process import BrokerProcess, wait_for
from tests.integration.clients import confluent_produce, create_topic

pytestmark = pytest.mark.spark

README = Path(__file__).resolve().parents[2] / "README.md"
#: What a user's shell does not have: our test set-up's, or an activated venv's.
NOT_A_USERS = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")


def readme_blocks(heading: str, lang: str) -> list[str]:
    """The ```{lang} blocks of the README's section under `heading` (a whole
    heading line, as `## Spark`), up to the next heading of its level or above
    (a `#` line inside a block is a comment, not a heading)."""
    level = len(heading.split(" ", 1)[0])
    lines = README.read_text().split("\n")
    blocks: list[str] = []
    block: list[str] | None = None
    inside, fenced = False, False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
            if inside and fenced and line == f"```{lang}":
                block = []
            elif inside and not fenced and block is not None:
                blocks.append("\n".join(block) + "\n")
                block = None
        elif fenced:
            if block is not None:
                block.append(line)
        elif line == heading:
            inside = True
        elif inside and re.match(rf"#{{1,{level}}} ", line):
            break
    assert blocks, f"README.md's {heading!r} has no {lang} block"
    return blocks


def spark_example() -> str:
    """The first ```python block of the README's Spark section."""
    return readme_blocks("## Spark", "python")[0]


def users_environment(tmp_path: Path) -> dict[str, str]:
    """This environment without what a user's lacks, and with a PATH whose python3
    is the interpreter the venv was made from: neither pyspark nor moldau."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_A_USERS}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys._base_executable)  # type: ignore[attr-defined]
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    env["PATH"] = os.pathsep.join([str(bin_dir), *path])
    # Spark's driver listens on loopback only, as every server in the tests.
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    # A test's JVM options for Spark's driver (not a user's setting, but no help to one).
    env |= spark_submit_env()
    return env


def users_python(tmp_path: Path, env: dict[str, str]) -> str:
    """The venv's python, finding moldau through the venv's own install, as a
    user's does. Where that install is another checkout's (a venv shared between
    git worktrees), a venv of its own whose site-packages point at this checkout's
    source and at the venv's packages, through a .pth file: the same mechanism, no
    PYTHONPATH."""
    src = Path(moldau.__file__).resolve().parents[1]
    found = subprocess.run(
        [sys.executable, "-c", "import moldau; print(moldau.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode == 0 and Path(found.stdout.strip()).resolve().is_relative_to(src):
        return sys.executable
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    packages = sysconfig.get_paths()["purelib"]
    [site] = (venv / "lib").glob("python*/site-packages")
    (site / "moldau-under-test.pth").write_text(f"{src}\n{packages}\n")
    return str(venv / "bin" / "python")


def test_the_readme_spark_example_runs_as_written(tmp_path: Path) -> None:
    env = users_environment(tmp_path)
    lacking = subprocess.run(
        ["python3", "-c", "import pyspark"], env=env, capture_output=True, check=False
    )
    assert lacking.returncode != 0, "python3 on this PATH must be a Python without pyspark"
    python = users_python(tmp_path, env)

    # The check's consumer group forms at once rather than after 3 s.
    with BrokerProcess(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"}) as broker:
        # What the README's quick start leaves in `orders`.
        create_topic(broker.bootstrap, "orders", partitions=3)
        confluent_produce(
            broker.bootstrap, "orders", [(b"k1", b"hello", []), (b"k2", b"world", [])]
        )
        script = tmp_path / "upper.py"
        script.write_text(spark_example().replace("localhost:9092", broker.bootstrap))
        done = subprocess.run(
            [python, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        # Spark's error, without its Java stack.
        errors = [
            line for line in done.stderr.splitlines() if re.search(r"\w+(Error|Exception):", line)
        ]
        assert done.returncode == 0, "\n".join(errors[-3:]) or done.stderr[-3000:]

        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "check",
                "auto.offset.reset": "earliest",
            }
        )
        got: set[tuple[bytes, bytes]] = set()
        try:
            consumer.subscribe(["orders-upper"])

            def both() -> bool:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.add((msg.key(), msg.value()))
                return len(got) == 2

            assert wait_for(both, timeout=60), got
        finally:
            consumer.close()
    assert got == {(b"k1", b"HELLO"), (b"k2", b"WORLD")}
