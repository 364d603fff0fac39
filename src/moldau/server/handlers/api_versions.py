"""ApiVersions (18): what this broker implements, per API, min..max version."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moldau.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import ErrorCode
from moldau.server.request import RequestContext, Response

if TYPE_CHECKING:
    from moldau.server.broker import Broker


def api_versions_response(version: int, error: ErrorCode = ErrorCode.none) -> Response:
    return build_response(
        ApiKey.API_VERSIONS,
        version,
        {
            "error_code": error,
            "api_keys": [
                {"api_key": int(k), "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
            ],
            "throttle_time": 0,
        },
    )


async def handle_api_versions(broker: Broker, ctx: RequestContext) -> Response:
    return api_versions_response(ctx.version)
