"""Broker: one Kafka broker's lifecycle. It wires the storage, replication,
coordinator, controller and network layers together, starts them in order and
stops them in reverse; every background task it runs belongs to its TaskOwner."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.exposition import generate_latest

from moldau.clock import SYSTEM_CLOCK, Clock
from moldau.config.broker import LONG_MAX, BrokerConfig
from moldau.controller.admin import TopicAdmin
from moldau.controller.channel import BrokerTransport, InProcessTransport
from moldau.controller.controller import Controller, LeaderRebalance
from moldau.coordinator.group_coordinator import GroupConfig, GroupCoordinator
from moldau.coordinator.offsets_topic import TooFewBrokersReport
from moldau.coordinator.producer_ids import ProducerIdManager
from moldau.coordinator.transaction.config import TransactionConfig
from moldau.coordinator.transaction.coordinator import TransactionCoordinator
from moldau.metadata.client import MetadataClient
from moldau.metadata.store import MetadataStore, StoreError
from moldau.metadata.znodes import BrokerRegistration, EndPoint, new_cluster_id
from moldau.protocol import alter_partition as ap
from moldau.protocol import controlled_shutdown
from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import encode_body
from moldau.protocol.control import (
    UNKNOWN_BROKER_EPOCH,
    AlterPartitionItem,
    AlterPartitionResult,
    ControlRequest,
    ControlResponse,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
    stale_broker_epoch_response,
)
from moldau.protocol.errors import (
    ErrorCode,
    InvalidConfigError,
    KafkaError,
    StaleControllerEpochError,
)
from moldau.protocol.wire import Reader
from moldau.replication.fetcher import FetcherConfig
from moldau.replication.purgatory import AsyncioTimer, Timer
from moldau.replication.quota import throttled_partitions
from moldau.replication.replica_manager import ReplicaManager
from moldau.replication.topic_stats import BrokerTopicStats
from moldau.security.authorizer import Authorizer, parse_super_users
from moldau.security.credentials import CredentialCache
from moldau.security.listeners import (
    Listener,
    advertised_listeners,
    broker_listeners,
    inter_broker_listener,
)
from moldau.security.sasl import (
    SaslServer,
    check_mechanisms,
    enabled_mechanisms,
    sasl_server_factory,
)
from moldau.security.sasl_client import inter_broker_client_factory
from moldau.security.ssl_principal import PrincipalMapper, ssl_principal
from moldau.server.acl_cache import AclCache
from moldau.server.add_partitions_to_txn import AddPartitionsToTxnManager, NetworkVerifySender
from moldau.server.admin_manager import AdminManager
from moldau.server.alter_partition_manager import AlterPartitionManager
from moldau.server.apis import KafkaApis
from moldau.server.control_client import Authenticate, NetworkTransport
from moldau.server.dynamic_broker_config import DynamicBrokerConfig
from moldau.server.dynamic_config_manager import DynamicConfigManager
from moldau.server.fetch_session import FetchManager, FetchSessionCache
from moldau.server.inter_broker_sasl import sasl_authenticator
from moldau.server.metadata_cache import MetadataCache
from moldau.server.metrics import BrokerCollector
from moldau.server.metrics_http import MetricsServer
from moldau.server.network import SocketServer
from moldau.server.quotas import BrokerQuotas
from moldau.server.replica_fetch_client import NetworkFetchClient
from moldau.server.request_metrics import RequestMetrics
from moldau.server.tls import client_context, server_context
from moldau.server.txn_markers import BrokerMarkerSender
from moldau.server.txn_verification import TransactionVerifier, broker_verifier
from moldau.storage.cleaner import clean, dirty_ratio
from moldau.storage.log_dir_failure import LogDirFailureChannel
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

# How long start-up waits for the controller's first UpdateMetadata.
STARTUP_METADATA_TIMEOUT_S = 30.0
FILE_DELETE_CHECK_INTERVAL_MS = 1000
IDLE_CHECK_INTERVAL_MS = 10_000


def inter_broker_tls(config: BrokerConfig, listener: Listener) -> ssl.SSLContext | None:
    """The client side of this broker's links to the others, when their listener
    is SSL or SASL_SSL (its ssl.* configs: listener.name.<l>.ssl.* over the
    broker-wide ones)."""
    if not listener.tls:
        return None
    return client_context(lambda name: config.for_listener(listener.name, name))


def inter_broker_authenticator(config: BrokerConfig, listener: Listener) -> Authenticate | None:
    """What a link to another broker does first on a SASL inter-broker listener: log
    in with sasl.mechanism.inter.broker.protocol and that listener's JAAS username
    and password (None on other listeners). InvalidConfigError if it cannot."""
    if not listener.sasl:
        return None
    mechanism = config["sasl.mechanism.inter.broker.protocol"]
    if mechanism not in enabled_mechanisms(config, listener.name):
        raise InvalidConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism} must be in the "
            f"sasl.enabled.mechanisms of inter-broker listener {listener.name}"
        )
    try:
        login = inter_broker_client_factory(config, listener.name)
    except ValueError as e:
        raise InvalidConfigError(str(e)) from None
    return sasl_authenticator(login, f"broker-{config['broker.id']}")


def principal_of(mapper: PrincipalMapper, cert: dict[str, Any] | None) -> str | None:
    return ssl_principal(cert, mapper)


def listener_tls(config: BrokerConfig, listener: Listener) -> ssl.SSLContext | None:
    """The server side of an SSL or SASL_SSL listener. A SASL_SSL listener asks
    for client certificates only if its own listener.name.<l>.ssl.client.auth
    says so, never from the broker-wide value (KIP-684)."""
    if not listener.tls:
        return None

    def get(name: str) -> Any:
        if name == "ssl.client.auth" and listener.sasl:
            prefixed = f"listener.name.{listener.name.lower()}.{name}"
            return config.for_listener(listener.name, name) if prefixed in config.raw else "none"
        return config.for_listener(listener.name, name)

    return server_context(listener.name, get)


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore,
        transport: BrokerTransport,
        clock: Clock = SYSTEM_CLOCK,
        timer: Timer | None = None,
        reachable: Callable[[int], bool] | None = None,
    ) -> None:
        """`reachable` says whether another broker can be reached (in-process
        clusters cut one off the network with it)."""
        self.config = config
        self.broker_id = config.broker_id
        if self.broker_id < 0:
            raise InvalidConfigError("broker.id must be set (0 or more)")
        self.clock = clock
        self.timer = timer or AsyncioTimer()
        # Listeners, their TLS contexts and the inter-broker one's client side, all
        # checked here: a bad TLS config stops the start with one clear line.
        self.listeners = broker_listeners(config)
        advertised_listeners(config)
        self.inter_broker_listener = inter_broker_listener(config, self.listeners)
        self.listener_tls = {lis.name: listener_tls(config, lis) for lis in self.listeners}
        self.inter_broker_ssl = inter_broker_tls(config, self.inter_broker_listener)
        # SASL: the SCRAM credentials of /config/users, and a mechanism factory per
        # SASL listener; one that enables what Moldau cannot serve stops start-up here.
        self.credentials = CredentialCache()
        sasl_listeners = [lis.name for lis in self.listeners if lis.sasl]
        try:
            check_mechanisms(config, sasl_listeners)
        except ValueError as e:
            raise InvalidConfigError(str(e)) from None
        self._sasl_factories = {
            name: sasl_server_factory(config, name, self.credentials) for name in sasl_listeners
        }
        self.store = store
        self.client = MetadataClient(store)
        self.transport = transport
        self.cluster_id = ""
        self.epoch = -1
        self.failure_channel = LogDirFailureChannel()
        self.log_manager = LogManager(
            config.log_dirs, clock, self.broker_id, self.failure_channel,
            producer_id_expiration_ms=config["producer.id.expiration.ms"],
        )  # fmt: skip
        self.metadata_cache = MetadataCache(self.broker_id)
        # Logs why __consumer_offsets waits for more brokers, once per situation.
        self.offsets_topic_report = TooFewBrokersReport()
        self.dynamic_config = DynamicBrokerConfig(self.client, config)
        # Topics take their defaults from the dynamic broker configs over server.properties.
        self.config_manager = DynamicConfigManager(
            self.client, self.dynamic_config, self.log_manager
        )
        self.config_manager.broker_listeners.append(self.dynamic_config.on_change)
        self.dynamic_config.listeners.append(self._update_quota_bounds)
        self.dynamic_config.listeners.append(self.config_manager.reconfigure)
        # The ACLs, when authorizer.class.name names an authorizer (None: no checks).
        self.acl_cache: AclCache | None = None
        if config["authorizer.class.name"]:
            self.acl_cache = AclCache(
                self.client,
                parse_super_users(config["super.users"]),
                bool(config["allow.everyone.if.no.acl.found"]),
            )
        self.alter_partition_manager = AlterPartitionManager(self._send_alter_partition)
        self.fetch_manager = FetchManager(
            FetchSessionCache(config["max.incremental.fetch.session.cache.slots"], clock)
        )

        # Links to other brokers' inter-broker listeners, as UpdateMetadata names
        # them: to the active controller (AlterPartition), and to the leaders a
        # follower fetches from (one connection per fetcher: one request in flight).
        # Over TLS when that listener is SSL/SASL_SSL, authenticated with SASL
        # when it is SASL_PLAINTEXT/SASL_SSL (inter_broker_authenticator).
        inter_broker = self.inter_broker_listener.name
        tls = self.inter_broker_ssl
        auth = inter_broker_authenticator(config, self.inter_broker_listener)

        def endpoint(b: int) -> tuple[str, int] | None:
            return self.metadata_cache.endpoint(b, inter_broker)

        timeout = config["controller.socket.timeout.ms"]
        self.controller_link = NetworkTransport(
            self.broker_id,
            endpoint,
            timeout,
            reachable=reachable,
            ssl_context=tls,
            authenticate=auth,
            clock=clock,
        )
        self.fetch_client = NetworkFetchClient(
            lambda: NetworkTransport(
                self.broker_id,
                endpoint,
                timeout + config["replica.fetch.wait.max.ms"],
                reachable=reachable,
                ssl_context=tls,
                authenticate=auth,
                clock=clock,
            )
        )
        fetcher_config = FetcherConfig(
            config["replica.fetch.wait.max.ms"],
            config["replica.fetch.min.bytes"],
            config["replica.fetch.response.max.bytes"],
            config["replica.fetch.max.bytes"],
            config["replica.fetch.backoff.ms"],
            config["num.replica.fetchers"],
        )
        self.topic_stats = BrokerTopicStats()
        self.request_metrics = RequestMetrics()
        self.replica_manager = ReplicaManager(
            self.broker_id, self.log_manager, clock, self.timer, self.config_manager.log_config,
            config["replica.lag.time.max.ms"], self.alter_partition_manager,
            self.fetch_client, fetcher_config, self.topic_stats,
            (config["replication.quota.window.num"],
             config["replication.quota.window.size.seconds"] * 1000),
            lambda broker_id: broker_id in self.metadata_cache.brokers,
        )  # fmt: skip
        self.group_coordinator = GroupCoordinator(
            self.broker_id,
            self.replica_manager,
            clock,
            self.timer,
            GroupConfig(
                num_partitions=config["offsets.topic.num.partitions"],
                min_session_timeout_ms=config["group.min.session.timeout.ms"],
                max_session_timeout_ms=config["group.max.session.timeout.ms"],
                initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
                offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
                max_metadata_size=config["offset.metadata.max.bytes"],
            ),
        )
        self.producer_ids = ProducerIdManager(self.broker_id, store)
        # The transaction coordinator's link to partition leaders (WriteTxnMarkers).
        self.marker_link = NetworkTransport(
            self.broker_id,
            endpoint,
            config["request.timeout.ms"],
            client_id=f"broker-{self.broker_id}-txn-marker-sender",
            reachable=reachable,
            ssl_context=tls,
            authenticate=auth,
            clock=clock,
        )
        self.txn_coordinator = TransactionCoordinator(
            self.broker_id,
            self.replica_manager,
            self.producer_ids,
            BrokerMarkerSender(self, self.marker_link),
            self.group_coordinator.partition_for,
            clock,
            TransactionConfig(
                num_partitions=config["transaction.state.log.num.partitions"],
                max_timeout_ms=config["transaction.max.timeout.ms"],
                transactional_id_expiration_ms=config["transactional.id.expiration.ms"],
                abort_timed_out_transaction_cleanup_interval_ms=config[
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms"
                ],
                remove_expired_transaction_cleanup_interval_ms=config[
                    "transaction.remove.expired.transaction.cleanup.interval.ms"
                ],
                request_timeout_ms=config["request.timeout.ms"],
            ),
        )
        # KIP-890: a leader asks the coordinator (its own link: one request in flight
        # per broker) before a transactional batch starts a transaction. None: off.
        self.verify_link = NetworkTransport(
            self.broker_id,
            endpoint,
            config["request.timeout.ms"],
            client_id=f"broker-{self.broker_id}-add-partitions-to-txn-sender",
            reachable=reachable,
            ssl_context=tls,
            authenticate=auth,
            clock=clock,
        )
        self.txn_verification = AddPartitionsToTxnManager(NetworkVerifySender(self.verify_link))
        self.txn_verifier: TransactionVerifier | None = (
            broker_verifier(self, self.txn_verification)
            if config["transaction.partition.verification.enable"]
            else None
        )
        self.admin_manager = AdminManager(
            config, TopicAdmin(self.client), self.metadata_cache, self.timer
        )
        self.controller = Controller(
            self.broker_id,
            self.client,
            transport,
            clock,
            self._unclean_election_enabled,
            config["delete.topic.enable"],
            LeaderRebalance(
                config["leader.imbalance.per.broker.percentage"],
                float(config["leader.imbalance.check.interval.seconds"]),
            )
            if config["auto.leader.rebalance.enable"]
            else None,
            register_broker=self._register,
        )
        self.config_manager.listeners.append(self._on_topic_config_change)
        self.apis = KafkaApis(self)
        self.config_manager.user_listeners.append(self._load_user)
        self.quotas = BrokerQuotas(config, clock)
        self.config_manager.quota_listeners.append(self._load_quotas)
        self.servers: list[SocketServer] = []
        # Encoded Metadata responses, keyed on the metadata cache version.
        self.metadata_responses: dict[tuple[Any, ...], bytes] = {}
        self.tasks = TaskOwner(f"broker-{self.broker_id}")
        self.metrics_server: MetricsServer | None = None
        self._metadata_ready = asyncio.Event()
        self.metadata_cache.listeners.append(self._on_metadata)
        self.started = False
        # Set once started: until then client requests wait, and Metadata answers
        # that no leader is known yet (see KafkaApis).
        self.serving = asyncio.Event()
        # Set when the broker must stop by itself (every log directory failed), with
        # the reason; whoever runs the broker waits on it and shuts it down.
        self.failed = asyncio.Event()
        self.failure: str | None = None

    # -- start-up ------------------------------------------------------------------------

    async def start(self) -> None:
        config = self.config
        await self.store.start()
        await self.client.create_top_level_paths()
        self.cluster_id = await self.client.get_or_create_cluster_id(
            config["cluster.id"] or new_cluster_id()
        )
        await self.config_manager.load(self._topics_on_disk())
        await self.dynamic_config.load()
        if self.acl_cache is not None:
            # Before listening: no request is decided without the ACLs.
            await self.acl_cache.start()
        self._update_quota_bounds()
        for topic in list(self.config_manager.overrides):
            self._update_throttled_replicas(topic)
        loop = asyncio.get_running_loop()

        def on_failure(log_dir: Path) -> None:
            # Failures may be reported from a flush's worker thread.
            loop.call_soon_threadsafe(self._on_log_dir_failure, log_dir)

        self.failure_channel.listeners.append(on_failure)
        # The SCRAM users before listening: logins are served while the broker starts.
        await self._load_users()
        await self.quotas.load(self.client)
        # Listen first: while the logs load (on worker threads, the event loop free),
        # clients connect and are told to wait (see KafkaApis: `serving`).
        for listener in self.listeners:
            tls = self.listener_tls[listener.name]
            mapper = PrincipalMapper(
                config.for_listener(listener.name, "ssl.principal.mapping.rules")
            )
            server = SocketServer(
                listener.host,
                listener.port,
                listener.name,
                self.apis.handle,
                config["socket.request.max.bytes"],
                config["max.connections"],
                self.clock.monotonic_ms,
                security_protocol=listener.security_protocol,
                ssl_context=tls,
                principal_of=functools.partial(principal_of, mapper) if tls else None,
            )
            await server.start()
            self.servers.append(server)
        await asyncio.to_thread(
            self.log_manager.startup,
            self.config_manager.log_config,
            self.cluster_id,
            config["num.recovery.threads.per.data.dir"],
        )
        self.replica_manager.startup()
        await self.config_manager.start()
        # Again once the notifications are followed, so that no change made while
        # the logs loaded is missed (one read twice is harmless).
        await self._load_users()
        await self.quotas.load(self.client)
        if config["metrics.port"] is not None:
            collector = BrokerCollector(self)
            self.metrics_server = MetricsServer(
                self.listeners[0].host, config["metrics.port"], lambda: generate_latest(collector)
            )
            await self.metrics_server.start()
        if isinstance(self.transport, InProcessTransport):
            self.transport.brokers[self.broker_id] = self
        await self._register()
        await self.controller.start()
        self.alter_partition_manager.start()
        try:
            async with asyncio.timeout(STARTUP_METADATA_TIMEOUT_S):
                await self._metadata_ready.wait()
        except TimeoutError:
            log.warning("broker %d: no metadata from the controller yet", self.broker_id)
        self._start_background_tasks()
        self.started = True
        self.serving.set()

    async def _register(self) -> None:
        """Register (ephemeral); the broker epoch is the registration's czxid. On
        ZooKeeper, one left by this id's killed process lasts until its session
        expires: wait that out rather than fail at once. The controller calls this
        again on a new session, before it takes part in the election (Kafka's
        RegisterBrokerAndReelect)."""
        config = self.config
        wait_s = (
            config["zookeeper.session.timeout.ms"] / 1000 + 1 if config["zookeeper.connect"] else 0
        )
        registration = BrokerRegistration(self.broker_id, self.advertised_endpoints(), config.rack)
        self.epoch = await self.client.register_broker(
            registration, self.clock.milliseconds(), wait_s=wait_s
        )
        log.info("broker %d registered, broker epoch %d", self.broker_id, self.epoch)

    def _topics_on_disk(self) -> set[str]:
        topics = set()
        for d in self.log_manager.log_dirs:
            try:
                with os.scandir(d) as entries:
                    names = [e.name for e in entries if e.is_dir()]
            except OSError:
                continue  # missing or unreadable: LogManager.startup creates it or fails it
            for name in names:
                with contextlib.suppress(ValueError):
                    topics.add(TopicPartition.parse_dir_name(name).topic)
        return topics

    def advertised_endpoints(self) -> tuple[EndPoint, ...]:
        """advertised.listeners if set, else the listeners with their bound ports
        (and this host's name where they bind every interface)."""
        bound = {s.listener_name: s.port for s in self.servers}
        listeners = advertised_listeners(self.config) or self.listeners
        out = []
        for listener in listeners:
            host = listener.host
            if host in ("", "0.0.0.0", "::"):
                host = socket.getfqdn()
            port = listener.port or bound.get(listener.name, listener.port)
            out.append(EndPoint(listener.name, host, port, listener.security_protocol))
        return tuple(out)

    @property
    def port(self) -> int:
        """The first listener's bound port (useful with port 0)."""
        return self.servers[0].port

    # -- SASL ----------------------------------------------------------------------------

    def sasl_mechanisms(self, listener: str) -> list[str]:
        """The mechanisms a listener serves (none on a listener without SASL)."""
        return enabled_mechanisms(self.config, listener) if listener in self._sasl_factories else []

    def sasl_server(self, listener: str, mechanism: str) -> SaslServer | None:
        factory = self._sasl_factories.get(listener)
        return None if factory is None else factory(mechanism)

    async def _load_users(self) -> None:
        for user in await self.client.get_config_users():
            await self._load_user(user)

    async def _load_user(self, user: str) -> None:
        config = await self.client.get_user_config(user)
        try:
            self.credentials.update_user(user, config)
        except ValueError as e:
            log.error("user %s: SCRAM credentials unreadable, ignored: %s", user, e)
            self.credentials.remove_user(user)

    async def _load_quotas(self, entity_path: str) -> None:
        await self.quotas.on_change(self.client, entity_path)

    def _on_metadata(self) -> None:
        if self.broker_id in self.metadata_cache.brokers:
            self._metadata_ready.set()

    def _start_background_tasks(self) -> None:
        config = self.config
        self._every("retention", config["log.retention.check.interval.ms"], self._retention)
        self._every("flush", 1000, self._flush)
        self._every(
            "checkpoint",
            config["log.flush.offset.checkpoint.interval.ms"],
            self._checkpoint_offsets,
        )
        self._every(
            "hw-checkpoint",
            config["replica.high.watermark.checkpoint.interval.ms"],
            self._checkpoint_hws,
        )
        self._every(
            "isr-expiration",
            config["replica.lag.time.max.ms"] // 2,
            self.replica_manager.shrink_isrs,
        )
        self._every("file-delete", FILE_DELETE_CHECK_INTERVAL_MS, self._delete_files)
        self._every("idle", IDLE_CHECK_INTERVAL_MS, self._close_idle)
        if config["log.cleaner.enable"]:
            self.tasks.spawn(self._log_cleaner(), "log-cleaner")
        self._every(
            "offsets-expiry",
            config["offsets.retention.check.interval.ms"],
            self.group_coordinator.expire_offsets,
        )
        self.txn_coordinator.start()
        self._every(
            "producer-expiration",
            config["producer.id.expiration.check.interval.ms"],
            self._remove_expired_producers,
        )

    def _every(self, name: str, interval_ms: int, fn: Callable[[], Any]) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000)
                try:
                    result = fn()
                    if asyncio.iscoroutine(result):
                        await result
                except KafkaError as e:
                    # E.g. a log directory went offline (logged there, with its cause).
                    log.warning("broker %d: %s: %s", self.broker_id, name, e)
                except Exception:
                    # One failed round must not stop the chore for the broker's lifetime.
                    log.exception("broker %d: %s failed", self.broker_id, name)

        self.tasks.spawn(loop(), name)

    async def _log_cleaner(self) -> None:
        """Compact the logs of compacted topics whose dirty ratio is high enough, one
        at a time, yielding to request handling between batches."""
        backoff = self.config["log.cleaner.backoff.ms"] / 1000
        manager = self.log_manager
        while True:
            cleaned_any = False
            for tp, lg in list(manager.logs.items()):
                if not lg.config.compact:
                    continue
                now = self.clock.milliseconds()
                first_dirty = manager.cleaner_checkpoints.get(tp, lg.log_start_offset)
                # Only what is committed and decided: below the last stable offset.
                stable = self.replica_manager.last_stable_offset(tp)
                if dirty_ratio(lg, first_dirty, stable, now) < lg.config.min_cleanable_dirty_ratio:
                    continue
                steps = clean(lg, first_dirty, stable, now)
                try:
                    while True:
                        next(steps)
                        await asyncio.sleep(0)
                except StopIteration as done:
                    result = done.value
                except OSError as e:
                    # The cleaner's own writes (.cleaned segments) count as the log
                    # directory's I/O: it goes offline (Kafka's LogCleaner), unless
                    # the log was deleted under it.
                    if not lg.closed:
                        self.failure_channel.fail(lg.log_dir, f"cleaning {tp}", e)
                    continue
                except KafkaError:
                    continue  # deleted meanwhile, or its directory is offline
                if result is None:
                    continue
                cleaned_any = True
                manager.cleaner_checkpoints[tp] = result.first_dirty_offset
                log.info(
                    "cleaned %s: %d segments, %d -> %d bytes, %d records removed",
                    tp, result.segments, result.bytes_before, result.bytes_after,
                    result.records_removed,
                )  # fmt: skip
            if not cleaned_any:
                await asyncio.sleep(backoff)

    # -- ISR changes to the controller -------------------------------------------------

    async def _send_alter_partition(
        self, items: tuple[AlterPartitionItem, ...]
    ) -> tuple[ErrorCode, list[AlterPartitionResult]]:
        """To the active controller: this broker's own, or over the wire."""
        if self.controller.is_active:
            error, results = await self.controller.alter_partition(
                self.broker_id, self.epoch, items
            )
            return error, list(results)
        controller_id = self.metadata_cache.controller_id
        if controller_id is None or controller_id == self.broker_id:
            raise ConnectionError("no active controller known yet")
        topic_ids = self.metadata_cache.topic_ids
        if any(item.topic not in topic_ids for item in items):
            raise ConnectionError("a topic id is not known yet")
        request = ap.build_request(self.broker_id, self.epoch, items, topic_ids)
        body = await self.controller_link.request(
            controller_id, ApiKey.ALTER_PARTITION, ap.VERSION, encode_body(request)
        )
        response = ap.decode_response_body(body)
        return ap.response_results(response, {v: k for k, v in topic_ids.items()})

    # -- log directory failures (Kafka's LogDirFailureHandler) ----------------------------

    def _on_log_dir_failure(self, log_dir: Path) -> None:
        with contextlib.suppress(RuntimeError):  # shutting down
            self.tasks.spawn(self._handle_log_dir_failure(log_dir), "log-dir-failure")

    async def _handle_log_dir_failure(self, log_dir: Path) -> None:
        """Take the directory's partitions offline, then tell the controller so it
        can elect other leaders; with no directory left, stop the broker."""
        self.replica_manager.handle_log_dir_failure(log_dir)
        if not self.log_manager.live_log_dirs:
            self.failure = (
                f"shutting down broker {self.broker_id}: "
                f"{self.log_manager.all_dirs_failed_message()}"
            )
            log.error("%s", self.failure)
            self.failed.set()
            return
        backoff = 0.5
        while True:
            try:
                await self.client.propagate_log_dir_event(self.broker_id)
                return
            except StoreError as e:
                # E.g. the embedded store's own disk is the one that failed: keep
                # trying, the controller must learn of it.
                log.error(
                    "broker %d: could not tell the controller that %s failed: %s",
                    self.broker_id, log_dir, e,
                )  # fmt: skip
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10.0)

    def _retention(self) -> None:
        deleted = self.log_manager.cleanup_logs(self.replica_manager.high_watermark)
        if deleted:
            log.info("retention deleted %d segments", deleted)

    async def _flush(self) -> None:
        for lg, offset in self.log_manager.logs_due_for_flush():
            try:
                # fsync blocks: keep it off the event loop.
                await asyncio.to_thread(lg.flush, offset)
            except KafkaError as e:
                # One log's directory failed (logged there) or it was deleted: the
                # others are still flushed.
                log.warning("broker %d: flush: %s", self.broker_id, e)

    # Checkpoints fsync, which can take long on a busy disk: off the event loop, from
    # a snapshot taken on it.
    async def _checkpoint_offsets(self) -> None:
        snapshot = self.log_manager.checkpoint_snapshot()
        await asyncio.to_thread(self.log_manager.write_checkpoints, snapshot)

    async def _checkpoint_hws(self) -> None:
        snapshot = self.replica_manager.high_watermarks_by_dir()
        await asyncio.to_thread(self.replica_manager.write_high_watermarks, snapshot)

    def _remove_expired_producers(self) -> None:
        expired = self.log_manager.remove_expired_producers()
        if expired:
            log.info(
                "broker %d: %d producer ids idle for producer.id.expiration.ms expired",
                self.broker_id, expired,
            )  # fmt: skip

    def _delete_files(self) -> None:
        self.log_manager.delete_expired_files()

    def _close_idle(self) -> None:
        for server in self.servers:
            server.close_idle(self.config["connections.max.idle.ms"])

    # -- control requests from the controller -------------------------------------------

    async def handle_control_request(self, request: ControlRequest) -> ControlResponse:
        if request.broker_epoch != UNKNOWN_BROKER_EPOCH and request.broker_epoch < self.epoch:
            # Meant for this broker's previous registration (Kafka's isBrokerEpochStale):
            # built before the controller saw it restart, or by a deposed controller.
            log.info(
                "broker %d: ignoring %s of broker epoch %d < %d from controller %d (epoch %d)",
                self.broker_id, type(request).__name__, request.broker_epoch, self.epoch,
                request.controller_id, request.controller_epoch,
            )  # fmt: skip
            return stale_broker_epoch_response(request)
        if isinstance(request, LeaderAndIsrRequest):
            await self.config_manager.ensure_loaded({s.topic for s in request.partition_states})
            led = self.replica_manager.become_leader_or_follower(request)
            self.metadata_cache.apply_leadership(list(request.partition_states))
            return led
        if isinstance(request, StopReplicaRequest):
            response = self.replica_manager.stop_replicas(request)
            if any(s.delete_partition for s in request.partition_states):
                # No checkpoint may name a deleted log once the deletion is answered: a
                # topic created again under its name would inherit its log start, recovery
                # point and HW after a crash (Kafka checkpoints at deletion too).
                await self._checkpoint_offsets()
                await self._checkpoint_hws()
            for s in request.partition_states:
                if s.delete_partition and not any(
                    tp.topic == s.topic for tp in self.replica_manager.partitions
                ):
                    self.config_manager.forget(s.topic)
            return response
        if isinstance(request, UpdateMetadataRequest):
            # One controller epoch for the three requests, as Kafka's ReplicaManager
            # keeps: a deposed controller's UpdateMetadata is refused once a
            # LeaderAndIsr of its successor has come, and the other way round.
            rm = self.replica_manager
            try:
                if request.controller_epoch < rm.controller_epoch:
                    raise StaleControllerEpochError(
                        f"controller epoch {request.controller_epoch} < {rm.controller_epoch}"
                    )
                self.metadata_cache.update(request)
            except StaleControllerEpochError as e:
                log.info("broker %d: ignoring UpdateMetadata: %s", self.broker_id, e)
                return UpdateMetadataResponse(e.code)
            rm.controller_epoch = request.controller_epoch
            return UpdateMetadataResponse(ErrorCode.none)
        raise TypeError(f"unknown control request {type(request).__name__}")

    def _on_topic_config_change(self, topic: str) -> None:
        # As Kafka's TopicConfigHandler: the controller retries leaderless partitions.
        values = self.config_manager.values(topic)
        if values["unclean.leader.election.enable"]:
            self.controller.enable_topic_unclean_leader_election(topic)
        self._update_throttled_replicas(topic)

    def _update_throttled_replicas(self, topic: str) -> None:
        values = self.config_manager.values(topic)
        rm = self.replica_manager
        for quota, key in (
            (rm.leader_quota, "leader.replication.throttled.replicas"),
            (rm.follower_quota, "follower.replication.throttled.replicas"),
        ):
            quota.mark_throttled(topic, throttled_partitions(values[key] or [], self.broker_id))

    def _update_quota_bounds(self) -> None:
        rm = self.replica_manager
        for quota, key in (
            (rm.leader_quota, "leader.replication.throttled.rate"),
            (rm.follower_quota, "follower.replication.throttled.rate"),
        ):
            rate = self.dynamic_config[key]
            quota.update_bound(math.inf if rate >= LONG_MAX else float(rate))

    async def _unclean_election_enabled(self, topic: str) -> bool:
        overrides = await self.client.get_topic_config(topic)
        value = overrides.get("unclean.leader.election.enable")
        if value is not None:
            return value.strip().lower() == "true"
        return bool(self.dynamic_config["unclean.leader.election.enable"])

    # -- shutdown ------------------------------------------------------------------------

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships to other replicas, as
        Kafka's broker does, so that clients switch at their next metadata refresh
        rather than after a session timeout. Bounded: after
        controlled.shutdown.max.retries tries it stops anyway."""
        tries = self.config["controlled.shutdown.max.retries"]
        # Each try gets one backoff period, whether it fails fast or hangs (a
        # controller waiting on a ZooKeeper that is gone): tries x backoff in all.
        period_s = max(self.config["controlled.shutdown.retry.backoff.ms"] / 1000, 1.0)
        for attempt in range(1, tries + 1):
            deadline = time.monotonic() + period_s
            try:
                async with asyncio.timeout(period_s):
                    error, remaining = await self._send_controlled_shutdown()
            except (ConnectionError, OSError, TimeoutError) as e:
                log.warning(
                    "broker %d: controlled shutdown try %d: %s",
                    self.broker_id, attempt, e or type(e).__name__,
                )  # fmt: skip
            else:
                if error == ErrorCode.none and not remaining:
                    log.info("broker %d: controlled shutdown done", self.broker_id)
                    return
                log.warning(
                    "broker %d: controlled shutdown try %d: %s, still leading %d partitions",
                    self.broker_id, attempt, error.name, len(remaining),
                )  # fmt: skip
            if attempt < tries:
                await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        log.warning(
            "broker %d: controlled shutdown did not finish after %d tries; shutting down anyway",
            self.broker_id, tries,
        )  # fmt: skip

    async def _send_controlled_shutdown(self) -> tuple[ErrorCode, list[TopicPartition]]:
        if self.controller.is_active:
            return await self.controller.controlled_shutdown(self.broker_id, self.epoch)
        controller_id = self.metadata_cache.controller_id
        if controller_id is None or controller_id == self.broker_id:
            raise ConnectionError("no active controller known")
        body = await self.controller_link.request(
            controller_id,
            ApiKey.CONTROLLED_SHUTDOWN,
            controlled_shutdown.VERSION,
            controlled_shutdown.encode_request(self.broker_id, self.epoch),
        )
        code, remaining = controlled_shutdown.decode_response(Reader(body))
        return ErrorCode(code), [TopicPartition(t, p) for t, p in remaining]

    def isolate(self, isolated: bool) -> None:
        """Listeners drop their connections and refuse new ones, or take them again
        (an in-process cluster's network partition; see EmbeddedCluster)."""
        for server in self.servers:
            server.isolate(isolated)

    @property
    def authorizer(self) -> Authorizer | None:
        """The current ACLs' authorizer; None without one (everything allowed)."""
        return None if self.acl_cache is None else self.acl_cache.authorizer

    async def shutdown(self, controlled: bool | None = None) -> None:
        """Move leaderships away (a controlled shutdown: by default on ZooKeeper,
        where the other brokers live on), stop serving, then flush and close every
        log (a clean shutdown)."""
        if controlled is None:
            controlled = bool(self.config["zookeeper.connect"])
        if self.started and controlled and self.config["controlled.shutdown.enable"]:
            await self._controlled_shutdown()
        await self._stop(clean=True)

    async def halt(self) -> None:
        """Stop as kill -9 would leave it: nothing flushed, no checkpoint, no clean
        shutdown marker; its session ends at once (for in-process clusters)."""
        await self._stop(clean=False)

    async def _stop(self, clean: bool) -> None:
        for server in self.servers:
            await server.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        await self.tasks.close()
        await self.alter_partition_manager.close()
        await self.replica_manager.close_fetchers()
        await self.controller_link.close()
        await self.fetch_client.close()
        await self.controller.close()
        await self.config_manager.close()
        if self.acl_cache is not None:
            await self.acl_cache.close()
        await self.group_coordinator.close()
        await self.txn_coordinator.close()
        await self.marker_link.close()
        await self.txn_verification.close()
        await self.verify_link.close()
        self.replica_manager.shutdown(checkpoint=clean)
        if clean:
            # Off the event loop: it fsyncs, and in-process clusters run other
            # brokers on the same loop.
            await asyncio.to_thread(self.log_manager.shutdown)
        else:
            self.log_manager.halt()
        if isinstance(self.transport, InProcessTransport):
            self.transport.brokers.pop(self.broker_id, None)
        await self.store.close()
        self.started = False
