"""Broker configs: Kafka's property names, types, defaults and docs.

Values come from server.properties and --override; a known key with a bad value
is an error, an unknown key is logged and ignored (as Kafka does).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from moldau.config.configdef import (
    ConfigDef,
    ConfigKey,
    at_least,
    level,
    metadata_version,
    one_of,
    to_string,
)
from moldau.config.configdef import ConfigType as T
from moldau.config.configdef import Importance as I
from moldau.config.topic import TOPIC_CONFIG, BrokerDefaults, ConfigSource
from moldau.protocol.errors import InvalidConfigError

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
LISTENER_PREFIX = "listener.name."

# authorizer.class.name values that mean Moldau's ACL authorizer: its own name and
# Kafka's two, so a Kafka server.properties works unchanged.
AUTHORIZER_NAMES = (
    "moldau.security.Authorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)

# Broker configs that AlterConfigs may change at run time, per broker or for all
# (Kafka's DynamicConfig.Broker, the replication quotas).
DYNAMIC_BROKER_CONFIGS = frozenset({
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
})  # fmt: skip

BROKER_CONFIG = ConfigDef(
    [
        ConfigKey("broker.id", T.INT, -1, I.HIGH,
                  "This broker's id; -1 picks 1 in embedded mode.", at_least(-1)),
        ConfigKey("node.id", T.INT, -1, I.HIGH, "Alias of broker.id.", at_least(-1)),
        ConfigKey("broker.rack", T.STRING, None, I.MEDIUM, "Rack of the broker."),
        ConfigKey("listeners", T.LIST, ["PLAINTEXT://:9092"], I.HIGH,
                  "Comma-separated listener URIs, e.g. PLAINTEXT://0.0.0.0:9092."),
        ConfigKey("advertised.listeners", T.LIST, None, I.HIGH,
                  "Listeners published to clients; defaults to listeners."),
        ConfigKey("log.dirs", T.LIST, None, I.HIGH, "Directories of the partition logs."),
        ConfigKey("log.dir", T.STRING, "./data", I.HIGH,
                  "Directory of the partition logs when log.dirs is not set."),
        ConfigKey("zookeeper.connect", T.STRING, None, I.HIGH,
                  "ZooKeeper connection string; unset: embedded metadata store."),
        ConfigKey("zookeeper.session.timeout.ms", T.INT, 18_000, I.HIGH,
                  "ZooKeeper session timeout.", at_least(1)),
        ConfigKey("zookeeper.connection.timeout.ms", T.INT, None, I.HIGH,
                  "Time to wait for the ZooKeeper connection."),
        ConfigKey("inter.broker.listener.name", T.STRING, None, I.MEDIUM,
                  "Listener brokers use to reach each other; default: the first listener."),
        ConfigKey("listener.security.protocol.map", T.LIST,
                  ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT",
                   "SASL_SSL:SASL_SSL"], I.LOW,
                  "Each listener name's security protocol, as NAME:PROTOCOL pairs."),
        ConfigKey("security.inter.broker.protocol", T.STRING, None, I.MEDIUM,
                  "Security protocol between brokers (the listener of that name); "
                  "only one of this and inter.broker.listener.name.",
                  one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
        ConfigKey("ssl.keystore.type", T.STRING, "JKS", I.MEDIUM,
                  "Keystore format; Moldau reads PEM (JKS and PKCS12 must be converted)."),
        ConfigKey("ssl.keystore.location", T.STRING, None, I.HIGH,
                  "PEM file with the private key and the certificate chain."),
        ConfigKey("ssl.keystore.password", T.PASSWORD, None, I.HIGH,
                  "Password of the keystore (PEM: of its encrypted key, if ssl.key.password "
                  "is not set)."),
        ConfigKey("ssl.keystore.certificate.chain", T.PASSWORD, None, I.HIGH,
                  "The certificate chain in PEM, inline (with ssl.keystore.key)."),
        ConfigKey("ssl.keystore.key", T.PASSWORD, None, I.HIGH,
                  "The private key in PEM, inline (with ssl.keystore.certificate.chain)."),
        ConfigKey("ssl.key.password", T.PASSWORD, None, I.HIGH,
                  "Password of the encrypted private key."),
        ConfigKey("ssl.truststore.type", T.STRING, "JKS", I.MEDIUM,
                  "Truststore format; Moldau reads PEM."),
        ConfigKey("ssl.truststore.location", T.STRING, None, I.HIGH,
                  "PEM file of the trusted CA certificates."),
        ConfigKey("ssl.truststore.password", T.PASSWORD, None, I.HIGH,
                  "Truststore password (unused with PEM)."),
        ConfigKey("ssl.truststore.certificates", T.PASSWORD, None, I.HIGH,
                  "Trusted certificates in PEM, inline."),
        ConfigKey("ssl.client.auth", T.STRING, "none", I.MEDIUM,
                  "Whether SSL clients must present a certificate.",
                  one_of("none", "requested", "required")),
        ConfigKey("ssl.principal.mapping.rules", T.STRING, "DEFAULT", I.LOW,
                  "Rules mapping a client certificate's subject to a principal name."),
        ConfigKey("ssl.enabled.protocols", T.LIST, ["TLSv1.2", "TLSv1.3"], I.MEDIUM,
                  "TLS versions enabled."),
        ConfigKey("ssl.protocol", T.STRING, "TLSv1.3", I.MEDIUM,
                  "Accepted; the versions come from ssl.enabled.protocols."),
        ConfigKey("ssl.cipher.suites", T.LIST, None, I.LOW,
                  "Cipher suites (OpenSSL or IANA names) of TLS 1.2; default: OpenSSL's."),
        ConfigKey("ssl.endpoint.identification.algorithm", T.STRING, "https", I.LOW,
                  "https: check a broker's host name against its certificate (inter-broker "
                  "links); empty: do not."),
        ConfigKey("controller.socket.timeout.ms", T.INT, 30_000, I.MEDIUM,
                  "Socket timeout of the controller's requests to brokers.", at_least(1)),
        ConfigKey("num.partitions", T.INT, 1, I.MEDIUM,
                  "Partitions of auto-created topics and of CreateTopics with -1.", at_least(1)),
        ConfigKey("default.replication.factor", T.INT, 1, I.MEDIUM,
                  "Replication factor of auto-created topics and of CreateTopics with -1.",
                  at_least(1)),
        ConfigKey("auto.create.topics.enable", T.BOOLEAN, True, I.HIGH,
                  "Create a topic when a client asks for its metadata or produces to it."),
        ConfigKey("delete.topic.enable", T.BOOLEAN, True, I.HIGH, "Allow DeleteTopics."),
        ConfigKey("authorizer.class.name", T.STRING, "", I.LOW,
                  "The authorizer: moldau.security.Authorizer, or Kafka's "
                  "kafka.security.authorizer.AclAuthorizer or "
                  "org.apache.kafka.metadata.authorizer.StandardAuthorizer (the same ACL "
                  "authorizer); empty: none, every request is allowed.",
                  one_of("", *AUTHORIZER_NAMES)),
        ConfigKey("super.users", T.STRING, None, I.LOW,
                  "Principals (User:name) separated by ';' that may do anything."),
        ConfigKey("allow.everyone.if.no.acl.found", T.BOOLEAN, False, I.LOW,
                  "Allow a request on a resource that no ACL names (with an authorizer)."),
        ConfigKey("message.max.bytes", T.INT, 1_048_588, I.HIGH,
                  "Largest record batch size allowed (topic: max.message.bytes).", at_least(0)),
        ConfigKey("socket.request.max.bytes", T.INT, 104_857_600, I.HIGH,
                  "Largest request a client may send.", at_least(1)),
        ConfigKey("log.segment.bytes", T.INT, 1_073_741_824, I.HIGH,
                  "Segment file size.", at_least(14)),
        ConfigKey("log.roll.ms", T.LONG, None, I.HIGH, "Roll a segment after this time."),
        ConfigKey("log.roll.hours", T.INT, 168, I.HIGH,
                  "Roll a segment after this many hours (if log.roll.ms is unset).", at_least(1)),
        ConfigKey("log.roll.jitter.ms", T.LONG, None, I.HIGH,
                  "Jitter subtracted from the roll time."),
        ConfigKey("log.roll.jitter.hours", T.INT, 0, I.HIGH, "Jitter in hours.", at_least(0)),
        ConfigKey("log.retention.ms", T.LONG, None, I.HIGH, "Delete segments older than this."),
        ConfigKey("log.retention.minutes", T.INT, None, I.HIGH, "Retention in minutes."),
        ConfigKey("log.retention.hours", T.INT, 168, I.HIGH, "Retention in hours."),
        ConfigKey("log.retention.bytes", T.LONG, -1, I.HIGH,
                  "Delete old segments beyond this size per partition."),
        ConfigKey("log.retention.check.interval.ms", T.LONG, 300_000, I.MEDIUM,
                  "How often retention is applied.", at_least(1)),
        ConfigKey("log.index.interval.bytes", T.INT, 4096, I.MEDIUM,
                  "How often an offset index entry is added.", at_least(0)),
        ConfigKey("log.index.size.max.bytes", T.INT, 10_485_760, I.MEDIUM,
                  "Maximum size of an offset index.", at_least(4)),
        ConfigKey("log.flush.interval.messages", T.LONG, LONG_MAX, I.HIGH,
                  "fsync a log after this many messages.", at_least(1)),
        ConfigKey("log.flush.interval.ms", T.LONG, None, I.HIGH,
                  "fsync a log after this much time."),
        ConfigKey("log.flush.scheduler.interval.ms", T.LONG, LONG_MAX, I.HIGH,
                  "How often logs are checked for a time-based flush."),
        ConfigKey("log.flush.offset.checkpoint.interval.ms", T.INT, 60_000, I.HIGH,
                  "How often the recovery points are checkpointed.", at_least(0)),
        ConfigKey("log.flush.start.offset.checkpoint.interval.ms", T.INT, 60_000, I.HIGH,
                  "How often the log start offsets are checkpointed.", at_least(0)),
        ConfigKey("log.segment.delete.delay.ms", T.LONG, 60_000, I.HIGH,
                  "Delay before a deleted segment's files are removed.", at_least(0)),
        ConfigKey("log.cleanup.policy", T.LIST, ["delete"], I.MEDIUM,
                  "Default cleanup policy.", one_of("delete", "compact")),
        ConfigKey("log.cleaner.enable", T.BOOLEAN, True, I.MEDIUM,
                  "Run the log cleaner, which compacts topics with cleanup.policy=compact."),
        ConfigKey("log.cleaner.backoff.ms", T.LONG, 15_000, I.MEDIUM,
                  "How long the cleaner sleeps when there is nothing to clean.", at_least(0)),
        ConfigKey("log.cleaner.delete.retention.ms", T.LONG, 86_400_000, I.MEDIUM,
                  "How long tombstones are kept."),
        ConfigKey("log.cleaner.min.compaction.lag.ms", T.LONG, 0, I.MEDIUM,
                  "Minimum age before compaction."),
        ConfigKey("log.cleaner.max.compaction.lag.ms", T.LONG, LONG_MAX, I.MEDIUM,
                  "Maximum age before compaction."),
        ConfigKey("log.cleaner.min.cleanable.ratio", T.DOUBLE, 0.5, I.MEDIUM,
                  "Dirty ratio that triggers compaction."),
        ConfigKey("log.preallocate", T.BOOLEAN, False, I.MEDIUM, "Accepted, has no effect."),
        ConfigKey("log.message.timestamp.type", T.STRING, "CreateTime", I.MEDIUM,
                  "CreateTime or LogAppendTime.", one_of("CreateTime", "LogAppendTime")),
        ConfigKey("log.message.timestamp.before.max.ms", T.LONG, LONG_MAX, I.MEDIUM,
                  "How far a timestamp may be behind the broker's clock."),
        ConfigKey("log.message.timestamp.after.max.ms", T.LONG, LONG_MAX, I.MEDIUM,
                  "How far a timestamp may be ahead of the broker's clock."),
        ConfigKey("log.message.timestamp.difference.max.ms", T.LONG, LONG_MAX, I.MEDIUM,
                  "[DEPRECATED] How far a timestamp may be from the broker's clock, either way, "
                  "where the before/after configs are not set.", at_least(0),
                  deprecated="still applies where log.message.timestamp.before.max.ms or "
                  "log.message.timestamp.after.max.ms is not set; use those instead"),
        ConfigKey("log.message.format.version", T.STRING, "3.0-IV1", I.MEDIUM,
                  "[DEPRECATED] The message format of appended batches; ignored.",
                  metadata_version(),
                  deprecated="ignored: every batch is written in magic v2, as Kafka with an "
                  "inter-broker protocol of 3.0 or later does"),
        ConfigKey("log.message.downconversion.enable", T.BOOLEAN, True, I.LOW,
                  "Whether Fetch v0-v3 answers are converted to the old message formats."),
        ConfigKey("log.local.retention.ms", T.LONG, -2, I.MEDIUM,
                  "Local retention under tiered storage (accepted, unused).", at_least(-2)),
        ConfigKey("log.local.retention.bytes", T.LONG, -2, I.MEDIUM,
                  "Local retention under tiered storage (accepted, unused).", at_least(-2)),
        ConfigKey("compression.gzip.level", T.INT, -1, I.MEDIUM,
                  "gzip level of the batches the broker recompresses.",
                  level(1, 9, -1)),
        ConfigKey("compression.lz4.level", T.INT, 9, I.MEDIUM,
                  "lz4 level of the batches the broker recompresses.", level(1, 17)),
        ConfigKey("compression.zstd.level", T.INT, 3, I.MEDIUM,
                  "zstd level of the batches the broker recompresses.",
                  level(-131072, 22)),
        ConfigKey("compression.type", T.STRING, "producer", I.HIGH,
                  "Final compression of topic data; 'producer' keeps the producer's codec.",
                  one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
        ConfigKey("min.insync.replicas", T.INT, 1, I.HIGH,
                  "Minimum ISR size for acks=all produce.", at_least(1)),
        ConfigKey("unclean.leader.election.enable", T.BOOLEAN, False, I.HIGH,
                  "Allow out-of-sync replicas to become leader as a last resort."),
        ConfigKey("replica.lag.time.max.ms", T.LONG, 30_000, I.HIGH,
                  "A follower that has not caught up for this long leaves the ISR."),
        ConfigKey("replica.high.watermark.checkpoint.interval.ms", T.LONG, 5000, I.HIGH,
                  "How often the high watermarks are checkpointed.", at_least(1)),
        ConfigKey("leader.replication.throttled.rate", T.LONG, LONG_MAX, I.MEDIUM,
                  "Bytes/s this broker sends to followers of the throttled replicas of "
                  "leader.replication.throttled.replicas (dynamic).", at_least(0)),
        ConfigKey("follower.replication.throttled.rate", T.LONG, LONG_MAX, I.MEDIUM,
                  "Bytes/s this broker fetches for the throttled replicas of "
                  "follower.replication.throttled.replicas (dynamic).", at_least(0)),
        ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", T.LONG, LONG_MAX, I.MEDIUM,
                  "Bytes/s of moves between log dirs (dynamic; accepted, unused).", at_least(0)),
        ConfigKey("quota.window.num", T.INT, 11, I.LOW,
                  "Samples kept to measure client quotas' rates.", at_least(1)),
        ConfigKey("quota.window.size.seconds", T.INT, 1, I.LOW,
                  "Time span of each client quota sample.", at_least(1)),
        ConfigKey("controller.quota.window.num", T.INT, 11, I.LOW,
                  "Samples kept for controller mutation quotas.", at_least(1)),
        ConfigKey("controller.quota.window.size.seconds", T.INT, 1, I.LOW,
                  "Time span of each controller mutation quota sample.", at_least(1)),
        ConfigKey("replication.quota.window.num", T.INT, 11, I.LOW,
                  "Samples kept to measure replication rates.", at_least(1)),
        ConfigKey("replication.quota.window.size.seconds", T.INT, 1, I.LOW,
                  "Time span of each replication rate sample.", at_least(1)),
        ConfigKey("max.incremental.fetch.session.cache.slots", T.INT, 1000, I.MEDIUM,
                  "Incremental fetch sessions (KIP-227) a broker keeps at most.", at_least(0)),
        ConfigKey("replica.fetch.max.bytes", T.INT, 1_048_576, I.MEDIUM,
                  "Bytes a follower fetches per partition and request.", at_least(0)),
        ConfigKey("replica.fetch.response.max.bytes", T.INT, 10_485_760, I.MEDIUM,
                  "Bytes a follower's fetch response may hold in all.", at_least(0)),
        ConfigKey("replica.fetch.wait.max.ms", T.INT, 500, I.MEDIUM,
                  "How long a follower's fetch waits at the leader for new data.", at_least(0)),
        ConfigKey("replica.fetch.min.bytes", T.INT, 1, I.MEDIUM,
                  "Bytes a follower's fetch waits for at the leader.", at_least(1)),
        ConfigKey("replica.fetch.backoff.ms", T.INT, 1000, I.MEDIUM,
                  "Pause before a follower fetches again after an error.", at_least(0)),
        ConfigKey("offsets.topic.num.partitions", T.INT, 50, I.HIGH,
                  "Partitions of __consumer_offsets.", at_least(1)),
        ConfigKey("offsets.topic.replication.factor", T.SHORT, 3, I.HIGH,
                  "Replication factor of __consumer_offsets (capped by live brokers).",
                  at_least(1)),
        ConfigKey("offsets.topic.segment.bytes", T.INT, 104_857_600, I.HIGH,
                  "Segment size of __consumer_offsets.", at_least(1)),
        ConfigKey("offsets.retention.minutes", T.INT, 10_080, I.HIGH,
                  "How long committed offsets of an empty group are kept.", at_least(1)),
        ConfigKey("offsets.retention.check.interval.ms", T.LONG, 600_000, I.HIGH,
                  "How often expired offsets are looked for.", at_least(1)),
        ConfigKey("offset.metadata.max.bytes", T.INT, 4096, I.HIGH,
                  "Largest metadata string of a committed offset."),
        ConfigKey("fetch.max.bytes", T.INT, 57_671_680, I.MEDIUM,
                  "Largest fetch response.", at_least(0)),
        ConfigKey("connections.max.idle.ms", T.LONG, 600_000, I.MEDIUM,
                  "Close connections idle for longer than this."),
        ConfigKey("max.connections", T.INT, 2**31 - 1, I.MEDIUM,
                  "Maximum connections the broker accepts.", at_least(0)),
        ConfigKey("queued.max.request.bytes", T.LONG, -1, I.MEDIUM,
                  "Bytes of requests queued per connection before reading pauses (-1: 100 MiB)."),
        # SASL (security/sasl.py). Kafka's default mechanism is GSSAPI, which Moldau
        # cannot serve: a SASL listener left with it refuses to start, saying so.
        ConfigKey("sasl.enabled.mechanisms", T.LIST, ["GSSAPI"], I.MEDIUM,
                  "SASL mechanisms a SASL listener serves; Moldau supports PLAIN, "
                  "SCRAM-SHA-256 and SCRAM-SHA-512. Listener-prefixable."),
        ConfigKey("sasl.mechanism.inter.broker.protocol", T.STRING, "GSSAPI", I.MEDIUM,
                  "SASL mechanism brokers use to reach each other on a SASL listener."),
        ConfigKey("sasl.jaas.config", T.PASSWORD, None, I.MEDIUM,
                  "JAAS login module config (e.g. PLAIN's user_<name>=\"<password>\" "
                  "entries); usually given per listener and mechanism as "
                  "listener.name.<listener>.<mechanism>.sasl.jaas.config."),
        ConfigKey("connections.max.reauth.ms", T.LONG, 0, I.MEDIUM,
                  "Session lifetime a SASL client is told to re-authenticate within "
                  "(KIP-368); 0: no re-authentication.", at_least(0)),
        ConfigKey("sasl.server.max.receive.size", T.INT, 524_288, I.LOW,
                  "Largest request a client may send before it has logged in.", at_least(1)),
        ConfigKey("connection.failed.authentication.delay.ms", T.INT, 100, I.LOW,
                  "Delay of the answer to a failed SASL authentication, which then closes "
                  "the connection (slows password guessing).", at_least(0)),
        ConfigKey("event.loop", T.STRING, "asyncio", I.LOW,
                  "The process's event loop (Moldau's own; with --brokers N one for all): "
                  "asyncio (the standard library's), uvloop (needs the uvloop package), or "
                  "auto (uvloop when installed).", one_of("auto", "asyncio", "uvloop")),
        ConfigKey("metrics.port", T.INT, None, I.MEDIUM,
                  "Port of the Prometheus endpoint (/metrics) on the first listener's host; "
                  "unset: no endpoint. 0 picks a free port.", at_least(0)),
        ConfigKey("controlled.shutdown.enable", T.BOOLEAN, True, I.MEDIUM,
                  "Move leadership away before shutting down."),
        ConfigKey("controlled.shutdown.max.retries", T.INT, 3, I.MEDIUM,
                  "Tries of a controlled shutdown before the broker stops anyway.",
                  at_least(1)),
        ConfigKey("controlled.shutdown.retry.backoff.ms", T.LONG, 5000, I.MEDIUM,
                  "Wait between tries of a controlled shutdown.", at_least(0)),
        ConfigKey("auto.leader.rebalance.enable", T.BOOLEAN, True, I.HIGH,
                  "The controller moves leadership back to preferred replicas when a "
                  "broker's share of partitions led by another exceeds the imbalance."),
        ConfigKey("leader.imbalance.per.broker.percentage", T.INT, 10, I.HIGH,
                  "The share (%) of a broker's preferred partitions led elsewhere that "
                  "triggers a rebalance.", at_least(0)),
        ConfigKey("leader.imbalance.check.interval.seconds", T.LONG, 300, I.HIGH,
                  "How often the controller checks the leader imbalance.", at_least(1)),
        ConfigKey("num.recovery.threads.per.data.dir", T.INT, 1, I.HIGH,
                  "Threads that load the logs of each log directory at start-up. Python's"
                  " threads share one interpreter lock: more than one only pays when the"
                  " disk is the bottleneck (a cold page cache, recovery after a crash).",
                  at_least(1)),
        ConfigKey("cluster.id", T.STRING, None, I.LOW,
                  "Cluster id for a new embedded cluster (generated if unset)."),
        # Accepted so that a Kafka server.properties works; they tune threads Moldau
        # does not have.
        ConfigKey("num.network.threads", T.INT, 3, I.LOW, "Accepted, has no effect."),
        ConfigKey("num.io.threads", T.INT, 8, I.LOW, "Accepted, has no effect."),
        ConfigKey("num.replica.fetchers", T.INT, 1, I.LOW,
                  "Replica fetcher tasks per source broker, each with its own connection.",
                  at_least(1)),
        ConfigKey("socket.send.buffer.bytes", T.INT, 102_400, I.LOW, "SO_SNDBUF (-1: OS default)."),
        ConfigKey("socket.receive.buffer.bytes", T.INT, 102_400, I.LOW,
                  "SO_RCVBUF (-1: OS default)."),
        ConfigKey("request.timeout.ms", T.INT, 30_000, I.MEDIUM,
                  "How long a broker waits for another to answer a request it sent on "
                  "its own behalf (transaction markers).", at_least(0)),
        ConfigKey("transaction.state.log.num.partitions", T.INT, 50, I.HIGH,
                  "Partitions of __transaction_state.", at_least(1)),
        ConfigKey("transaction.state.log.replication.factor", T.SHORT, 3, I.HIGH,
                  "Replication factor of __transaction_state (as for __consumer_offsets, "
                  "the embedded broker alone uses 1 unless this is set).", at_least(1)),
        ConfigKey("transaction.state.log.min.isr", T.INT, 2, I.HIGH,
                  "min.insync.replicas of __transaction_state (capped by its replication "
                  "factor).", at_least(1)),
        ConfigKey("transaction.state.log.segment.bytes", T.INT, 104_857_600, I.HIGH,
                  "Segment size of __transaction_state.", at_least(1)),
        ConfigKey("transaction.max.timeout.ms", T.INT, 900_000, I.HIGH,
                  "The longest transaction.timeout.ms a producer may ask for.", at_least(1)),
        ConfigKey("transactional.id.expiration.ms", T.INT, 604_800_000, I.HIGH,
                  "How long a transactional id with no transaction going is remembered.",
                  at_least(1)),
        ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", T.INT, 10_000,
                  I.LOW, "How often the coordinator looks for transactions past their "
                  "timeout, to abort them.", at_least(1)),
        ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", T.INT,
                  3_600_000, I.LOW, "How often expired transactional ids are removed.",
                  at_least(1)),
        # Static here (Kafka can change it dynamically): read once at start-up.
        ConfigKey("transaction.partition.verification.enable", T.BOOLEAN, True, I.LOW,
                  "KIP-890: before a transactional batch starts a transaction on a "
                  "partition, its leader asks the transaction coordinator whether the "
                  "partition was added to the transaction, and refuses the batch if not."),
        ConfigKey("producer.id.expiration.ms", T.INT, 86_400_000, I.LOW,
                  "How long a partition remembers an idempotent producer after the "
                  "timestamp of its last batch; a retry that comes later may be written "
                  "twice. Retention that removes its last batch forgets it sooner.",
                  at_least(1)),
        ConfigKey("producer.id.expiration.check.interval.ms", T.INT, 600_000, I.LOW,
                  "How often expired producer ids are looked for.", at_least(1)),
        ConfigKey("group.initial.rebalance.delay.ms", T.INT, 3000, I.MEDIUM,
                  "Delay of the first rebalance of a new group."),
        ConfigKey("group.min.session.timeout.ms", T.INT, 6000, I.MEDIUM,
                  "Smallest session timeout."),
        ConfigKey("group.max.session.timeout.ms", T.INT, 1_800_000, I.MEDIUM,
                  "Largest session timeout."),
    ]
)  # fmt: skip

# Topic config defaults that Kafka derives from a chain of broker properties, most
# specific first, with the unit each is in (ms multiplier).
_CHAINS: dict[str, list[tuple[str, int]]] = {
    "log.retention.ms": [
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ],
    "log.roll.ms": [("log.roll.ms", 1), ("log.roll.hours", 3_600_000)],
    "log.roll.jitter.ms": [("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)],
    "log.flush.interval.ms": [
        ("log.flush.interval.ms", 1),
        ("log.flush.scheduler.interval.ms", 1),
    ],
}

# Kafka's defaults as DescribeConfigs shows them; a property without one is left out.
_DEFAULT_STRINGS = {k: to_string(v) for k, v in BROKER_CONFIG.defaults().items() if v is not None}


class BrokerConfig(BrokerDefaults):
    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        raw = dict(props or {})
        # Every key as given: listener.name.<l>.<key> overrides are read from it.
        self.raw = raw
        unknown = sorted(
            k for k in raw if k not in BROKER_CONFIG and not k.startswith("listener.name.")
        )
        if unknown:
            log.warning("These configurations were supplied but are not used: %s", unknown)
        self.explicit = BROKER_CONFIG.parse(raw, ignore_unknown=True)
        for name in sorted(self.explicit):
            why = BROKER_CONFIG.keys[name].deprecated
            if why is not None:
                log.warning(
                    "Broker config %s=%s is deprecated (removed in Kafka 4.0), %s",
                    name, raw[name], why,
                )  # fmt: skip
        self.values = BROKER_CONFIG.defaults() | self.explicit

    @classmethod
    def from_file(cls, path: Path, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        return cls(read_properties(path) | dict(overrides or {}))

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def is_set(self, name: str) -> bool:
        chain = _CHAINS.get(name, [(name, 1)])
        return any(n in self.explicit for n, _ in chain)

    def chained(self, name: str) -> Any:
        for prop, unit in _CHAINS.get(name, [(name, 1)]):
            value = self.values.get(prop)
            if value is not None:
                # Not `* 1` for every value: a boolean would come out as 0 or 1.
                return value * unit if unit != 1 else value
        return None

    def synonyms(self, name: str) -> list[tuple[str, str | None, ConfigSource]]:
        return config_synonyms(name, [], self)

    def topic_default(self, key: ConfigKey) -> Any:
        if key.server_default is None:
            return key.default
        value = self.chained(key.server_default)
        return key.default if value is None else value

    # -- typed accessors of what the broker uses everywhere ------------------------------

    @property
    def broker_id(self) -> int:
        bid = int(self.values["broker.id"])
        nid = int(self.values["node.id"])
        if bid >= 0 and nid >= 0 and bid != nid:
            raise InvalidConfigError("broker.id and node.id differ")
        return bid if bid >= 0 else nid

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.values["log.dirs"] or [self.values["log.dir"]]
        return [Path(d) for d in dirs]

    def for_listener(self, listener: str, name: str) -> Any:
        """`name` for one listener: listener.name.<listener>.<name> if given (Kafka's
        per-listener override), else the broker-wide value."""
        override = self.raw.get(f"listener.name.{listener.lower()}.{name}")
        if override is None:
            return self.values[name]
        return BROKER_CONFIG.parse_value(name, override)

    @property
    def rack(self) -> str | None:
        rack = self.values["broker.rack"]
        return str(rack) if rack else None


def config_synonyms(
    name: str, dynamic: Sequence[tuple[Mapping[str, str], ConfigSource]], static: BrokerConfig
) -> list[tuple[str, str | None, ConfigSource]]:
    """Kafka's ConfigHelper.configSynonyms: each layer (dynamic ones, server.properties,
    Kafka's defaults) in turn, the property's names within it (log.retention.ms, .minutes,
    .hours), then only from `name` itself on: a time given in hours alone, or at its
    default, lists no synonym, as Kafka's DescribeConfigs answers."""
    names = [n for n, _ in _CHAINS.get(name, [(name, 1)])]
    layers = [
        *dynamic,
        ({n: to_string(v) for n, v in static.explicit.items()}, ConfigSource.STATIC_BROKER_CONFIG),
        (_DEFAULT_STRINGS, ConfigSource.DEFAULT_CONFIG),
    ]
    found = [(n, layer[n], source) for layer, source in layers for n in names if n in layer]
    while found and found[0][0] != name:
        found.pop(0)
    return found


def read_properties(path: Path) -> dict[str, str]:
    """Java .properties, the subset Kafka configs use: key=value or key: value,
    # and ! comments, backslash line continuations."""
    props: dict[str, str] = {}
    pending = ""
    # ISO-8859-1, as java.util.Properties reads a stream: every byte is a character.
    for raw_line in path.read_text(encoding="latin-1").splitlines():
        line = pending + raw_line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                props[line[:i].strip()] = line[i + 1 :].strip()
                break
        else:
            props[line] = ""
    return props


# Every topic config must have its broker default defined here.
for _key in TOPIC_CONFIG.keys.values():
    if _key.server_default is not None:
        assert _key.server_default in BROKER_CONFIG or _key.server_default in _CHAINS, _key
