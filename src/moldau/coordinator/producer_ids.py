"""Producer ids for idempotent producers, handed out in blocks (Kafka's ZooKeeper
ProducerIdManager): a broker claims the next block of ids from the
/latest_producer_id_block znode with a conditional write, so ids are unique across
brokers and restarts."""

from __future__ import annotations

import asyncio
import json

from moldau.metadata import znodes as z
from moldau.metadata.store import BadVersionError, MetadataStore, NodeExistsError

BLOCK_SIZE = 1000
_MAX_ATTEMPTS = 100


class ProducerIdManager:
    def __init__(self, broker_id: int, store: MetadataStore) -> None:
        self.broker_id = broker_id
        self.store = store
        self._next = 0
        self._end = -1  # inclusive end of the current block
        # One claim at a time: concurrent callers share the block it brings.
        self._claiming = asyncio.Lock()

    async def generate(self) -> int:
        async with self._claiming:
            if self._next > self._end:
                await self._claim_block()
            pid = self._next
            self._next += 1
            return pid

    async def _claim_block(self) -> None:
        for _ in range(_MAX_ATTEMPTS):
            found = await self.store.get_or_none(z.PRODUCER_ID_BLOCK)
            if found is None:
                start, version = 0, -1
            else:
                data, stat = found
                start, version = int(json.loads(data)["block_end"]) + 1, stat.version
            end = start + BLOCK_SIZE - 1
            payload = json.dumps(
                {
                    "version": 1,
                    "broker": self.broker_id,
                    "block_start": str(start),
                    "block_end": str(end),
                }
            ).encode()
            try:
                if version < 0:
                    await self.store.create(z.PRODUCER_ID_BLOCK, payload)
                else:
                    await self.store.set(z.PRODUCER_ID_BLOCK, payload, version)
            except (BadVersionError, NodeExistsError):
                continue  # another broker claimed a block meanwhile
            self._next, self._end = start, end
            return
        raise RuntimeError("could not claim a producer id block")
