"""ControlledShutdown (7): a broker about to stop asks the active controller to
move its leaderships away (NOT_CONTROLLER from any other broker)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moldau.controller.controller import NotControllerError
from moldau.protocol import controlled_shutdown as cs
from moldau.protocol.errors import ErrorCode
from moldau.protocol.wire import Reader
from moldau.server.request import RawBody, RequestContext, Response

if TYPE_CHECKING:
    from moldau.server.broker import Broker


async def handle_controlled_shutdown(broker: Broker, ctx: RequestContext) -> Response:
    broker_id, broker_epoch = cs.decode_request(Reader(ctx.frame, ctx.body_offset))
    try:
        error, remaining = await broker.controller.controlled_shutdown(broker_id, broker_epoch)
    except NotControllerError:
        error, remaining = ErrorCode.not_controller, []
    body = cs.encode_response(error, [(tp.topic, tp.partition) for tp in remaining])
    return RawBody([body])
