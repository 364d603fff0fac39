"""InitProducerId (22): a producer id and epoch for an idempotent producer.

Without a transactional id, Kafka always hands out a new producer id with epoch 0
(also when the client asks to bump its epoch, KIP-360). Transactions are not
supported: a transactional id is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ErrorCode
from moldau.server.request import RequestContext, Response

if TYPE_CHECKING:
    from moldau.server.broker import Broker


async def handle_init_producer_id(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    if req.transactional_id is not None:
        error, pid = ErrorCode.not_coordinator, -1
    else:
        error, pid = ErrorCode.none, await broker.producer_ids.generate()
    return build_response(
        ApiKey.INIT_PRODUCER_ID,
        ctx.version,
        {
            "throttle_time": 0,
            "error_code": error,
            "producer_id": pid,
            "producer_epoch": 0 if pid >= 0 else -1,
        },
    )
