"""What the console knows of the cluster, sampled every few seconds by the
UiServer's task: brokers (with the ones that went away marked offline), the
controller, topics and partitions, each partition's size and high watermark, and
throughput (bytes in/out and messages per second) into bounded history.

Throughput comes from the brokers' Prometheus endpoints when the console knows
them (Kafka's BrokerTopicMetrics counters); otherwise from the protocol: bytes in
as the growth of the leaders' log sizes (DescribeLogDirs), messages as the growth
of the high watermarks (ListOffsets). Bytes out has no protocol counterpart."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from moldau.ui.history import Rate
from moldau.ui.offsets import LATEST, Partition, leader_sizes, list_offsets

if TYPE_CHECKING:
    import aiohttp

    from moldau.ui.cluster import ClusterClient

log = logging.getLogger(__name__)

#: Kafka's BrokerTopicMetrics as the JMX exporter names them (moldau.server.metrics).
METRICS = {
    "bytes_in": "kafka_server_brokertopicmetrics_bytesin",
    "bytes_out": "kafka_server_brokertopicmetrics_bytesout",
    "messages_in": "kafka_server_brokertopicmetrics_messagesin",
}
SERIES = ("bytes_in", "bytes_out", "messages_in")


@dataclass
class Broker:
    id: int
    host: str
    port: int
    rack: str | None
    online: bool = True


@dataclass
class PartitionInfo:
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass
class ClusterView:
    sampled_ms: int = 0
    error: str | None = None
    cluster_id: str | None = None
    controller: int | None = None
    brokers: dict[int, Broker] = field(default_factory=dict)
    topics: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    #: Each partition's size on its leader, in bytes, and its high watermark.
    sizes: dict[Partition, int] = field(default_factory=dict)
    high_watermarks: dict[Partition, int] = field(default_factory=dict)
    #: Messages per second a topic, from the growth of its high watermarks.
    topic_rates: dict[str, float] = field(default_factory=dict)
    throughput_source: str = "protocol"

    def under_replicated(self) -> int:
        return sum(
            1 for ps in self.topics.values() for p in ps.values() if len(p.isr) < len(p.replicas)
        )

    def offline_partitions(self) -> int:
        return sum(1 for ps in self.topics.values() for p in ps.values() if p.leader < 0)


class ViewSampler:
    """Keeps `cluster.view` and the throughput history up to date; `sample` is
    called by the UiServer's task."""

    def __init__(self, cluster: ClusterClient) -> None:
        self.cluster = cluster
        self._rates: dict[str, Rate] = {}
        self._topic_rates: dict[str, Rate] = {}
        self._session: aiohttp.ClientSession | None = None

    async def sample(self, now_ms: int) -> None:
        view = self.cluster.view
        try:
            new = await self._describe(now_ms, view)
        except Exception as e:
            # The cluster is unreachable (or refuses the console's login): every
            # broker known so far is offline.
            view.error = self.cluster.explain(e)
            view.sampled_ms = now_ms
            for b in view.brokers.values():
                b.online = False
            return
        await self._sizes_and_offsets(new)
        self._topic_throughput(new, now_ms)
        await self._throughput(new, now_ms)
        self.cluster.view = new

    async def _describe(self, now_ms: int, old: ClusterView) -> ClusterView:
        cluster = self.cluster
        described = await cluster.wait(cluster.admin.describe_cluster(request_timeout=5))
        md = await cluster.metadata()
        view = ClusterView(sampled_ms=now_ms, cluster_id=described.cluster_id)
        view.controller = described.controller.id if described.controller else None
        # A broker seen before and missing now is offline: Kafka lists only live ones.
        view.brokers = {
            i: Broker(b.id, b.host, b.port, b.rack, False) for i, b in old.brokers.items()
        }
        for node in described.nodes:
            view.brokers[node.id] = Broker(node.id, node.host, node.port, node.rack)
        for name, t in md.topics.items():
            if t.error is not None and not t.partitions:
                continue
            view.topics[name] = {
                int(i): PartitionInfo(int(p.leader), list(p.replicas), list(p.isrs))
                for i, p in t.partitions.items()
            }
        return view

    async def _sizes_and_offsets(self, view: ClusterView) -> None:
        """Each partition's size on its leader and its high watermark."""
        leaders = {(t, i): p.leader for t, ps in view.topics.items() for i, p in ps.items()}
        live = {b.id: (b.host, b.port) for b in view.brokers.values() if b.online}
        view.sizes = await leader_sizes(self.cluster, live, leaders)
        view.high_watermarks = await list_offsets(
            self.cluster, [k for k, leader in leaders.items() if leader >= 0], LATEST
        )

    def _topic_throughput(self, view: ClusterView, now_ms: int) -> None:
        totals: dict[str, int] = {}
        for (topic, _), hw in view.high_watermarks.items():
            totals[topic] = totals.get(topic, 0) + hw
        for gone in set(self._topic_rates) - set(totals):
            del self._topic_rates[gone]
        for topic, total in totals.items():
            rate = self._topic_rates.setdefault(topic, Rate()).update(now_ms / 1000, total)
            if rate is not None:
                view.topic_rates[topic] = rate

    async def _throughput(self, view: ClusterView, now_ms: int) -> None:
        totals = await self._metrics_totals() if self.cluster.metrics_urls else None
        if totals is not None:
            view.throughput_source = "metrics"
        else:
            view.throughput_source = "protocol"
            totals = {
                "bytes_in": float(sum(view.sizes.values())),
                "messages_in": float(sum(view.high_watermarks.values())),
            }
        for name, total in totals.items():
            rate = self._rates.setdefault(name, Rate()).update(now_ms / 1000, total)
            if rate is not None:
                self.cluster.history.add(f"cluster.{name}", now_ms, rate)

    async def _metrics_totals(self) -> dict[str, float] | None:
        """Sums over the brokers' endpoints of the all-topics counters; None when
        none answered."""
        import aiohttp
        from prometheus_client.parser import text_string_to_metric_families

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3))
        session = self._session

        async def scrape(url: str) -> str | None:
            try:
                async with session.get(url) as response:
                    return await response.text() if response.status == 200 else None
            except (aiohttp.ClientError, TimeoutError):
                return None

        texts = await asyncio.gather(*(scrape(u) for u in self.cluster.metrics_urls))
        if all(t is None for t in texts):
            return None
        totals = dict.fromkeys(METRICS, 0.0)
        wanted = {f"{m}_total": key for key, m in METRICS.items()}
        for text in texts:
            for family in text_string_to_metric_families(text or ""):
                for s in family.samples:
                    key = wanted.get(s.name)
                    if key is not None and "topic" not in s.labels:
                        totals[key] += s.value
        return totals

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
