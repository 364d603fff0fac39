"""The console's JSON answers: a value, or {"error": "..."} with an HTTP status.

A handler raises `UiError` for a mistake it can name (an unknown topic, a bad
offset); server.py's middleware turns it, and the exceptions of confluent-kafka
and of one wire request, into `error(...)` answers."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from confluent_kafka import KafkaError, KafkaException


class UiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def ok(value: Any, status: int = 200) -> web.Response:
    return web.json_response(value, status=status)


def error(status: int, message: str) -> web.Response:
    """An error a page shows as it is: what failed, with Kafka's error name."""
    return web.json_response({"error": message}, status=status)


def kafka_message(exc: BaseException) -> str:
    """A confluent-kafka error as `NAME: text` (Kafka's error name first)."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    if isinstance(err, KafkaError):
        name, text = str(err.name()), str(err.str())
        return name if text in ("", name) else f"{name}: {text}"
    return str(exc) or type(exc).__name__


async def body(request: web.Request) -> dict[str, Any]:
    """A request's JSON object; anything else is the caller's mistake (400)."""
    try:
        value = await request.json()
    except ValueError:
        raise UiError(400, "the request body is not JSON") from None
    if not isinstance(value, dict):
        raise UiError(400, "the request body is not a JSON object")
    return value


def int_param(value: Any, name: str, minimum: int | None = None) -> int:
    """An integer from a query or a body; a clear 400 otherwise."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UiError(400, f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise UiError(400, f"{name} must be at least {minimum}, got {number}")
    return number
