"""AlterPartition (56): a leader's ISR changes, answered by this broker's controller
if it is the active one (NOT_CONTROLLER otherwise, and the leader retries elsewhere)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moldau.protocol import alter_partition as ap
from moldau.server.request import RequestContext

if TYPE_CHECKING:
    from moldau.server.broker import Broker


async def handle_alter_partition(broker: Broker, ctx: RequestContext) -> Any:
    req = ctx.body()
    controller = broker.controller
    topic_ids = dict(controller.ctx.topic_ids)
    items, unknown = ap.request_items(req, {v: k for k, v in topic_ids.items()})
    error, results = await controller.alter_partition(req.broker_id, req.broker_epoch, tuple(items))
    return ap.build_response(error, [*results, *unknown], topic_ids)
