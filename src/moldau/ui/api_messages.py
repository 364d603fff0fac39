"""The message browser: GET /api/topics/{name}/messages reads a window of a topic
(one partition or all; from an offset, a timestamp, the beginning or the end; N
records; an optional text filter), POST produces one record."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from moldau.cli.common import TIMEOUT_S
from moldau.ui import browse
from moldau.ui.api_topics import topic_metadata
from moldau.ui.cluster import ClusterClient
from moldau.ui.json import UiError, body, int_param, ok
from moldau.ui.offsets import EARLIEST, LATEST, at_time, list_offsets


def _produce(conf: dict[str, Any], topic: str, record: dict[str, Any]) -> dict[str, Any]:
    """Produce one record and wait for its acknowledgement (blocking)."""
    from confluent_kafka import KafkaException, Producer

    from moldau.ui.json import kafka_message

    outcome: list[Any] = []
    producer = Producer(conf)
    producer.produce(topic, on_delivery=lambda err, m: outcome.append(err or m), **record)
    producer.flush(TIMEOUT_S)
    if not outcome:
        raise UiError(504, "the record was not acknowledged in time")
    if not hasattr(outcome[0], "offset"):
        raise UiError(502, kafka_message(KafkaException(outcome[0])))
    return {"partition": outcome[0].partition(), "offset": outcome[0].offset()}


def _text(value: Any) -> bytes | None:
    return None if value is None else str(value).encode()


def routes(cluster: ClusterClient) -> list[web.RouteDef]:
    async def read(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        q = request.query
        t = await topic_metadata(cluster, name)
        ids = sorted(int(i) for i in t.partitions)
        wanted = q.get("partition", "all")
        if wanted != "all":
            one = int_param(wanted, "partition", 0)
            if one not in ids:
                raise UiError(
                    404, f"UNKNOWN_TOPIC_OR_PARTITION: topic '{name}' has no partition {one}"
                )
            ids = [one]
        limit = min(int_param(q.get("limit", 50), "limit", 1), browse.MAX_RECORDS)
        mode = q.get("from", "end")
        keys = [(name, i) for i in ids]
        high = await list_offsets(cluster, keys, LATEST)
        start = await list_offsets(cluster, keys, EARLIEST)
        offset = int_param(q.get("offset"), "offset", 0) if mode == "offset" else None
        by_time = None
        if mode == "timestamp":
            by_time = await list_offsets(
                cluster, keys, at_time(int_param(q.get("timestamp"), "timestamp", 0))
            )
        text = q.get("filter", "")
        span = browse.end_span(limit, len(keys), text)
        w = browse.window(mode, limit, start, high, offset, by_time, span)
        result = await cluster.run(
            browse.read, cluster.client_config(), name, w, limit, text, mode == "end"
        )
        return ok(result)

    async def produce(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        b = await body(request)
        await topic_metadata(cluster, name)
        record: dict[str, Any] = {"key": _text(b.get("key")), "value": _text(b.get("value"))}
        headers = b.get("headers") or []
        if isinstance(headers, dict):
            headers = list(headers.items())
        record["headers"] = [(str(k), _text(v)) for k, v in headers]
        if b.get("partition") not in (None, ""):
            record["partition"] = int_param(b["partition"], "partition", 0)
        conf = cluster.client_config(**{"message.timeout.ms": str(int(TIMEOUT_S * 1000))})
        return ok(await cluster.run(_produce, conf, name, record), status=201)

    return [
        web.get("/api/topics/{name}/messages", read),
        web.post("/api/topics/{name}/messages", produce),
    ]
