"""AlterPartitionManager (Kafka's): sends the ISR changes this broker's partitions
propose to the active controller, the pending ones together, one request in flight
at a time. What does not reach the controller (none known, a lost connection,
NOT_CONTROLLER, a stale broker epoch) is sent again after a backoff; each partition
hears the controller's answer for it exactly once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from moldau.protocol.control import AlterPartitionItem, AlterPartitionResult
from moldau.protocol.errors import ErrorCode
from moldau.protocol.wire import DecodeError
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

Send = Callable[
    [tuple[AlterPartitionItem, ...]],
    Awaitable[tuple[ErrorCode, Sequence[AlterPartitionResult]]],
]
Callback = Callable[[AlterPartitionResult], None]

RETRY_BACKOFF_S = 0.05
MAX_RETRY_BACKOFF_S = 1.0
# Partition answers that settle a proposal; any other (UNKNOWN_SERVER_ERROR after a
# failed write, say) means "try again", as Kafka's AlterPartitionManager retries.
FINAL = frozenset(
    {
        ErrorCode.none,
        ErrorCode.operation_not_attempted,
        ErrorCode.ineligible_replica,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.invalid_update_version,
        ErrorCode.invalid_request,
        ErrorCode.new_leader_elected,
    }
)


class AlterPartitionManager:
    def __init__(self, send: Send) -> None:
        self._send = send
        # (topic, partition) -> the proposal not yet sent, and who awaits the answer;
        # a newer proposal for a partition replaces an unsent older one.
        self._unsent: dict[tuple[str, int], tuple[AlterPartitionItem, Callback]] = {}
        self._wake = asyncio.Event()
        self._tasks = TaskOwner("alter-partition")

    def start(self) -> None:
        self._tasks.spawn(self._run(), "send")

    async def close(self) -> None:
        await self._tasks.close()

    def submit(self, item: AlterPartitionItem, on_result: Callback) -> None:
        self._unsent[(item.topic, item.partition)] = (item, on_result)
        self._wake.set()

    async def _run(self) -> None:
        backoff = RETRY_BACKOFF_S
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._unsent:
                continue
            batch, self._unsent = self._unsent, {}
            results = await self._try_send(tuple(item for item, _ in batch.values()))
            answered = {(r.topic, r.partition): r for r in results or ()}
            retry = False
            for key, (item, on_result) in batch.items():
                result = answered.get(key)
                if result is None or result.error_code not in FINAL:
                    self._unsent.setdefault(key, (item, on_result))  # ask again
                    retry = True
                else:
                    on_result(result)
            if retry:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_RETRY_BACKOFF_S)
                self._wake.set()
            else:
                backoff = RETRY_BACKOFF_S

    async def _try_send(
        self, items: tuple[AlterPartitionItem, ...]
    ) -> Sequence[AlterPartitionResult] | None:
        """The controller's results, or None if the request must be sent again."""
        try:
            error, results = await self._send(items)
        except (ConnectionError, OSError, TimeoutError, DecodeError) as e:
            log.warning("AlterPartition did not reach the controller (%s); retrying", e)
            return None
        except Exception:
            # Not expected; the proposals must still reach the controller.
            log.exception("AlterPartition failed; retrying")
            return None
        if error != ErrorCode.none:
            log.info("AlterPartition answered %s; retrying", ErrorCode(error).name)
            return None
        return results
