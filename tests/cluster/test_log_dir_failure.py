"""A log directory that fails on one broker of a cluster on a real ZooKeeper: the
broker tells the controller through /log_dir_event_notification (KIP-112), the
controller learns from the broker's LeaderAndIsr answer (KAFKA_STORAGE_ERROR) which
replicas are offline and takes their partitions' leadership away; the broker's
other directory and the other brokers keep serving, and DescribeLogDirs tells which
directory failed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.protocol.errors import ErrorCode
from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from moldau.testing.zookeeper import read_children
from tests.integration import requests as rq
from tests.integration.kafka_wire import WireClient
from tests.integration.test_full_disk import leader_of, partition_dir, produce
from tests.integration.tmpfs import Tmpfs


def test_a_full_log_dir_on_one_broker_takes_only_its_partitions_offline(
    make_cluster: Callable[..., Cluster], tmp_path: Path, tmpfs: type[Tmpfs], topic_name: str
) -> None:
    cluster = make_cluster(2)
    roomy = tmpfs(tmp_path / "roomy", 16 * 1024)
    small = tmpfs(tmp_path / "small", 4 * 1024)
    cluster.stop(2)
    cluster.brokers[2].overrides["log.dirs"] = f"{roomy.path},{small.path}"
    cluster.restart(2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic_name, 3, replica_assignment=[[2], [2], [1]])
    admin.create_topics([new])[topic_name].result(timeout=30)
    assert wait_for(lambda: leader_of(cluster.bootstrap, topic_name, 1) == 2, 20)
    dirs = [roomy.path, small.path]
    full = 0 if partition_dir(dirs, topic_name, 0) == small.path else 1
    kept = 1 - full

    acked, errors = produce(cluster.bootstrap, topic_name, 8000, full, stop=bool)
    assert any(e.code() == KafkaError.KAFKA_STORAGE_ERROR for e in errors), errors[:5]
    assert len(acked) > 1000
    # The controller took the notification (and removed it), and the partition's
    # leadership: every broker's metadata says it has none.
    assert wait_for(lambda: leader_of(cluster.bootstrap, topic_name, full) == -1, 20)
    for b in cluster.brokers.values():
        assert leader_of(b.bootstrap, topic_name, full) == -1
    assert wait_for(
        lambda: read_children(cluster.zookeeper_connect, "/log_dir_event_notification") == []
    )
    # Broker 2's other directory, and broker 1, still serve.
    for partition, leader in ((kept, 2), (2, 1)):
        assert leader_of(cluster.bootstrap, topic_name, partition) == leader
        more, more_errors = produce(cluster.bootstrap, topic_name, 200, partition)
        assert more_errors == [] and sorted(more) == list(range(200))
    assert all(cluster.is_running(b) for b in cluster.brokers.values())
    # DescribeLogDirs (kafka-log-dirs): the failed directory says so, the other still
    # tells its partition and its volume's space.
    with WireClient(cluster.brokers[2].bootstrap) as c:
        got = c.request(rq.describe_log_dirs())
    by_dir = {Path(r.log_dir): r for r in got.results}
    failed_dir = partition_dir(dirs, topic_name, full).resolve()
    kept_dir = partition_dir(dirs, topic_name, kept).resolve()
    assert set(by_dir) == {roomy.path.resolve(), small.path.resolve()}
    assert by_dir[failed_dir].error_code == ErrorCode.kafka_storage_error
    assert by_dir[failed_dir].topics == ()
    kept_result = by_dir[kept_dir]
    assert kept_result.error_code == ErrorCode.none and kept_result.usable_bytes > 0
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in kept_result.topics] == [
        (topic_name, [kept])
    ]
