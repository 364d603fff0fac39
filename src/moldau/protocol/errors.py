"""One exception class per Kafka error code.

Handlers raise these; the request handler translates them to the wire error code
at exactly one boundary. `retriable` comes from Kafka's own table (via kio).
Generated once from kio's ErrorCode and kept as plain code so readers and mypy see
every class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "error_class"]


class KafkaError(Exception):
    """Base of every error that has a Kafka error code."""

    code: ClassVar[ErrorCode] = ErrorCode.unknown_server_error

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)

    def __init__(
        self, message: str = "", record_errors: Sequence[tuple[int, str | None]] = ()
    ) -> None:
        super().__init__(message or self.code.name.upper())
        self.message = message
        # KIP-467: (index in its batch, why) of each record that made a Produce batch
        # be refused, so that a client fails those records and tells the rest apart.
        self.record_errors = list(record_errors)


class UnknownServerError(KafkaError):
    code = ErrorCode.unknown_server_error


class OffsetOutOfRangeError(KafkaError):
    code = ErrorCode.offset_out_of_range


class CorruptMessageError(KafkaError):
    code = ErrorCode.corrupt_message


class UnknownTopicOrPartitionError(KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class InvalidFetchSizeError(KafkaError):
    code = ErrorCode.invalid_fetch_size


class LeaderNotAvailableError(KafkaError):
    code = ErrorCode.leader_not_available


class NotLeaderOrFollowerError(KafkaError):
    code = ErrorCode.not_leader_or_follower


class RequestTimedOutError(KafkaError):
    code = ErrorCode.request_timed_out


class BrokerNotAvailableError(KafkaError):
    code = ErrorCode.broker_not_available


class ReplicaNotAvailableError(KafkaError):
    code = ErrorCode.replica_not_available


class MessageTooLargeError(KafkaError):
    code = ErrorCode.message_too_large


class StaleControllerEpochError(KafkaError):
    code = ErrorCode.stale_controller_epoch


class OffsetMetadataTooLargeError(KafkaError):
    code = ErrorCode.offset_metadata_too_large


class NetworkException(KafkaError):
    code = ErrorCode.network_exception


class CoordinatorLoadInProgressError(KafkaError):
    code = ErrorCode.coordinator_load_in_progress


class CoordinatorNotAvailableError(KafkaError):
    code = ErrorCode.coordinator_not_available


class NotCoordinatorError(KafkaError):
    code = ErrorCode.not_coordinator


class InvalidTopicException(KafkaError):
    code = ErrorCode.invalid_topic_exception


class RecordListTooLargeError(KafkaError):
    code = ErrorCode.record_list_too_large


class NotEnoughReplicasError(KafkaError):
    code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppendError(KafkaError):
    code = ErrorCode.not_enough_replicas_after_append


class InvalidRequiredAcksError(KafkaError):
    code = ErrorCode.invalid_required_acks


class IllegalGenerationError(KafkaError):
    code = ErrorCode.illegal_generation


class InconsistentGroupProtocolError(KafkaError):
    code = ErrorCode.inconsistent_group_protocol


class InvalidGroupIdError(KafkaError):
    code = ErrorCode.invalid_group_id


class UnknownMemberIdError(KafkaError):
    code = ErrorCode.unknown_member_id


class InvalidSessionTimeoutError(KafkaError):
    code = ErrorCode.invalid_session_timeout


class RebalanceInProgressError(KafkaError):
    code = ErrorCode.rebalance_in_progress


class InvalidCommitOffsetSizeError(KafkaError):
    code = ErrorCode.invalid_commit_offset_size


class TopicAuthorizationFailedError(KafkaError):
    code = ErrorCode.topic_authorization_failed


class GroupAuthorizationFailedError(KafkaError):
    code = ErrorCode.group_authorization_failed


class ClusterAuthorizationFailedError(KafkaError):
    code = ErrorCode.cluster_authorization_failed


class InvalidTimestampError(KafkaError):
    code = ErrorCode.invalid_timestamp


class UnsupportedSaslMechanismError(KafkaError):
    code = ErrorCode.unsupported_sasl_mechanism


class IllegalSaslStateError(KafkaError):
    code = ErrorCode.illegal_sasl_state


class UnsupportedVersionError(KafkaError):
    code = ErrorCode.unsupported_version


class TopicAlreadyExistsError(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.invalid_replica_assignment


class InvalidConfigError(KafkaError):
    code = ErrorCode.invalid_config


class NotControllerError(KafkaError):
    code = ErrorCode.not_controller


class InvalidRequestError(KafkaError):
    code = ErrorCode.invalid_request


class UnsupportedForMessageFormatError(KafkaError):
    code = ErrorCode.unsupported_for_message_format


class PolicyViolationError(KafkaError):
    code = ErrorCode.policy_violation


class OutOfOrderSequenceNumberError(KafkaError):
    code = ErrorCode.out_of_order_sequence_number


class DuplicateSequenceNumberError(KafkaError):
    code = ErrorCode.duplicate_sequence_number


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(KafkaError):
    code = ErrorCode.invalid_txn_state


class InvalidProducerIdMappingError(KafkaError):
    code = ErrorCode.invalid_producer_id_mapping


class InvalidTransactionTimeoutError(KafkaError):
    code = ErrorCode.invalid_transaction_timeout


class ConcurrentTransactionsError(KafkaError):
    code = ErrorCode.concurrent_transactions


class TransactionCoordinatorFencedError(KafkaError):
    code = ErrorCode.transaction_coordinator_fenced


class TransactionalIdAuthorizationFailedError(KafkaError):
    code = ErrorCode.transactional_id_authorization_failed


class SecurityDisabledError(KafkaError):
    code = ErrorCode.security_disabled


class OperationNotAttemptedError(KafkaError):
    code = ErrorCode.operation_not_attempted


class KafkaStorageError(KafkaError):
    code = ErrorCode.kafka_storage_error


class LogDirNotFoundError(KafkaError):
    code = ErrorCode.log_dir_not_found


class SaslAuthenticationFailedError(KafkaError):
    code = ErrorCode.sasl_authentication_failed


class UndisclosedSaslFailureError(SaslAuthenticationFailedError):
    """A failed login whose reason only the broker's log gets: Kafka answers a
    mechanism's SaslException with a message naming the mechanism alone, so that
    a client cannot learn, say, whether a user exists."""


class UnknownProducerIdError(KafkaError):
    code = ErrorCode.unknown_producer_id


class ReassignmentInProgressError(KafkaError):
    code = ErrorCode.reassignment_in_progress


class DelegationTokenAuthDisabledError(KafkaError):
    code = ErrorCode.delegation_token_auth_disabled


class DelegationTokenNotFoundError(KafkaError):
    code = ErrorCode.delegation_token_not_found


class DelegationTokenOwnerMismatchError(KafkaError):
    code = ErrorCode.delegation_token_owner_mismatch


class DelegationTokenRequestNotAllowedError(KafkaError):
    code = ErrorCode.delegation_token_request_not_allowed


class DelegationTokenAuthorizationFailedError(KafkaError):
    code = ErrorCode.delegation_token_authorization_failed


class DelegationTokenExpiredError(KafkaError):
    code = ErrorCode.delegation_token_expired


class InvalidPrincipalTypeError(KafkaError):
    code = ErrorCode.invalid_principal_type


class NonEmptyGroupError(KafkaError):
    code = ErrorCode.non_empty_group


class GroupIdNotFoundError(KafkaError):
    code = ErrorCode.group_id_not_found


class FetchSessionIdNotFoundError(KafkaError):
    code = ErrorCode.fetch_session_id_not_found


class InvalidFetchSessionEpochError(KafkaError):
    code = ErrorCode.invalid_fetch_session_epoch


class ListenerNotFoundError(KafkaError):
    code = ErrorCode.listener_not_found


class TopicDeletionDisabledError(KafkaError):
    code = ErrorCode.topic_deletion_disabled


class FencedLeaderEpochError(KafkaError):
    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(KafkaError):
    code = ErrorCode.unknown_leader_epoch


class UnsupportedCompressionTypeError(KafkaError):
    code = ErrorCode.unsupported_compression_type


class StaleBrokerEpochError(KafkaError):
    code = ErrorCode.stale_broker_epoch


class OffsetNotAvailableError(KafkaError):
    code = ErrorCode.offset_not_available


class MemberIdRequiredError(KafkaError):
    code = ErrorCode.member_id_required


class PreferredLeaderNotAvailableError(KafkaError):
    code = ErrorCode.preferred_leader_not_available


class GroupMaxSizeReachedError(KafkaError):
    code = ErrorCode.group_max_size_reached


class FencedInstanceIdError(KafkaError):
    code = ErrorCode.fenced_instance_id


class EligibleLeadersNotAvailableError(KafkaError):
    code = ErrorCode.eligible_leaders_not_available


class ElectionNotNeededError(KafkaError):
    code = ErrorCode.election_not_needed


class NoReassignmentInProgressError(KafkaError):
    code = ErrorCode.no_reassignment_in_progress


class GroupSubscribedToTopicError(KafkaError):
    code = ErrorCode.group_subscribed_to_topic


class InvalidRecordError(KafkaError):
    code = ErrorCode.invalid_record


class UnstableOffsetCommitError(KafkaError):
    code = ErrorCode.unstable_offset_commit


class ThrottlingQuotaExceededError(KafkaError):
    code = ErrorCode.throttling_quota_exceeded


class ProducerFencedError(KafkaError):
    code = ErrorCode.producer_fenced


class ResourceNotFoundError(KafkaError):
    code = ErrorCode.resource_not_found


class DuplicateResourceError(KafkaError):
    code = ErrorCode.duplicate_resource


class UnacceptableCredentialError(KafkaError):
    code = ErrorCode.unacceptable_credential


class InconsistentVoterSetError(KafkaError):
    code = ErrorCode.inconsistent_voter_set


class InvalidUpdateVersionError(KafkaError):
    code = ErrorCode.invalid_update_version


class FeatureUpdateFailedError(KafkaError):
    code = ErrorCode.feature_update_failed


class PrincipalDeserializationFailureError(KafkaError):
    code = ErrorCode.principal_deserialization_failure


class SnapshotNotFoundError(KafkaError):
    code = ErrorCode.snapshot_not_found


class PositionOutOfRangeError(KafkaError):
    code = ErrorCode.position_out_of_range


class UnknownTopicIdError(KafkaError):
    code = ErrorCode.unknown_topic_id


class DuplicateBrokerRegistrationError(KafkaError):
    code = ErrorCode.duplicate_broker_registration


class BrokerIdNotRegisteredError(KafkaError):
    code = ErrorCode.broker_id_not_registered


class InconsistentTopicIdError(KafkaError):
    code = ErrorCode.inconsistent_topic_id


class InconsistentClusterIdError(KafkaError):
    code = ErrorCode.inconsistent_cluster_id


class TransactionalIdNotFoundError(KafkaError):
    code = ErrorCode.transactional_id_not_found


class FetchSessionTopicIdError(KafkaError):
    code = ErrorCode.fetch_session_topic_id_error


class IneligibleReplicaError(KafkaError):
    code = ErrorCode.ineligible_replica


class NewLeaderElectedError(KafkaError):
    code = ErrorCode.new_leader_elected


class OffsetMovedToTieredStorageError(KafkaError):
    code = ErrorCode.offset_moved_to_tiered_storage


class FencedMemberEpochError(KafkaError):
    code = ErrorCode.fenced_member_epoch


class UnreleasedInstanceIdError(KafkaError):
    code = ErrorCode.unreleased_instance_id


class UnsupportedAssignorError(KafkaError):
    code = ErrorCode.unsupported_assignor


class StaleMemberEpochError(KafkaError):
    code = ErrorCode.stale_member_epoch


class MismatchedEndpointTypeError(KafkaError):
    code = ErrorCode.mismatched_endpoint_type


class UnsupportedEndpointTypeError(KafkaError):
    code = ErrorCode.unsupported_endpoint_type


class UnknownControllerIdError(KafkaError):
    code = ErrorCode.unknown_controller_id


class UnknownSubscriptionIdError(KafkaError):
    code = ErrorCode.unknown_subscription_id


class TelemetryTooLargeError(KafkaError):
    code = ErrorCode.telemetry_too_large


class InvalidRegistrationError(KafkaError):
    code = ErrorCode.invalid_registration


class TransactionAbortableError(KafkaError):
    code = ErrorCode.transaction_abortable


class InvalidRecordStateError(KafkaError):
    code = ErrorCode.invalid_record_state


class ShareSessionNotFoundError(KafkaError):
    code = ErrorCode.share_session_not_found


class InvalidShareSessionEpochError(KafkaError):
    code = ErrorCode.invalid_share_session_epoch


class FencedStateEpochError(KafkaError):
    code = ErrorCode.fenced_state_epoch


class InvalidVoterKeyError(KafkaError):
    code = ErrorCode.invalid_voter_key


class DuplicateVoterError(KafkaError):
    code = ErrorCode.duplicate_voter


class VoterNotFoundError(KafkaError):
    code = ErrorCode.voter_not_found


class InvalidRegularExpressionError(KafkaError):
    code = ErrorCode.invalid_regular_expression


class RebootstrapRequiredError(KafkaError):
    code = ErrorCode.rebootstrap_required


class StreamsInvalidTopologyError(KafkaError):
    code = ErrorCode.streams_invalid_topology


class StreamsInvalidTopologyEpochError(KafkaError):
    code = ErrorCode.streams_invalid_topology_epoch


class StreamsTopologyFencedError(KafkaError):
    code = ErrorCode.streams_topology_fenced


class ShareSessionLimitReachedError(KafkaError):
    code = ErrorCode.share_session_limit_reached


_BY_CODE: dict[int, type[KafkaError]] = {cls.code.value: cls for cls in KafkaError.__subclasses__()}
_BY_CODE[ErrorCode.unknown_server_error.value] = UnknownServerError


def error_class(code: int) -> type[KafkaError]:
    """The exception class for a wire error code (UnknownServerError if unknown)."""
    return _BY_CODE.get(code, UnknownServerError)
