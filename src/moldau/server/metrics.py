"""A broker's metrics as Prometheus families, named as the Prometheus JMX exporter's
Kafka rules (those the common Kafka Grafana dashboards are built on) name Kafka's
MBeans: `kafka.server<type=ReplicaManager, name=LeaderCount><>Value` becomes
`kafka_server_replicamanager_leadercount`, a `...PerSec` meter's Count becomes
`..._total`, a histogram's percentiles become `{quantile="0.99"}` with a `_count`.
Consumer lag is named as kafka-exporter names it (`kafka_consumergroup_lag`).

Everything is read from the broker's state when scraped, on the event loop, so a
scrape sees one consistent moment and the request path pays nothing for it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from moldau.controller.states import PartitionState
from moldau.replication.topic_stats import TOPIC_METER_NAMES, TopicMeter

if TYPE_CHECKING:
    from moldau.server.broker import Broker

Labels = dict[str, str]

# The meters Kafka also keeps per topic (replication bytes are broker-wide only).
_PER_TOPIC = frozenset(TopicMeter) - {
    TopicMeter.REPLICATION_BYTES_IN,
    TopicMeter.REPLICATION_BYTES_OUT,
}
# Each client quota's measured rate: Kafka's metric name, and what it counts.
_QUOTA_RATES = {
    "Produce": ("byte_rate", "Bytes/s produced"),
    "Fetch": ("byte_rate", "Bytes/s fetched"),
    "Request": ("request_time", "Request handling time, % of the event loop"),
    "ControllerMutation": ("mutation_rate", "Partitions created or deleted/s"),
}
# Kafka's BrokerState: RUNNING and PENDING_CONTROLLED_SHUTDOWN.
_RUNNING = 3


def gauge(name: str, doc: str, samples: Iterable[tuple[Labels, float]]) -> Metric:
    m = Metric(name, doc, "gauge")
    for labels, value in samples:
        m.add_sample(name, labels, value)
    return m


def counter(name: str, doc: str, samples: Iterable[tuple[Labels, float]]) -> Metric:
    m = Metric(name, doc, "counter")
    for labels, value in samples:
        m.add_sample(name + "_total", labels, value)
    return m


class BrokerCollector(Collector):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        yield from self._server()
        yield from self._replica_manager()
        yield from self._topics()
        yield from self._requests()
        yield from self._purgatories()
        yield from self._controller()
        yield from self._consumer_groups()
        yield from self._transactions()
        yield from self._quotas()

    def _server(self) -> Iterator[Metric]:
        b = self.broker
        state = _RUNNING if b.started else 0
        yield gauge("kafka_server_kafkaserver_brokerstate", "Kafka's BrokerState", [({}, state)])

    def _replica_manager(self) -> Iterator[Metric]:
        rm = self.broker.replica_manager
        leaders = [p for p in rm.partitions.values() if p.is_leader and p.log is not None]
        under = at_min = under_min = 0
        for p in leaders:
            isr = len(p.isr)
            min_isr = p.log.config.min_insync_replicas if p.log is not None else 1
            under += isr < len(p.assigned_replicas)
            under_min += isr < min_isr
            at_min += isr == min_isr
        prefix = "kafka_server_replicamanager_"
        hosted = len(rm.partitions)
        yield gauge(prefix + "partitioncount", "Partitions on this broker", [({}, hosted)])
        yield gauge(prefix + "leadercount", "Partitions this broker leads", [({}, len(leaders))])
        yield gauge(
            prefix + "underreplicatedpartitions",
            "Partitions led here whose ISR is smaller than their replicas",
            [({}, under)],
        )
        yield gauge(
            prefix + "underminisrpartitioncount",
            "Partitions led here whose ISR is below min.insync.replicas",
            [({}, under_min)],
        )
        yield gauge(
            prefix + "atminisrpartitioncount",
            "Partitions led here whose ISR is at min.insync.replicas",
            [({}, at_min)],
        )
        yield gauge(
            prefix + "offlinereplicacount",
            "Replicas on this broker in a failed log directory",
            [({}, len(rm.offline_partitions))],
        )
        meters = rm.isr_meters
        yield counter(prefix + "isrshrinks", "ISR shrinks confirmed", [({}, meters.shrinks)])
        yield counter(prefix + "isrexpands", "ISR expansions confirmed", [({}, meters.expands)])
        yield counter(
            prefix + "failedisrupdates", "ISR changes the controller refused", [({}, meters.failed)]
        )

    def _topics(self) -> Iterator[Metric]:
        stats = self.broker.topic_stats
        for meter, name in TOPIC_METER_NAMES.items():
            samples: list[tuple[Labels, float]] = [({}, stats.all_topics[meter])]
            if meter in _PER_TOPIC:
                samples += [({"topic": t}, c[meter]) for t, c in sorted(stats.topics.items())]
            yield counter(
                f"kafka_server_brokertopicmetrics_{name.lower()}",
                f"Kafka's BrokerTopicMetrics {name}PerSec count",
                samples,
            )

    def _requests(self) -> Iterator[Metric]:
        metrics = self.broker.request_metrics
        yield counter(
            "kafka_network_requestmetrics_requests",
            "Requests by API and version",
            [
                ({"request": name, "version": str(version)}, n)
                for (name, version), n in sorted(metrics.requests.items())
            ],
        )
        name = "kafka_network_requestmetrics_totaltimems"
        m = Metric(name, "Time from a request's arrival to its response, ms", "summary")
        for request, histogram in sorted(metrics.total_time_ms.items()):
            for q, value in histogram.quantiles():
                m.add_sample(name, {"request": request, "quantile": _quantile(q)}, value)
            m.add_sample(name + "_count", {"request": request}, histogram.count)
            m.add_sample(name + "_sum", {"request": request}, histogram.total)
        yield m

    def _quotas(self) -> Iterator[Metric]:
        """Kafka's client quota sensors (kafka.server<type=Produce, user=U,
        client-id=C>, and Fetch, Request, ControllerMutation): the rate each set of
        clients sharing a quota uses, and the mean throttle time they were given,
        over the quota window; absent while no quota of the type is set."""
        for manager in self.broker.quotas.managers:
            group = manager.quota_type.group.lower()
            measured = [({"user": u, "client_id": c}, rate, throttle)
                        for (u, c), rate, throttle in manager.metrics()]  # fmt: skip
            if not measured:
                continue
            rate_name, unit = _QUOTA_RATES[manager.quota_type.group]
            yield gauge(f"kafka_server_{group}_{rate_name}", unit,
                        [(labels, rate) for labels, rate, _ in measured])  # fmt: skip
            yield gauge(f"kafka_server_{group}_throttle_time", "Mean throttle time, ms",
                        [(labels, t) for labels, _, t in measured])  # fmt: skip

    def _purgatories(self) -> Iterator[Metric]:
        rm = self.broker.replica_manager
        sizes = [
            (rm.produce_purgatory.name, rm.produce_purgatory.watched()),
            (rm.fetch_purgatory.name, rm.fetch_purgatory.watched()),
            (rm.delete_records_purgatory.name, rm.delete_records_purgatory.watched()),
        ]
        yield gauge(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests waiting in each purgatory",
            [({"delayedoperation": name}, size) for name, size in sizes],
        )

    def _controller(self) -> Iterator[Metric]:
        controller = self.broker.controller
        active = controller.is_active
        ctx = controller.ctx
        offline = preferred_imbalance = topics = partitions = 0
        if active:
            topics = len(ctx.all_topics)
            partitions = len(ctx.assignments)
            for tp, state in ctx.partition_states.items():
                if state == PartitionState.OFFLINE and tp.topic not in ctx.topics_to_be_deleted:
                    offline += 1
            for tp, replicas in ctx.assignments.items():
                li = ctx.leadership.get(tp)
                if replicas and li is not None and li.leader_and_isr.leader != replicas[0]:
                    preferred_imbalance += tp.topic not in ctx.topics_to_be_deleted
        prefix = "kafka_controller_kafkacontroller_"
        for name, doc, value in [
            ("activecontrollercount", "1 on the active controller", int(active)),
            ("offlinepartitionscount", "Partitions without a live leader", offline),
            (
                "preferredreplicaimbalancecount",
                "Partitions not led by their preferred replica",
                preferred_imbalance,
            ),
            ("globaltopiccount", "Topics in the cluster", topics),
            ("globalpartitioncount", "Partitions in the cluster", partitions),
        ]:
            yield gauge(prefix + name, doc + " (0 unless the active controller)", [({}, value)])

    def _consumer_groups(self) -> Iterator[Metric]:
        """Committed offsets and lag of the groups this broker coordinates, for the
        partitions it holds a replica of (their high watermark is known here)."""
        coordinator = self.broker.group_coordinator
        partitions = self.broker.replica_manager.partitions
        current: list[tuple[Labels, float]] = []
        lag: list[tuple[Labels, float]] = []
        members: list[tuple[Labels, float]] = []
        for group_id, group in sorted(coordinator.groups.items()):
            members.append(({"consumergroup": group_id}, len(group.members)))
            for tp, committed in sorted(group.offsets.items()):
                labels = {
                    "consumergroup": group_id,
                    "topic": tp.topic,
                    "partition": str(tp.partition),
                }
                current.append((labels, committed.offset))
                p = partitions.get(tp)
                if p is not None and p.log is not None:
                    lag.append((labels, max(0, p.high_watermark - committed.offset)))
        yield gauge("kafka_consumergroup_members", "Members of each group", members)
        yield gauge("kafka_consumergroup_current_offset", "Committed offset per partition", current)
        yield gauge("kafka_consumergroup_lag", "High watermark minus committed offset", lag)

    def _transactions(self) -> Iterator[Metric]:
        """The partitions' last stable offset lag (Kafka's Partition
        LastStableOffsetLag: HW minus LSO, above 0 while a transaction is open) and
        the transaction coordinator's state."""
        lags = [
            ({"topic": tp.topic, "partition": str(tp.partition)},
             max(0, p.high_watermark - p.last_stable_offset))
            for tp, p in sorted(self.broker.replica_manager.partitions.items())
            if p.is_leader and p.log is not None
        ]  # fmt: skip
        yield gauge(
            "kafka_cluster_partition_laststableoffsetlag",
            "High watermark minus last stable offset, per partition led here",
            lags,
        )
        txn = self.broker.txn_coordinator
        channel = txn.marker_channel
        yield gauge(
            "kafka_coordinator_transaction_transactionmarkerchannelmanager_logappendretryqueuesize",
            "Completions of transactions waiting to be written to the log again",
            [({}, channel.log_append_retries)],
        )
        states = txn.state_manager.txn_counts_by_state()
        yield gauge(
            "moldau_transaction_coordinator_transactions",
            "Transactional ids this broker coordinates, per state",
            [({"state": name}, n) for name, n in sorted(states.items())],
        )
        yield gauge(
            "moldau_transaction_coordinator_pending_markers",
            "Transactions whose markers are not all written yet",
            [({}, channel.num_txns_with_pending_markers)],
        )
        manager = txn.state_manager
        yield gauge(
            "moldau_transaction_coordinator_partitions",
            "__transaction_state partitions this broker leads, and of them those loading",
            [({"status": "owned"}, manager.partitions_owned),
             ({"status": "loading"}, manager.partitions_loading)],
        )  # fmt: skip


def _quantile(q: float) -> str:
    """The JMX exporter's quantile labels: 0.50, 0.75, ..., 0.99, 0.999."""
    return f"{q:.3f}".rstrip("0") if q > 0.99 else f"{q:.2f}"
