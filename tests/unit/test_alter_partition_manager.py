"""The broker's AlterPartitionManager: what does not reach the controller is sent
again, and each partition hears the controller's answer once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from moldau.protocol.control import AlterPartitionItem, AlterPartitionResult
from moldau.protocol.errors import ErrorCode
from moldau.server.alter_partition_manager import AlterPartitionManager

A = AlterPartitionItem("t", 0, 3, (1, 2), 7)
B = AlterPartitionItem("t", 1, 3, (1,), 2)


def ok(item: AlterPartitionItem) -> AlterPartitionResult:
    return AlterPartitionResult(
        item.topic, item.partition, ErrorCode.none, 1, item.leader_epoch, item.new_isr,
        item.partition_epoch + 1,
    )  # fmt: skip


def test_what_does_not_reach_the_controller_is_sent_again_and_answered_once() -> None:
    async def main() -> None:
        sent: list[tuple[AlterPartitionItem, ...]] = []
        replies: asyncio.Queue[object] = asyncio.Queue()

        async def send(
            items: tuple[AlterPartitionItem, ...],
        ) -> tuple[ErrorCode, Sequence[AlterPartitionResult]]:
            sent.append(items)
            reply = await replies.get()
            if isinstance(reply, Exception):
                raise reply
            return reply  # type: ignore[return-value]

        manager = AlterPartitionManager(send)
        manager.start()
        heard: list[AlterPartitionResult] = []
        done = asyncio.Event()

        def hear(result: AlterPartitionResult) -> None:
            heard.append(result)
            done.set()

        try:
            manager.submit(A, hear)
            for reply in (
                ConnectionError("no route"),  # not reached: again
                (ErrorCode.not_controller, ()),  # the controller moved: again
                (ErrorCode.none, ()),  # answered, but not about A: again
                (ErrorCode.none, (ok(A),)),
            ):
                await replies.put(reply)
            await asyncio.wait_for(done.wait(), 10)
            assert heard == [ok(A)]
            assert sent == [(A,)] * 4

            # Two partitions' proposals travel together; each hears its own answer.
            done.clear()
            manager.submit(B, hear)
            manager.submit(A, hear)
            await replies.put((ErrorCode.none, (ok(B), ok(A))))
            while len(heard) < 3:
                await asyncio.wait_for(done.wait(), 10)
                done.clear()
            assert sent[-1] == (B, A) and heard[1:] == [ok(B), ok(A)]
        finally:
            await manager.close()

    asyncio.run(main())
