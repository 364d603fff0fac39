"""Topics: the list (partitions, replication factor, size, messages/s), create,
delete, add partitions; one topic's partitions (leader, replicas, ISR, log start,
high watermark, last stable offset, size) and configs (with their source), and
changing them (IncrementalAlterConfigs)."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from moldau.cli.common import TIMEOUT_S
from moldau.ui.cluster import ClusterClient
from moldau.ui.json import UiError, body, int_param, ok
from moldau.ui.offsets import EARLIEST, LATEST, leader_sizes, list_offsets
from moldau.ui.view import SERIES, topic_series

#: Kafka's error for a topic that does not exist, as the pages say it.
UNKNOWN_TOPIC = "UNKNOWN_TOPIC_OR_PARTITION"


async def topic_metadata(cluster: ClusterClient, name: str) -> Any:
    """A topic's metadata; 404 if it does not exist. All topics are asked for, so
    that a broker with auto.create.topics.enable does not create it."""
    md = await cluster.metadata()
    topic = md.topics.get(name)
    if topic is None:
        raise UiError(404, f"{UNKNOWN_TOPIC}: topic '{name}' does not exist")
    return topic


def routes(cluster: ClusterClient) -> list[web.RouteDef]:
    async def list_topics(request: web.Request) -> web.Response:
        md = await cluster.metadata()
        view = cluster.view
        out = []
        for name, t in sorted(md.topics.items()):
            parts = t.partitions.values()
            out.append(
                {
                    "name": name,
                    "internal": name.startswith("__"),
                    "partitions": len(t.partitions),
                    "replicationFactor": max((len(p.replicas) for p in parts), default=0),
                    "underReplicated": sum(1 for p in parts if len(p.isrs) < len(p.replicas)),
                    "size": sum(v for (tn, _), v in view.sizes.items() if tn == name)
                    if name in view.topics
                    else None,
                    "messagesPerSec": view.topic_rates.get(name),
                }
            )
        return ok(out)

    async def create(request: web.Request) -> web.Response:
        b = await body(request)
        name = str(b.get("name") or "").strip()
        if not name:
            raise UiError(400, "a topic needs a name")
        configs = {str(k): str(v) for k, v in (b.get("configs") or {}).items()}
        new = NewTopic(
            name,
            num_partitions=int_param(b.get("partitions", 1), "partitions", 1),
            replication_factor=int_param(b.get("replicationFactor", 1), "replicationFactor", 1),
            config=configs,
        )
        futures = cluster.admin.create_topics([new], request_timeout=TIMEOUT_S)
        await cluster.wait(futures[name])
        return ok({"name": name}, status=201)

    async def delete(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        await topic_metadata(cluster, name)
        futures = cluster.admin.delete_topics([name], request_timeout=TIMEOUT_S)
        await cluster.wait(futures[name])
        return ok({"deleted": name})

    async def add_partitions(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        count = int_param((await body(request)).get("count"), "count", 1)
        futures = cluster.admin.create_partitions(
            [NewPartitions(name, count)], request_timeout=TIMEOUT_S
        )
        await cluster.wait(futures[name])
        return ok({"name": name, "partitions": count})

    async def describe(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        t = await topic_metadata(cluster, name)
        if t.error is not None and not t.partitions:
            raise UiError(502, f"topic '{name}': {t.error.name()}")
        keys = [(name, int(i)) for i in sorted(t.partitions)]
        leaders = {(name, int(i)): int(p.leader) for i, p in t.partitions.items()}
        brokers = {b.id: (b.host, b.port) for b in cluster.view.brokers.values() if b.online}
        sizes = await leader_sizes(cluster, brokers, leaders, [name])
        start = await list_offsets(cluster, keys, EARLIEST)
        # The last stable offset before the high watermark: asked the other way
        # round under load, the page showed a stable offset past the watermark.
        stable = await list_offsets(cluster, keys, LATEST, committed=True)
        high = await list_offsets(cluster, keys, LATEST)
        partitions = [
            {
                "partition": i,
                "leader": int(t.partitions[i].leader),
                "replicas": list(t.partitions[i].replicas),
                "isr": list(t.partitions[i].isrs),
                "logStart": start.get((name, i)),
                "highWatermark": high.get((name, i)),
                "lastStable": stable.get((name, i)),
                "size": sizes.get((name, i)),
            }
            for _, i in keys
        ]
        resource = ConfigResource(ConfigResource.Type.TOPIC, name)
        futures = cluster.admin.describe_configs([resource], request_timeout=TIMEOUT_S)
        entries = await cluster.wait(futures[resource])
        configs = [
            {
                "name": e.name,
                "value": None if e.is_sensitive else e.value,
                "sensitive": bool(e.is_sensitive),
                "source": ConfigSource(e.source).name,
                "readOnly": bool(e.is_read_only),
                "isDefault": bool(e.is_default),
            }
            for _, e in sorted(entries.items())
        ]
        view = cluster.view
        throughput = {
            "source": view.throughput_source,
            "messagesPerSec": view.topic_rates.get(name),
            "series": cluster.topic_history.series(*(topic_series(name, s) for s in SERIES)),
        }
        return ok(
            {"name": name, "partitions": partitions, "configs": configs, "throughput": throughput}
        )

    async def alter_configs(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        b = await body(request)
        entries = [
            ConfigEntry(str(k), str(v), incremental_operation=AlterConfigOpType.SET)
            for k, v in (b.get("set") or {}).items()
        ] + [
            ConfigEntry(str(k), None, incremental_operation=AlterConfigOpType.DELETE)
            for k in (b.get("delete") or [])
        ]
        if not entries:
            raise UiError(400, "nothing to change: give set and/or delete")
        await topic_metadata(cluster, name)
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=entries)
        futures = cluster.admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)
        await cluster.wait(futures[resource])
        return ok({"name": name})

    return [
        web.get("/api/topics", list_topics),
        web.post("/api/topics", create),
        web.get("/api/topics/{name}", describe),
        web.delete("/api/topics/{name}", delete),
        web.post("/api/topics/{name}/partitions", add_partitions),
        web.put("/api/topics/{name}/configs", alter_configs),
    ]
