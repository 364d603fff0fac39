"""ACLs live in ZooKeeper (/kafka-acl...), and every broker of a cluster applies a
change within a second of it, whichever broker it was made on."""

from __future__ import annotations

import time
from collections.abc import Callable

from moldau.protocol.errors import ErrorCode
from moldau.testing.cluster import Cluster
from tests.integration import requests as rq
from tests.integration.kafka_wire import WireClient

TOPIC, READ, ALLOW, LITERAL, ANY = 2, 3, 3, 3, 1


def topic_error(bootstrap: str, topic: str) -> int:
    with WireClient(bootstrap) as c:
        got = c.request(rq.metadata(topic, auto_create=False))
    return int(got.topics[0].error_code)


def described(bootstrap: str, topic: str) -> int:
    with WireClient(bootstrap) as c:
        got = c.request(
            rq.request(
                29,
                3,
                resource_type_filter=TOPIC,
                resource_name_filter=topic,
                pattern_type_filter=ANY,
                principal_filter=None,
                host_filter=None,
                operation=ANY,
                permission_type=ANY,
            )
        )
    assert got.error_code == ErrorCode.none
    return sum(len(r.acls) for r in got.resources)


def within(seconds: float, condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_an_acl_change_reaches_every_broker_within_a_second(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(
        3,
        **{
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
        },
    )
    at = {i: b.bootstrap for i, b in cluster.brokers.items()}
    first, last = min(at), max(at)
    topic = "closed"
    for address in at.values():
        assert topic_error(address, topic) == ErrorCode.unknown_topic_or_partition

    # An ACL for someone else closes the topic to User:ANONYMOUS.
    with WireClient(at[first]) as c:
        got = c.request(
            rq.request(
                30,
                3,
                creations=[
                    {
                        "resource_type": TOPIC,
                        "resource_name": topic,
                        "resource_pattern_type": LITERAL,
                        "principal": "User:bob",
                        "host": "*",
                        "operation": READ,
                        "permission_type": ALLOW,
                    }
                ],
            )
        )
    assert got.results[0].error_code == ErrorCode.none
    assert cluster.znode(f"/kafka-acl/Topic/{topic}") is not None
    for i, address in at.items():
        assert within(1.0, lambda a=address: described(a, topic) == 1), i
        assert topic_error(address, topic) == ErrorCode.topic_authorization_failed

    # Deleted on another broker: open again everywhere.
    with WireClient(at[last]) as c:
        got = c.request(
            rq.request(
                31,
                3,
                filters=[
                    {
                        "resource_type_filter": TOPIC,
                        "resource_name_filter": topic,
                        "pattern_type_filter": ANY,
                        "principal_filter": None,
                        "host_filter": None,
                        "operation": ANY,
                        "permission_type": ANY,
                    }
                ],
            )
        )
    assert len(got.filter_results[0].matching_acls) == 1
    for i, address in at.items():
        assert within(1.0, lambda a=address: described(a, topic) == 0), i
        assert topic_error(address, topic) == ErrorCode.unknown_topic_or_partition
