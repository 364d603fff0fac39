"""Injected storage I/O errors, for the unit tests of the failure path.

`FailingOs` stands in for the `os` module of the storage code: it counts every call
that can change a file (open for writing, write, writev, ftruncate, fsync, replace), or
only those named, and makes the chosen one fail as a full or broken disk does: a
write first writes part of its bytes for real, then raises. Real files, a real error
path: only the failure is chosen.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import moldau.metadata.journal
import moldau.storage.checkpoint
import moldau.storage.index
import moldau.storage.log
import moldau.storage.segment

STORAGE_MODULES = (
    moldau.metadata.journal,
    moldau.storage.segment,
    moldau.storage.index,
    moldau.storage.checkpoint,
    moldau.storage.log,
)
MUTATING = frozenset({"open", "write", "writev", "ftruncate", "fsync", "replace"})
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC


class FailingOs:
    def __init__(
        self,
        fail_at: int | None = None,
        code: int = errno.ENOSPC,
        sticky: bool = False,
        only: frozenset[str] = MUTATING,
    ):
        self.fail_at = fail_at  # index of the call that fails; None: none fails
        self.code = code
        self.sticky = sticky  # every later call fails too (a disk that is gone)
        self.only = only  # the calls counted (and failed): a subset of MUTATING
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if name not in self.only:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "open" and not args[1] & _WRITING:
                return real(*args, **kwargs)  # a read: not what a full disk fails
            n = len(self.calls)
            self.calls.append(name)
            due = self.fail_at is not None and (
                n == self.fail_at or (self.sticky and n > self.fail_at)
            )
            if due:
                if name in ("write", "writev") and n == self.fail_at:
                    fd, data = args[0], args[1]
                    chunk = b"".join(bytes(p) for p in data) if name == "writev" else bytes(data)
                    os.write(fd, chunk[: len(chunk) // 2])  # a partial write lands first
                raise OSError(self.code, os.strerror(self.code))
            return real(*args, **kwargs)

        return call


@contextmanager
def failing_os(
    monkeypatch: pytest.MonkeyPatch, fail_at: int | None = None, **kwargs: Any
) -> Iterator[FailingOs]:
    fake = FailingOs(fail_at, **kwargs)
    with monkeypatch.context() as m:
        for module in STORAGE_MODULES:
            m.setattr(module, "os", fake)
        yield fake
