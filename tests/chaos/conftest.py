"""The chaos test runs on the cluster tests' ZooKeeper and cluster fixtures."""

from tests.cluster.conftest import make_cluster, zookeeper  # noqa: F401 (fixtures)
