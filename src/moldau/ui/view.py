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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from moldau.ui.history import growth_rates
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
#: What the protocol alone can measure.
PROTOCOL_SERIES = ("bytes_in", "messages_in")
#: History's names: "cluster.<series>" and "topic.<name>.<series>".
CLUSTER, TOPIC = "cluster", "topic."
#: Cumulative counters by (source: a metrics endpoint or a partition, topic or
#: None for all topics, series).
Counters = dict[tuple[str, str | None, str], float]
Where = tuple[str | None, str]


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


def topic_series(topic: str, name: str) -> str:
    return f"{TOPIC}{topic}.{name}"


def protocol_counters(view: ClusterView) -> Counters:
    """Counters the protocol gives, by partition: bytes in as the leader's log
    size, messages in as the high watermark (bytes out: none)."""
    counters: Counters = {}
    for name, values in (("bytes_in", view.sizes), ("messages_in", view.high_watermarks)):
        for (topic, partition), value in values.items():
            counters[(str(partition), topic, name)] = float(value)
    return counters


def throughput(rates: Mapping[tuple[str, str | None, str], float]) -> dict[Where, float]:
    """Rates by (topic, series), topic None for the cluster: the metrics' own
    all-topics counters, or else the sum of the topics'."""
    out: dict[Where, float] = {}
    cluster_given = any(topic is None for _, topic, _ in rates)
    for (_, topic, name), rate in rates.items():
        out[(topic, name)] = out.get((topic, name), 0.0) + rate
        if topic is not None and not cluster_given:
            out[(None, name)] = out.get((None, name), 0.0) + rate
    return out


class ViewSampler:
    """Keeps `cluster.view` and the throughput history up to date; `sample` is
    called by the UiServer's task."""

    def __init__(self, cluster: ClusterClient) -> None:
        self.cluster = cluster
        self._topics_seen: set[str] = set()
        self._last: tuple[int, Counters] | None = None
        self._measuring: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    async def sample(self, now_ms: int) -> None:
        old = self.cluster.view
        try:
            new = await self._describe(now_ms, old)
        except Exception as e:
            # The cluster is unreachable (or refuses the console's login): every
            # broker known so far is offline.
            old.error = self.cluster.explain(e)
            old.sampled_ms = now_ms
            for b in old.brokers.values():
                b.online = False
            return
        # Brokers and partitions show at once; sizes, offsets and rates follow
        # from a task of their own (ListOffsets waits out a dead leader's
        # partitions moving), the last ones shown meanwhile. While the last
        # measurement still runs, this round's is skipped.
        new.sizes, new.high_watermarks = old.sizes, old.high_watermarks
        new.topic_rates, new.throughput_source = old.topic_rates, old.throughput_source
        self.cluster.view = new
        if self._measuring is None or self._measuring.done():
            self._measuring = asyncio.create_task(self._measure(new, now_ms), name="ui-measure")

    async def _measure(self, view: ClusterView, now_ms: int) -> None:
        try:
            sizes, high = await self._sizes_and_offsets(view)
            metrics = await self._metrics_totals() if self.cluster.metrics_urls else None
        except Exception:
            log.exception("console measurement failed")
            return
        current = self.cluster.view  # a newer sample may have replaced `view`
        current.sizes, current.high_watermarks = sizes, high
        self._throughput(current, now_ms, metrics)

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

    async def _sizes_and_offsets(
        self, view: ClusterView
    ) -> tuple[dict[Partition, int], dict[Partition, int]]:
        """Each partition's size on its leader and its high watermark."""
        leaders = {(t, i): p.leader for t, ps in view.topics.items() for i, p in ps.items()}
        live = {b.id: (b.host, b.port) for b in view.brokers.values() if b.online}
        sizes = await leader_sizes(self.cluster, live, leaders)
        high = await list_offsets(
            self.cluster, [k for k, leader in leaders.items() if leader >= 0], LATEST
        )
        return sizes, high

    def _throughput(self, view: ClusterView, now_ms: int, metrics: Counters | None) -> None:
        """Rates of the cluster's and each topic's counters into the history:
        the brokers' metrics where they answered, else the protocol's growths."""
        view.throughput_source = "protocol" if metrics is None else "metrics"
        counters = protocol_counters(view) if metrics is None else metrics
        last, self._last = self._last, (now_ms, counters)
        if last is None:
            return
        rates = throughput(growth_rates(last[1], counters, (now_ms - last[0]) / 1000))
        series = SERIES if metrics is not None else PROTOCOL_SERIES
        for name in series:
            self.cluster.history.add(f"{CLUSTER}.{name}", now_ms, rates.get((None, name), 0.0))
        topic_history = self.cluster.topic_history
        view.topic_rates = {}
        for topic in view.topics:
            for name in series:
                rate = rates.get((topic, name))
                key = topic_series(topic, name)
                # A topic's series begins with its first traffic: idle topics cost nothing.
                if rate is not None and (rate > 0 or topic_history.has(key)):
                    topic_history.add(key, now_ms, rate)
            # No counter for it (metrics: no record since the broker started): idle.
            view.topic_rates[topic] = rates.get((topic, "messages_in"), 0.0)
        for gone in self._topics_seen - set(view.topics):
            topic_history.drop(*(topic_series(gone, name) for name in SERIES))
        self._topics_seen = set(view.topics)

    async def _metrics_totals(self) -> Counters | None:
        """Kafka's BrokerTopicMetrics counters of each broker's endpoint, all
        topics (topic None) and each topic; None when no endpoint answered."""
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
        counters: Counters = {}
        wanted = {f"{m}_total": key for key, m in METRICS.items()}
        for url, text in zip(self.cluster.metrics_urls, texts, strict=True):
            for family in text_string_to_metric_families(text or ""):
                for s in family.samples:
                    name = wanted.get(s.name)
                    if name is not None:
                        key = (url, s.labels.get("topic"), name)
                        counters[key] = counters.get(key, 0.0) + s.value
        return counters

    async def close(self) -> None:
        if self._measuring is not None:
            self._measuring.cancel()
            await asyncio.gather(self._measuring, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
