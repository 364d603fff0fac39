"""LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6): the controller's requests,
decoded by hand (protocol/control_wire.py) and handed to the broker, as the
embedded mode hands the same objects over in-process."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moldau.protocol.control_wire import decode_request, encode_response, request_topic_ids
from moldau.protocol.wire import Reader
from moldau.server.request import RawBody, RequestContext, Response

if TYPE_CHECKING:
    from moldau.server.broker import Broker


async def handle_control(broker: Broker, ctx: RequestContext) -> Response:
    header = ctx.header
    request = decode_request(header.api_key, header.api_version, Reader(ctx.frame, ctx.body_offset))
    response = await broker.handle_control_request(request)
    return RawBody([encode_response(response, request_topic_ids(request))])
