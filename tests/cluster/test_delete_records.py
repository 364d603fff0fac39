"""DeleteRecords on three brokers (ZooKeeper mode): the answer waits until every live
follower has moved its log start offset to the leader's (they learn it from their
fetches), times out as Kafka's with REQUEST_TIMED_OUT while a killed follower still
counts, stops counting it once the controller has noticed, and a restarted follower
takes the leader's log start. DescribeLogDirs: every broker answers for its own."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.protocol.errors import ErrorCode
from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from tests.cluster.test_replication import partitions
from tests.integration import requests as rq
from tests.integration.kafka_wire import WireClient
from tests.integration.test_delete_records import produce

EARLIEST = -2
DEBUG_REPLICA = -2  # ListOffsets from any replica, not only the leader


def local_log_start(bootstrap: str, topic: str) -> int:
    """The log start offset of this broker's own replica (leader or follower)."""
    req = rq.list_offsets(topic, 0, EARLIEST, replica_id=DEBUG_REPLICA)
    with WireClient(bootstrap) as c:
        got = c.request(req)
    [p] = got.topics[0].partitions
    assert p.error_code == ErrorCode.none
    return int(p.offset)


def delete_raw(bootstrap: str, topic: str, offset: int, timeout_ms: int) -> tuple[ErrorCode, int]:
    with WireClient(bootstrap, timeout=timeout_ms / 1000 + 10) as c:
        got = c.request(rq.delete_records({(topic, 0): offset}, timeout=timeout_ms))
    p = got.topics[0].partitions[0]
    return ErrorCode(p.error_code), int(p.low_watermark)


def test_deletion_waits_for_the_followers_and_a_killed_one_times_it_out(
    make_cluster: Callable[..., Cluster], topic_name: str
) -> None:
    cluster = make_cluster(3, **{"replica.fetch.wait.max.ms": "200"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 3)])[topic_name].result(timeout=30)
    produce(cluster.bootstrap, topic_name, 50, size=100)
    leader, replicas, _ = partitions(cluster.bootstrap, topic_name)[0]
    assert wait_for(lambda: partitions(cluster.bootstrap, topic_name)[0][2] == replicas, 20)
    followers = [r for r in replicas if r != leader]
    at = {i: cluster.brokers[i].bootstrap for i in replicas}

    # Through the AdminClient: answered once every replica starts at 20.
    [future] = admin.delete_records([CTP(topic_name, 0, 20)], operation_timeout=10).values()
    assert future.result(timeout=30).low_watermark == 20
    assert {i: local_log_start(at[i], topic_name) for i in replicas} == dict.fromkeys(replicas, 20)

    # A killed follower keeps the low watermark where it left it: the leader moves
    # its own start, and the request times out as Kafka's does.
    dead, alive = followers
    cluster.kill(dead)
    started = time.monotonic()
    assert delete_raw(at[leader], topic_name, 30, timeout_ms=800) == (
        ErrorCode.request_timed_out,
        20,
    )
    assert 0.7 < time.monotonic() - started < 5
    assert local_log_start(at[leader], topic_name) == 30
    assert wait_for(lambda: local_log_start(at[alive], topic_name) == 30, timeout=10)

    # Once the controller has seen it die, it counts no more (Kafka's low watermark
    # is over live brokers' replicas).
    assert wait_for(lambda: dead not in partitions(cluster.bootstrap, topic_name)[0][2], 20)
    assert delete_raw(at[leader], topic_name, 35, timeout_ms=10_000) == (ErrorCode.none, 35)

    # Back, it fetches and takes the leader's log start.
    cluster.restart(dead)
    assert wait_for(lambda: local_log_start(at[dead], topic_name) == 35, timeout=30)
    assert wait_for(lambda: partitions(cluster.bootstrap, topic_name)[0][2] == replicas, 30)

    # Only the leader deletes; the others send the client to it.
    assert delete_raw(at[alive], topic_name, 40, timeout_ms=1000) == (
        ErrorCode.not_leader_or_follower,
        -1,
    )

    # Every broker describes its own log dir, where its replica is.
    for i in replicas:
        with WireClient(at[i]) as c:
            got = c.request(rq.describe_log_dirs({topic_name: [0]}))
        [result] = got.results
        assert result.log_dir == str(cluster.data_dir(i).resolve())
        [t] = result.topics
        [p] = t.partitions
        assert (t.name, p.partition_index, p.offset_lag) == (topic_name, 0, 0)
        assert p.partition_size > 0
