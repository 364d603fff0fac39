"""The request handler (Kafka's KafkaApis): parse the header, dispatch by api key
and version, and translate errors to the wire at this one boundary.

- A frame whose header or body cannot be parsed closes its connection.
- ApiVersions in a version this broker does not know gets the v0 response with
  UNSUPPORTED_VERSION and the full key list, so the client can pick a version.
- Another API in an unsupported version gets UNSUPPORTED_VERSION in the top-level
  error code where the schema has one; otherwise the connection is closed (Kafka).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import is_dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from moldau.metadata.store import StorePersistError
from moldau.protocol.apis import SUPPORTED_VERSIONS, ApiKey, is_supported
from moldau.protocol.codec import (
    RequestHeader,
    encode_body,
    error_response,
    parse_request_header,
    response_header_bytes,
)
from moldau.protocol.errors import ErrorCode, KafkaError
from moldau.protocol.fetch import Part, part_size
from moldau.protocol.wire import DecodeError, pack_i32
from moldau.server.authorization import API_CLUSTER_CHECKS, require_cluster
from moldau.server.handlers.acls import (
    handle_create_acls,
    handle_delete_acls,
    handle_describe_acls,
)
from moldau.server.handlers.alter_partition import handle_alter_partition
from moldau.server.handlers.api_versions import api_versions_response, handle_api_versions
from moldau.server.handlers.client_quotas import (
    handle_alter_client_quotas,
    handle_describe_client_quotas,
)
from moldau.server.handlers.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from moldau.server.handlers.control import handle_control
from moldau.server.handlers.controlled_shutdown import handle_controlled_shutdown
from moldau.server.handlers.elect_leaders import handle_elect_leaders
from moldau.server.handlers.fetch import handle_fetch
from moldau.server.handlers.groups import (
    handle_delete_groups,
    handle_describe_groups,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_offset_delete,
    handle_sync_group,
)
from moldau.server.handlers.list_offsets import handle_list_offsets
from moldau.server.handlers.metadata import (
    handle_describe_cluster,
    handle_metadata,
    handle_metadata_while_starting,
)
from moldau.server.handlers.offset_for_leader_epoch import handle_offset_for_leader_epoch
from moldau.server.handlers.offsets import (
    handle_find_coordinator,
    handle_offset_commit,
    handle_offset_fetch,
)
from moldau.server.handlers.produce import handle_produce
from moldau.server.handlers.reassignments import (
    handle_alter_partition_reassignments,
    handle_list_partition_reassignments,
)
from moldau.server.handlers.records import handle_delete_records, handle_describe_log_dirs
from moldau.server.handlers.sasl import (
    evaluate_token,
    handle_sasl_authenticate,
    handle_sasl_handshake,
)
from moldau.server.handlers.scram import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from moldau.server.handlers.topics import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
)
from moldau.server.handlers.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_describe_producers,
    handle_describe_transactions,
    handle_end_txn,
    handle_init_producer_id,
    handle_list_transactions,
    handle_txn_offset_commit,
    handle_write_txn_markers,
)
from moldau.server.network import Answer, AnswerThenClose, CloseConnection, Connection
from moldau.server.request import CloseAfter, Deferred, RawBody, RequestContext

if TYPE_CHECKING:
    from moldau.server.broker import Broker

log = logging.getLogger(__name__)

Handler = Callable[["Broker", RequestContext], Awaitable[Any]]

HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.LEADER_AND_ISR: handle_control,
    ApiKey.STOP_REPLICA: handle_control,
    ApiKey.UPDATE_METADATA: handle_control,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
    ApiKey.ALTER_PARTITION: handle_alter_partition,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    ApiKey.ELECT_LEADERS: handle_elect_leaders,
    ApiKey.CONTROLLED_SHUTDOWN: handle_controlled_shutdown,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
    ApiKey.DESCRIBE_ACLS: handle_describe_acls,
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
    ApiKey.SASL_HANDSHAKE: handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: handle_alter_client_quotas,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
}

# Advertise only what has a handler.
assert set(HANDLERS) == set(SUPPORTED_VERSIONS), set(SUPPORTED_VERSIONS) ^ set(HANDLERS)


METADATA_HOLD_WHILE_STARTING_S = 1.0

# Answered while the broker starts (its logs loading, no metadata yet): version
# negotiation, and the controller's and other brokers' requests that starting needs.
_SERVED_WHILE_STARTING = frozenset(
    {
        ApiKey.API_VERSIONS,
        # Logins too (the SCRAM credentials are loaded before the broker listens):
        # on a SASL inter-broker listener the controller logs in to send the
        # metadata that start-up waits for, as Kafka authenticates in its network
        # layer, whatever KafkaApis is doing.
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.ALTER_PARTITION,
    }
)

# What a connection of a SASL listener may send before it has authenticated:
# ApiVersions (18), SaslHandshake (17) and SaslAuthenticate (36).
SERVED_BEFORE_AUTHENTICATION = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)

# Never counted in a client's request quota, nor throttled (Kafka's exempt
# requests: version and login exchanges, and brokers' own requests).
# Those served while starting are exactly these, and the brokers' markers.
QUOTA_EXEMPT = _SERVED_WHILE_STARTING | {ApiKey.WRITE_TXN_MARKERS}

# Metadata responses carry a throttle time from v3 on, as their first field.
METADATA_THROTTLE_SINCE = 3

# Kafka's request names in its RequestMetrics (ApiKeys' names).
REQUEST_NAMES: dict[int, str] = {
    k: "".join(w.capitalize() for w in k.name.split("_")) for k in ApiKey
}
_FETCH_FOLLOWER = "FetchFollower"
_FETCH_CONSUMER = "FetchConsumer"


class KafkaApis:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.clock = broker.clock
        self.metrics = broker.request_metrics
        self.sasl_max_receive = broker.config["sasl.server.max.receive.size"]
        self.reauth_ms = broker.config["connections.max.reauth.ms"]

    async def handle(self, conn: Connection, frame: memoryview) -> Answer:
        if not conn.session.authenticated and len(frame) > self.sasl_max_receive:
            # Kafka's bound on what an unknown client may make the broker read.
            raise CloseConnection(
                f"{len(frame)}-byte request before authentication "
                f"(sasl.server.max.receive.size={self.sasl_max_receive})"
            )
        if conn.raw_sasl_tokens:
            return await self._raw_sasl_token(conn, frame)
        try:
            header, offset = parse_request_header(frame)
        except DecodeError as e:
            raise CloseConnection(f"malformed request header: {e}") from e
        key, version = header.api_key, header.api_version
        session = conn.session
        if key not in SERVED_BEFORE_AUTHENTICATION:
            if not session.authenticated:
                # Kafka's SaslServerAuthenticator: anything else before a successful
                # SaslAuthenticate is an illegal state, and the connection is closed.
                raise CloseConnection(
                    f"{REQUEST_NAMES.get(key, key)} before SASL authentication "
                    f"on listener {session.listener}"
                )
            expires = conn.session_expires_ms
            if expires is not None and self.clock.monotonic_ms() >= expires:
                # KIP-368: a session not renewed in time ends with its connection.
                raise CloseConnection("SASL session expired (connections.max.reauth.ms)")
        if not is_supported(key, version):
            return self._unsupported(header)
        sasl = session.sasl
        started = self.clock.monotonic_ns()
        answer = await self._handle(conn, header, frame, offset, started)
        if sasl is not None and session.sasl is None:
            self._logged_in(conn)
        if key == ApiKey.SASL_HANDSHAKE and version == 0 and conn.session.sasl is not None:
            # Kafka's v0 handshake: the SASL tokens follow as bare size-prefixed frames.
            conn.raw_sasl_tokens = True
        self._record(header, frame, offset, started, answer)
        return answer

    def _logged_in(self, conn: Connection) -> None:
        """A SASL exchange just succeeded (a failed one closes the connection)."""
        if self.reauth_ms > 0:
            conn.session_expires_ms = self.clock.monotonic_ms() + self.reauth_ms

    async def _raw_sasl_token(self, conn: Connection, frame: memoryview) -> Answer:
        """A SASL token after a SaslHandshake v0, answered as a bare token; a failed
        login closes the connection (v0 has no way to say why)."""
        session = conn.session
        try:
            token = await evaluate_token(self.broker, session, bytes(frame))
        except KafkaError as e:
            conn.raw_sasl_tokens = False
            raise CloseConnection(f"SASL authentication failed: {e.message}") from None
        if session.sasl is None:  # complete: requests follow
            conn.raw_sasl_tokens = False
            self._logged_in(conn)
        return [pack_i32(len(token)) + token]

    def _record(
        self,
        header: RequestHeader,
        frame: memoryview,
        offset: int,
        started: int,
        answer: Answer,
    ) -> None:
        """Count the request and time it until its response is ready."""
        name = REQUEST_NAMES[header.api_key]
        timed_as = name
        if header.api_key == ApiKey.FETCH:
            # Fetch's body starts with the replica id (v0-v14): followers send theirs.
            replica_id = int.from_bytes(frame[offset : offset + 4], "big", signed=True)
            timed_as = _FETCH_FOLLOWER if replica_id >= 0 else _FETCH_CONSUMER
        version = header.api_version

        def record(_: object = None) -> None:
            ms = (self.clock.monotonic_ns() - started) / 1e6
            self.metrics.record(name, version, timed_as, ms)

        if isinstance(answer, asyncio.Future):
            answer.add_done_callback(record)
        else:
            record()

    async def _handle(
        self, conn: Connection, header: RequestHeader, frame: memoryview, offset: int, started: int
    ) -> Answer:
        key, version = header.api_key, header.api_version
        ctx = RequestContext(header, frame, offset, conn.client, conn.session, started)
        handler = HANDLERS[ApiKey(key)]
        if not self.broker.serving.is_set() and key not in _SERVED_WHILE_STARTING:
            # Held, as Kafka holds requests until its broker has started (the client's
            # own timeout bounds the wait); Metadata for a moment only, then answered
            # without leaders, so that a long start (logs recovering after a crash)
            # shows clients a broker that is up and tells them to retry.
            if key == ApiKey.METADATA:
                try:
                    async with asyncio.timeout(METADATA_HOLD_WHILE_STARTING_S):
                        await self.broker.serving.wait()
                except TimeoutError:
                    handler = handle_metadata_while_starting
            else:
                await self.broker.serving.wait()
        try:
            authorizer = self.broker.authorizer
            if authorizer is not None and key in API_CLUSTER_CHECKS:
                require_cluster(authorizer, ctx, API_CLUSTER_CHECKS[ApiKey(key)])
            response = await handler(self.broker, ctx)
        except DecodeError as e:
            raise CloseConnection(f"malformed {ApiKey(key).name} v{version} request: {e}") from e
        except KafkaError as e:
            return self._error(header, e.code, str(e))
        except CloseConnection:
            raise
        except StorePersistError as e:
            # Kafka answers a failed ZooKeeper write the same way; nothing was changed.
            log.error("%s v%d: %s", ApiKey(key).name, version, e)
            return self._error(header, ErrorCode.unknown_server_error, str(e))
        except Exception:
            log.exception("unexpected error handling %s v%d", ApiKey(key).name, version)
            return self._error(header, ErrorCode.unknown_server_error, "unexpected error")
        quotas = self.broker.quotas
        if quotas.enabled and key not in QUOTA_EXEMPT:
            response = self._throttled(conn, ctx, response)
        if response is None:
            return None
        if isinstance(response, Deferred):
            return self._later(header, response)
        if isinstance(response, CloseAfter):
            raise AnswerThenClose(frame_response(header, response.response), response.reason)
        return frame_response(header, response)

    def _throttled(self, conn: Connection, ctx: RequestContext, response: Any) -> Any:
        """The response with the client's throttle time, and the connection muted
        for it once the response is out (KIP-219). Produce and Fetch put it in their
        hand-encoded responses themselves."""
        ms = self.broker.quotas.on_request(ctx)
        if ms <= 0:
            return response
        conn.throttle_ms = ms
        if is_dataclass(response) and hasattr(response, "throttle_time"):
            response = replace(response, throttle_time=timedelta(milliseconds=ms))  # type: ignore[type-var]
        elif (
            isinstance(response, RawBody)
            and ctx.header.api_key == ApiKey.METADATA
            and ctx.version >= METADATA_THROTTLE_SINCE
        ):
            # A Metadata response encoded once for all: its body opens with the
            # throttle time.
            first = response.parts[0]
            assert isinstance(first, bytes | bytearray | memoryview)
            response = RawBody([pack_i32(ms) + bytes(first[4:]), *response.parts[1:]])
        return response

    def _later(self, header: RequestHeader, deferred: Deferred) -> asyncio.Future[list[Part]]:
        answer: asyncio.Future[list[Part]] = asyncio.get_running_loop().create_future()

        def done(result: asyncio.Future[Any]) -> None:
            if answer.done():
                return
            try:
                answer.set_result(frame_response(header, deferred.build(result.result())))
            except Exception as e:  # answered as any handler failure would be
                log.exception("unexpected error answering %s", ApiKey(header.api_key).name)
                answer.set_result(self._error(header, ErrorCode.unknown_server_error, str(e)))

        deferred.future.add_done_callback(done)
        return answer

    def _unsupported(self, header: RequestHeader) -> list[Part]:
        if header.api_key == ApiKey.API_VERSIONS:
            # The v0 fallback: header v0 and body v0, whatever the client asked.
            body = encode_body(api_versions_response(0, ErrorCode.unsupported_version))
            head = pack_i32(header.correlation_id)
            return [pack_i32(len(head) + len(body)) + head + body]
        return self._error(
            header,
            ErrorCode.unsupported_version,
            f"api {header.api_key} v{header.api_version} is not supported",
        )

    def _error(self, header: RequestHeader, code: ErrorCode, message: str) -> list[Part]:
        response = error_response(header.api_key, header.api_version, code)
        if response is None:
            raise CloseConnection(f"api {header.api_key} v{header.api_version}: {message}")
        return frame_response(header, response)


def frame_response(header: RequestHeader, response: Any) -> list[Part]:
    """Size, response header and body, as parts."""
    head = response_header_bytes(header)
    if isinstance(response, RawBody):
        size = len(head) + sum(part_size(p) for p in response.parts)
        return [pack_i32(size) + head, *response.parts]
    body = encode_body(response)
    return [pack_i32(len(head) + len(body)) + head + body]
