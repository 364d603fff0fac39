"""TaskOwner: close() ends every task, even one that lost a cancellation."""

from __future__ import annotations

import asyncio

from moldau.tasks import TaskOwner


def test_close_cancels_again_a_task_that_lost_its_cancellation() -> None:
    async def main() -> None:
        owner = TaskOwner("t")
        swallowed = asyncio.Event()

        async def stubborn() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed.set()  # as asyncio.wait_for can lose one on Python 3.11
            await asyncio.Event().wait()

        owner.spawn(stubborn(), "stubborn")
        await asyncio.sleep(0)
        await asyncio.wait_for(owner.close(), 5)
        assert swallowed.is_set()
        assert len(owner) == 0

    asyncio.run(main())
