"""The Prometheus endpoint: `GET /metrics` on the broker's event loop, so a scrape
reads the broker's state between two of its steps, never in the middle of one.

Just enough HTTP/1.1 for scrapers: one request per connection, its head bounded
in size and time, the body rendered by prometheus-client; anything else gets a
plain 404 or 405 and the connection closes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 8192
READ_TIMEOUT_S = 10.0
STOP_GRACE_S = 2.0


def response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class MetricsServer:
    def __init__(self, host: str, port: int, render: Callable[[], bytes]) -> None:
        self.host = host
        self.port = port
        self.render = render
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host or None, self.port, reuse_address=True, limit=MAX_HEAD_BYTES
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                return
            method, _, rest = head.partition(b" ")
            path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
            if method not in (b"GET", b"HEAD"):
                answer = response("405 Method Not Allowed", b"only GET\n")
            elif path not in (b"/metrics", b"/"):
                answer = response("404 Not Found", b"metrics are at /metrics\n")
            else:
                body = self.render()
                answer = response("200 OK", body, CONTENT_TYPE_LATEST)
                if method == b"HEAD":
                    answer = answer[: len(answer) - len(body)]
            writer.write(answer)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        except Exception:
            log.exception("metrics endpoint failed to answer")
        finally:
            self._writers.discard(writer)
            writer.close()

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_GRACE_S):
                await self._server.wait_closed()
        self._server = None
