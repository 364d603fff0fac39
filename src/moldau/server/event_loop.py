"""The event loop a broker process runs on (`event.loop`): the standard library's
asyncio loop, or uvloop (a drop-in on libuv) where it is installed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from moldau.protocol.errors import InvalidConfigError

log = logging.getLogger(__name__)


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the loop `event.loop` names: asyncio, uvloop, or auto (uvloop when
    it can be imported, else asyncio)."""
    if choice == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise InvalidConfigError("event.loop=uvloop needs the uvloop package") from None
        return asyncio.new_event_loop
    log.info("event loop: uvloop")
    return uvloop.new_event_loop
