"""Leader elections on demand (ElectLeaders, `moldau leader-election`), on three
broker processes and a real ZooKeeper."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from tests.cluster.test_replication import partitions, stale_replica

MakeCluster = Callable[..., Cluster]


def leader_election(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "moldau", "leader-election", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_preferred_election_gives_leadership_back_after_a_bounce(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    cluster = make_cluster(3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assignment = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
    new = NewTopic(topic_name, num_partitions=3, replica_assignment=assignment)
    admin.create_topics([new])[topic_name].result(timeout=30)

    def leaders() -> list[int]:
        return [leader for leader, _, _ in partitions(cluster.bootstrap, topic_name).values()]

    def isrs_full() -> bool:
        return all(
            len(isr) == 3 for _, _, isr in partitions(cluster.bootstrap, topic_name).values()
        )

    assert wait_for(isrs_full, 30)
    assert leaders() == [1, 2, 3]

    # Broker 1 bounces: partition 0's leadership moves away and stays away.
    assert cluster.stop(1) == 0
    assert wait_for(lambda: leaders()[0] not in (1, -1), 30)
    cluster.restart(1)
    assert wait_for(isrs_full, 30)
    moved = leaders()
    assert moved[0] != 1

    bootstrap = cluster.bootstrap
    done = leader_election(
        "--bootstrap-server", bootstrap, "--election-type", "preferred", "--all-topic-partitions"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert (
        f"Successfully completed leader election (PREFERRED) for partitions {topic_name}-0" in lines
    )
    # An election of every partition names only those elected (or failed), as Kafka's
    # answer does: partitions 1 and 2 are led by their preferred replicas already.
    assert not any(line.startswith("Valid replica already elected") for line in lines), lines
    assert wait_for(lambda: leaders() == [1, 2, 3], 10)

    again = leader_election(
        "--bootstrap-server", bootstrap, "--election-type", "PREFERRED",
        "--topic", topic_name, "--partition", "0",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"Valid replica already elected for partitions {topic_name}-0\n"

    missing = leader_election(
        "--bootstrap-server", bootstrap, "--election-type", "preferred",
        "--topic", topic_name, "--partition", "7",
    )  # fmt: skip
    assert missing.returncode == 1
    assert missing.stdout.startswith(
        f"Error completing leader election (PREFERRED) for partition: {topic_name}-7: "
    )
    assert "1 replica(s) could not be elected" in missing.stderr


def test_usage_mistakes_are_one_line_and_a_non_zero_exit(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(1)
    bootstrap = cluster.bootstrap
    for args, message in [
        (["--election-type", "preferred", "--topic", "t"], "--topic needs --partition"),
        (
            ["--election-type", "preferred", "--all-topic-partitions", "--partition", "1"],
            "--partition",
        ),
        (["--election-type", "sometimes", "--all-topic-partitions"], "invalid choice"),
    ]:
        done = leader_election("--bootstrap-server", bootstrap, *args)
        assert done.returncode != 0
        assert message in done.stderr
        assert "Traceback" not in done.stderr


def test_unclean_election_on_demand_elects_a_stale_replica(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    """With unclean.leader.election.enable off, an operator's ElectLeaders UNCLEAN
    gives the leaderless partition its stale replica, as kafka-leader-election.sh."""
    s = stale_replica(make_cluster, topic_name)
    done = leader_election(
        "--bootstrap-server", s.survivors, "--election-type", "unclean",
        "--topic", topic_name, "--partition", "0",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == (
        f"Successfully completed leader election (UNCLEAN) for partitions {topic_name}-0\n"
    )
    s.unclean_leader_came()


def test_auto_leader_rebalance_gives_leadership_back_by_itself(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    cluster = make_cluster(
        3,
        **{
            "auto.leader.rebalance.enable": "true",
            "leader.imbalance.check.interval.seconds": "1",
            "leader.imbalance.per.broker.percentage": "10",
        },
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(
        topic_name, num_partitions=3, replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]]
    )
    admin.create_topics([new])[topic_name].result(timeout=30)

    def leaders() -> list[int]:
        return [leader for leader, _, _ in partitions(cluster.bootstrap, topic_name).values()]

    assert wait_for(lambda: leaders() == [1, 2, 3], 30)
    assert cluster.stop(1) == 0
    assert wait_for(lambda: leaders()[0] not in (1, -1), 30)
    cluster.restart(1)
    # Once broker 1 is back in the ISR, the next check (every second) elects it.
    assert wait_for(lambda: leaders() == [1, 2, 3], 30), leaders()
