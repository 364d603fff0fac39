"""GET /api/cluster: brokers (online or not), the controller, topic and partition
counts, under-replicated and offline partitions, and the throughput charts."""

from __future__ import annotations

from aiohttp import web

from moldau.ui.cluster import ClusterClient
from moldau.ui.json import ok
from moldau.ui.view import SERIES


def routes(cluster: ClusterClient) -> list[web.RouteDef]:
    async def get(request: web.Request) -> web.Response:
        v = cluster.view
        return ok(
            {
                "bootstrap": cluster.bootstrap,
                "sampledMs": v.sampled_ms,
                "error": v.error,
                "clusterId": v.cluster_id,
                "controller": v.controller,
                "brokers": [
                    {"id": b.id, "host": b.host, "port": b.port, "rack": b.rack, "online": b.online}
                    for _, b in sorted(v.brokers.items())
                ],
                "topics": len(v.topics),
                "partitions": sum(len(ps) for ps in v.topics.values()),
                "underReplicated": v.under_replicated(),
                "offlinePartitions": v.offline_partitions(),
                "throughput": {
                    "source": v.throughput_source,
                    "series": cluster.history.series(*(f"cluster.{s}" for s in SERIES)),
                },
            }
        )

    return [web.get("/api/cluster", get)]
