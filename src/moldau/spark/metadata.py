"""What the driver asks the brokers: which partitions a subscription covers, and
their earliest, latest and by-timestamp offsets (ListOffsets through
confluent-kafka's AdminClient, one batched call for all partitions)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import confluent_kafka.admin
from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from moldau.spark.offsets import PartitionOffsets
from moldau.spark.options import Subscription, TopicPartitionKey

#: Kafka's internal topics, which a pattern never matches (the Java consumer's
#: exclude.internal.topics, on by default).
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
#: librdkafka's errors for a refused SASL login or TLS handshake.
_REFUSED = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL})


# Not among confluent_kafka.admin's typed exports, and its methods are untyped.
_OFFSET_SPEC: Any = confluent_kafka.admin.OffsetSpec  # type: ignore[attr-defined]


def _spec(which: str, *args: int) -> Any:
    return getattr(_OFFSET_SPEC, which)(*args)


class OffsetReader:
    """The driver's view of the log. Retries as Spark's connector does
    (`fetchOffset.numRetries` times, `fetchOffset.retryIntervalMs` apart), so a
    leader election during planning does not fail the query."""

    def __init__(
        self,
        client_config: Mapping[str, str],
        retries: int = 3,
        retry_interval_s: float = 1.0,
        request_timeout_s: float = 30.0,
    ) -> None:
        # isolation.level is a consumer's setting (an admin client warns of it); it
        # decides which end offset "latest" is: the last stable offset for
        # read_committed, as Spark's connector asks with ListOffsetsOptions.
        self._config: dict[str, str | int | float | bool] = {
            k: v for k, v in client_config.items() if k != "isolation.level"
        }
        self._isolation = (
            IsolationLevel.READ_COMMITTED
            if client_config.get("isolation.level") == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        self._retries = retries
        self._retry_interval_s = retry_interval_s
        self._timeout_s = request_timeout_s
        self._admin: AdminClient | None = None
        # What librdkafka last reported on its own (a refused login, say): a failed
        # call says only "transport failure".
        self._client_error: KafkaError | None = None

    def _client(self) -> AdminClient:
        if self._admin is None:
            config: dict[str, Any] = {**self._config, "error_cb": self._on_client_error}
            self._admin = AdminClient(config)
        return self._admin

    def _on_client_error(self, err: KafkaError) -> None:
        self._client_error = err

    def _refused(self) -> bool:
        return self._client_error is not None and self._client_error.code() in _REFUSED

    def _metadata(self) -> Any:
        """All topics' metadata, asked in short attempts so that a refused login
        fails the query at once rather than after the request timeout."""
        client = self._client()
        deadline = time.monotonic() + self._timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                return client.list_topics(timeout=max(0.01, min(0.5, remaining)))
            except KafkaException:
                client.poll(0)  # serves error_cb
                if remaining <= 0.5 or self._refused():
                    raise

    def close(self) -> None:
        self._admin = None  # AdminClient has no close(); dropping it ends its threads

    def _retrying(self, what: str, call: Any) -> Any:
        for attempt in range(self._retries + 1):
            try:
                return call()
            except KafkaException as e:
                self._client().poll(0)  # serves error_cb
                seen = self._client_error
                # A refused login or certificate: another attempt cannot help.
                if attempt == self._retries or self._refused():
                    also = f" ({seen.str()})" if seen is not None else ""
                    raise RuntimeError(
                        f"{what} failed after {attempt + 1} attempts: {e}{also}"
                    ) from e
                # librdkafka's admin client asks with the leader epochs it has cached
                # and does not refresh them on FENCED_LEADER_EPOCH: after a broker
                # dies, the controller bumps the epoch of every partition whose ISR
                # loses it, leader or not, so the same client fails again and again.
                # A new one starts from fresh metadata.
                self._admin = None
                time.sleep(self._retry_interval_s)
        raise AssertionError("unreachable")

    def partitions(self, subscription: Subscription) -> list[TopicPartitionKey]:
        """The partitions the subscription covers now (none for a topic that does
        not exist, as Spark's connector)."""
        if subscription.kind == "assign":
            return sorted(subscription.partitions)

        def list_topics() -> list[TopicPartitionKey]:
            md = self._metadata()
            out: list[TopicPartitionKey] = []
            for name, topic in md.topics.items():
                if name in _INTERNAL_TOPICS or not subscription.matches(name):
                    continue
                if topic.error is not None:
                    raise KafkaException(topic.error)
                out.extend((name, p) for p in topic.partitions)
            return sorted(out)

        result: list[TopicPartitionKey] = self._retrying("listing topics", list_topics)
        return result

    def _list_offsets(
        self, specs: Mapping[TopicPartitionKey, Any], lowest: int = 0
    ) -> PartitionOffsets:
        """`lowest`: the smallest offset that is an answer (-1 for a timestamp no
        record reaches)."""
        if not specs:
            return {}

        def call() -> PartitionOffsets:
            futures = self._client().list_offsets(
                {TopicPartition(t, p): spec for (t, p), spec in specs.items()},
                isolation_level=self._isolation,
                request_timeout=self._timeout_s,
            )
            out = {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
            for tp, offset in out.items():
                # librdkafka answers OFFSET_INVALID (-1001), with no error, for a
                # partition whose leader it lost track of (its leader just killed).
                if offset < lowest:
                    raise KafkaException(
                        KafkaError(KafkaError.LEADER_NOT_AVAILABLE, f"no offset for {tp}: {offset}")
                    )
            return out

        result: PartitionOffsets = self._retrying("listing offsets", call)
        return result

    def earliest(self, partitions: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        return self._list_offsets({tp: _spec("earliest") for tp in partitions})

    def latest(self, partitions: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        return self._list_offsets({tp: _spec("latest") for tp in partitions})

    def by_timestamp(self, timestamps: Mapping[TopicPartitionKey, int]) -> PartitionOffsets:
        """The first offset whose timestamp is at or after the given one, or -1."""
        specs = {tp: _spec("for_timestamp", ts) for tp, ts in timestamps.items()}
        return self._list_offsets(specs, lowest=-1)
