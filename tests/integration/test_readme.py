"""The README's quick start, run as written against a broker of its own (only the
address is this test's): each command succeeds and prints what its `#>` lines
say."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from moldau.testing.process import BrokerProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def quick_start() -> list[tuple[str, list[str]]]:
    """(command, the lines it is shown to print) for each command of the block."""
    section = (ROOT / "README.md").read_text().split("\n## Quick start\n", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README.md's quick start has no sh block"
    steps: list[tuple[str, list[str]]] = []
    pending = ""
    for line in block.group(1).splitlines():
        if line.startswith("#>"):
            steps[-1][1].append(line[2:].strip())
        elif line.startswith("#") or not line.strip():
            continue
        elif line.endswith("\\"):
            pending += line[:-1]
        else:
            steps.append((pending + line, []))
            pending = ""
    return steps


def blanks_collapsed(line: str) -> str:
    """The README aligns with spaces what the tools separate with tabs."""
    return " ".join(line.split())


def test_the_quick_start_prints_what_the_readme_shows(tmp_path: Path) -> None:
    steps = quick_start()
    assert [c.split()[1] for c, _ in steps if c.startswith(".venv/bin/moldau")] == [
        "topics", "topics", "consume", "groups", "groups", "get-offsets",
    ]  # fmt: skip
    # The quick start's consumer group forms at once rather than after 3 s (what it
    # prints is the same).
    with BrokerProcess(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"}) as broker:
        for command, expected in steps:
            done = subprocess.run(
                ["bash", "-c", command.replace("localhost:9092", broker.bootstrap)],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, f"{command}\n{done.stderr}"
            printed = [blanks_collapsed(line) for line in (done.stdout + done.stderr).splitlines()]
            for line in map(blanks_collapsed, expected):
                if line in ("", "..."):
                    continue
                # "..." in a shown line stands for whatever is printed there.
                pattern = ".*".join(re.escape(part) for part in line.split("..."))
                assert any(re.fullmatch(pattern, p) for p in printed), (command, line, printed)
