"""One path for storage I/O errors (Kafka's LogDirFailureChannel).

Any OSError on a log directory (ENOSPC, EIO, EROFS, ...) takes that whole directory
offline: storage code reports it here once, with `fail`, and raises the
KafkaStorageError it gets back, so the request handler answers KAFKA_STORAGE_ERROR.
Afterwards every operation on a log of that directory fails at once (`check`) until
the broker restarts, which recovers the directory from what is on disk. The broker
listens for newly offline directories to take their partitions offline, tell the
controller, and stop when no directory is left.

Thread-safe: a flush on a worker thread can report a failure too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from moldau.protocol.errors import KafkaStorageError

log = logging.getLogger(__name__)


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._offline: dict[Path, str] = {}
        self._lock = threading.Lock()
        # Called once per directory, on the thread that hit the error.
        self.listeners: list[Callable[[Path], None]] = []

    def fail(self, log_dir: Path, action: str, error: OSError) -> KafkaStorageError:
        """Record that `action` failed with `error` in `log_dir`; the directory is
        offline from now on. Returns the error for the caller to raise."""
        reason = f"{action} failed: {error.strerror or error}"
        with self._lock:
            first = log_dir not in self._offline
            if first:
                self._offline[log_dir] = reason
        if first:
            log.error("log directory %s is offline: %s", log_dir, reason)
            for listener in self.listeners:
                listener(log_dir)
        return KafkaStorageError(f"{reason} (log directory {log_dir} is offline)")

    def check(self, log_dir: Path) -> None:
        """Raise KafkaStorageError if `log_dir` is offline."""
        reason = self._offline.get(log_dir)
        if reason is not None:
            raise KafkaStorageError(f"log directory {log_dir} is offline ({reason})")

    def is_offline(self, log_dir: Path) -> bool:
        return log_dir in self._offline

    def reason(self, log_dir: Path) -> str | None:
        return self._offline.get(log_dir)

    @property
    def offline_dirs(self) -> list[Path]:
        return list(self._offline)
