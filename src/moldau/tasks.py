"""TaskOwner: every background task belongs to one, and shutdown awaits them all.

No fire-and-forget tasks: a task that dies with an exception is logged with its
traceback (never swallowed), and `close` cancels and awaits what is still running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)

RECANCEL_AFTER_S = 1.0


class TaskOwner:
    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        if self._closed:
            coro.close()
            raise RuntimeError(f"{self.name} is closed")
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("task %s failed", task.get_name(), exc_info=exc)

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        """Cancel every task and wait until all have finished. A task still running
        after a while is cancelled again: Python 3.11's asyncio.wait_for loses a
        cancellation that arrives as its inner future completes (gh-86296), and the
        task then goes on, e.g. to wait on its queue forever."""
        self._closed = True
        pending = set(self._tasks)
        while pending:
            for t in pending:
                t.cancel()
            _, pending = await asyncio.wait(pending, timeout=RECANCEL_AFTER_S)
            if pending:
                log.warning(
                    "%s: %s still running after cancel; cancelling again",
                    self.name, sorted(t.get_name() for t in pending),
                )  # fmt: skip
