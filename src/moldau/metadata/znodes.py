"""The znode layout shared by both metadata backends: paths and JSON codecs, in
Kafka's ZooKeeper formats so that a reader who knows Kafka's znodes knows ours.

/cluster/id                                   {"version":"1","id":...}
/brokers/ids/<id>                             ephemeral broker registration
/brokers/topics/<topic>                       {"version":3,"topic_id":...,"partitions":{...}}
/brokers/topics/<topic>/partitions/<p>/state  {"leader","leader_epoch","isr","controller_epoch"}
/config/topics/<topic>                        {"version":1,"config":{...}}
/config/users/<sanitized user>                {"version":1,"config":{"SCRAM-SHA-256":...,
                                               "producer_byte_rate":...}} (credentials, quotas)
/config/users/<user>/clients/<client-id>      {"version":1,"config":{...quotas}}
/config/clients/<sanitized client-id>         {"version":1,"config":{...quotas}}
/config/changes/config_change_<seq>           {"version":2,"entity_path":"topics/<topic>"}
/controller                                   ephemeral {"version":1,"brokerid":...}
/controller_epoch                             integer
/admin/delete_topics/<topic>
/log_dir_event_notification/log_dir_event_<seq>  {"version":1,"broker":...,"event":1}
/kafka-acl/<Type>/<name>                      literal ACLs {"version":1,"acls":[...]}
/kafka-acl-extended/prefixed/<Type>/<name>    prefixed ACLs, the same JSON
/kafka-acl-changes/acl_changes_<seq>          "<Type>:<name>" (a literal resource changed)
/kafka-acl-extended-changes/acl_changes_<seq> {"version":1,"resourceType",...} (prefixed)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from moldau.protocol.uuids import uuid_from_base64, uuid_to_base64
from moldau.storage.partition_name import TopicPartition

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
# The entity of the cluster-wide dynamic broker defaults.
DEFAULT_BROKER_ENTITY = "<default>"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
LOG_DIR_EVENTS = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1
ACLS = "/kafka-acl"
PREFIXED_ACLS = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"

# Paths that exist in every cluster, created at start-up.
PERSISTENT_PATHS = (
    BROKER_IDS,
    TOPICS,
    CONFIG_TOPICS,
    CONFIG_USERS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    LOG_DIR_EVENTS,
    ACLS,
    PREFIXED_ACLS,
    ACL_CHANGES,
    EXTENDED_ACL_CHANGES,
    "/cluster",
    "/admin",
)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(entity: str) -> str:
    """A broker id, or DEFAULT_BROKER_ENTITY."""
    return f"{CONFIG_BROKERS}/{entity}"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: a user name as a znode name (URL-encoded, '*' and '~'
    escaped too, a space as %20)."""
    return quote(name, safe="").replace("~", "%7E").replace("*", "%2A")


def desanitize(name: str) -> str:
    return unquote(name)


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS}/{sanitize(user)}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _loads(data: bytes) -> Any:
    return json.loads(data.decode())


# -- cluster id ---------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_loads(data)["id"])


def new_cluster_id() -> str:
    """22 characters of URL-safe base64 of a random UUID, as Kafka makes them."""
    return uuid_to_base64(uuid.uuid4())


# -- brokers ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndPoint:
    listener: str  # listener name, e.g. PLAINTEXT
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def uri(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    # The czxid of the registration znode: the broker epoch.
    epoch: int = -1

    def endpoint(self, listener: str | None = None) -> EndPoint:
        for ep in self.endpoints:
            if listener is None or ep.listener == listener:
                return ep
        raise KeyError(listener)


def encode_broker(b: BrokerRegistration, timestamp_ms: int) -> bytes:
    first = b.endpoints[0]
    return _dumps(
        {
            "version": 5,
            "host": first.host,
            "port": first.port,
            "jmx_port": -1,
            "timestamp": str(timestamp_ms),
            "endpoints": [ep.uri() for ep in b.endpoints],
            "listener_security_protocol_map": {
                ep.listener: ep.security_protocol for ep in b.endpoints
            },
            "rack": b.rack,
            "features": {},
        }
    )


def decode_broker(broker_id: int, data: bytes, epoch: int = -1) -> BrokerRegistration:
    obj = _loads(data)
    protocols: Mapping[str, str] = obj.get("listener_security_protocol_map") or {}
    endpoints = []
    for uri in obj.get("endpoints", []):
        listener, rest = uri.split("://", 1)
        host, _, port = rest.rpartition(":")
        endpoints.append(EndPoint(listener, host, int(port), protocols.get(listener, listener)))
    return BrokerRegistration(broker_id, tuple(endpoints), obj.get("rack"), epoch)


# -- topics -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    topic_id: uuid.UUID
    # partition -> replica broker ids, the first being the preferred leader
    partitions: dict[int, list[int]]
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)


def encode_topic(t: TopicAssignment) -> bytes:
    def by_str(m: Mapping[int, Sequence[int]]) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted(m.items())}

    return _dumps(
        {
            "version": 3,
            "topic_id": uuid_to_base64(t.topic_id),
            "partitions": by_str(t.partitions),
            "adding_replicas": by_str(t.adding_replicas),
            "removing_replicas": by_str(t.removing_replicas),
        }
    )


def decode_topic(data: bytes) -> TopicAssignment:
    obj = _loads(data)

    def by_int(m: Mapping[str, list[int]] | None) -> dict[int, list[int]]:
        return {int(p): [int(b) for b in r] for p, r in (m or {}).items()}

    topic_id = obj.get("topic_id")
    return TopicAssignment(
        uuid_from_base64(topic_id) if topic_id else uuid.UUID(int=0),
        by_int(obj["partitions"]),
        by_int(obj.get("adding_replicas")),
        by_int(obj.get("removing_replicas")),
    )


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    # The partition state znode's version: each controller write is conditional on it.
    partition_epoch: int = 0

    NO_LEADER = -1
    # Leader id the controller publishes for a partition whose topic is being deleted.
    LEADER_DURING_DELETE = -2

    def new_leader_and_isr(self, leader: int, isr: Sequence[int]) -> LeaderAndIsr:
        return LeaderAndIsr(leader, self.leader_epoch + 1, tuple(isr), self.partition_epoch)

    def new_isr(self, isr: Sequence[int]) -> LeaderAndIsr:
        """An ISR change keeps the leader and its epoch (Kafka 3.x semantics)."""
        return LeaderAndIsr(self.leader, self.leader_epoch, tuple(isr), self.partition_epoch)


@dataclass(frozen=True, slots=True)
class LeaderIsrAndControllerEpoch:
    leader_and_isr: LeaderAndIsr
    controller_epoch: int


def encode_partition_state(s: LeaderIsrAndControllerEpoch) -> bytes:
    li = s.leader_and_isr
    return _dumps(
        {
            "controller_epoch": s.controller_epoch,
            "leader": li.leader,
            "version": 1,
            "leader_epoch": li.leader_epoch,
            "isr": list(li.isr),
        }
    )


def decode_partition_state(data: bytes, zk_version: int) -> LeaderIsrAndControllerEpoch:
    obj = _loads(data)
    return LeaderIsrAndControllerEpoch(
        LeaderAndIsr(
            int(obj["leader"]),
            int(obj["leader_epoch"]),
            tuple(int(b) for b in obj["isr"]),
            zk_version,
        ),
        int(obj["controller_epoch"]),
    )


# -- configs ------------------------------------------------------------------------------


def encode_config(config: Mapping[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(sorted(config.items()))})


def decode_config(data: bytes) -> dict[str, str]:
    if not data:
        # A parent made on the way to a child (/config/users/<u> of a user's
        # client-id quota) holds no data, as in Kafka.
        return {}
    return {str(k): str(v) for k, v in _loads(data).get("config", {}).items()}


def encode_config_change(entity_path: str) -> bytes:
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> str:
    return str(_loads(data)["entity_path"])


# -- log directory events (KIP-112) -------------------------------------------------------


def encode_log_dir_event(broker_id: int) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(data: bytes) -> int:
    """The broker id a log directory event is about."""
    return int(_loads(data)["broker"])


# -- partition reassignment (the znode of kafka-reassign-partitions --zookeeper) ----------


def encode_reassignment(targets: Mapping[TopicPartition, Sequence[int]]) -> bytes:
    return _dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition, "replicas": list(r)}
                for tp, r in sorted(targets.items())
            ],
        }
    )


def decode_reassignment(data: bytes) -> dict[TopicPartition, list[int]]:
    """Target replicas by partition. ValueError if malformed."""
    try:
        obj = _loads(data)
        return {
            TopicPartition(str(e["topic"]), int(e["partition"])): [int(b) for b in e["replicas"]]
            for e in obj["partitions"]
        }
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise ValueError(f"malformed {REASSIGN_PARTITIONS}: {e!r}") from None


# -- controller ---------------------------------------------------------------------------


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes) -> int:
    return int(_loads(data)["brokerid"])


# -- ACLs (Kafka's ZkAclStore / ZkAclChangeStore) ----------------------------------------


def acl_root(prefixed: bool) -> str:
    return PREFIXED_ACLS if prefixed else ACLS


def acl_path(resource_type: str, name: str, prefixed: bool) -> str:
    """resource_type is Kafka's name (Topic, Group, Cluster, TransactionalId)."""
    return f"{acl_root(prefixed)}/{resource_type}/{name}"


def encode_acls(entries: Sequence[Mapping[str, str]]) -> bytes:
    return _dumps({"version": 1, "acls": list(entries)})


def decode_acls(data: bytes) -> list[dict[str, str]]:
    return list(_loads(data).get("acls", []))


def encode_acl_change(resource_type: str, name: str, prefixed: bool) -> bytes:
    if not prefixed:
        return f"{resource_type}:{name}".encode()
    return _dumps(
        {"version": 1, "resourceType": resource_type, "name": name, "patternType": "PREFIXED"}
    )
