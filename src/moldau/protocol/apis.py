"""The APIs Moldau implements, with the version ranges it advertises in ApiVersions.

This table is the single source of what is advertised; the server checks at start-up
that every entry has a handler.
"""

from __future__ import annotations

from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    OFFSET_FOR_LEADER_EPOCH = 23
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    ALTER_PARTITION = 56
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


# api key -> (min version, max version) that Moldau implements.
SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 11),
    ApiKey.FETCH: (0, 12),
    # v8 (earliest-local, -4) and v9 (latest-tiered, -5) as Kafka 3.9: no tiered storage.
    ApiKey.LIST_OFFSETS: (0, 9),
    ApiKey.METADATA: (0, 12),
    # Controller-to-broker requests, one version each (protocol/control_wire.py).
    ApiKey.LEADER_AND_ISR: (5, 5),
    # Leader -> controller ISR changes; v2 names topics by id.
    ApiKey.ALTER_PARTITION: (2, 2),
    ApiKey.STOP_REPLICA: (3, 3),
    ApiKey.UPDATE_METADATA: (7, 7),
    ApiKey.CONTROLLED_SHUTDOWN: (3, 3),
    ApiKey.OFFSET_COMMIT: (0, 8),
    ApiKey.OFFSET_FETCH: (0, 8),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    # The transaction APIs as Kafka 3.9 serves them (transaction version 1: no
    # KIP-890 part 2, whose EndTxn v5 and InitProducerId v5 came with Kafka 4.0).
    # AddPartitionsToTxn v4+ is the brokers' batched form (KIP-890 part 1).
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    # v0 went with Kafka 4.0; brokers of Kafka 2.8 on send v1.
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    ApiKey.DELETE_TOPICS: (0, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    # v0 is v1's wire form (protocol/legacy_schemas.ALIASES).
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),
    # As Kafka 3.9 and 4.x serve them.
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    # Kafka 3.9 also serves v0 (no pattern type), which Kafka 4.0 removed (KIP-896);
    # clients since Kafka 2.0 send v1+.
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    # v0 handshakes are followed by raw SASL tokens (the connection's part); v1 by
    # SaslAuthenticate. SaslAuthenticate v1+ carries the KIP-368 session lifetime.
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}


def is_supported(api_key: int, api_version: int) -> bool:
    span = SUPPORTED_VERSIONS.get(api_key)  # type: ignore[call-overload]
    return span is not None and span[0] <= api_version <= span[1]
