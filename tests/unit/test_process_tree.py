"""The /proc walks moldau.testing.spark_standalone finds executors with."""

from __future__ import annotations

import os
import subprocess
import sys

from moldau.testing.spark_standalone import ancestors, children, command_line, parent


def test_a_child_is_found_under_its_parent_with_its_command_line() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        assert child.pid in children(os.getpid())
        assert parent(child.pid) == os.getpid()
        assert ancestors(child.pid)[:2] == [os.getpid(), os.getppid()]
        assert command_line(child.pid)[1:] == ["-c", "import sys; sys.stdin.read()"]
    finally:
        child.communicate(b"")
    assert child.pid not in children(os.getpid())
    assert parent(child.pid) == 0 and command_line(child.pid) == []
