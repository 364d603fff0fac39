"""Screenshots of the web console's pages for docs/ui/ (the README shows them):
`moldau serve --brokers 3 --ui-port 0` with two topics fed by a producer (and one
read by a consumer group) for a while, so the charts have something to show; then
Debian's Chromium (as in tests/ui) visits each page.

    PYTHONPATH=src .venv/bin/python bench/ui_screenshots.py [--out docs/ui] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka import admin as ka
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.testing.browser import chromium
from moldau.testing.process import BrokerProcess, wait_for

PAGES = {
    "cluster": "#/cluster",
    "topics": "#/topics",
    "topic": "#/topic/orders",
    "messages": "#/messages/orders",
    "groups": "#/groups",
    "group": "#/group/billing",
    "reassignments": "#/reassignments",
    "security": "#/security",
}
#: An authorizer that refuses nothing without an ACL, so the security page has ACLs
#: to show and the load runs as before (the console's User:ANONYMOUS is a super user).
SECURITY = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "super.users": "User:ANONYMOUS",
}


def feed(bootstrap: str, until: float) -> None:
    """Orders and payments at a few hundred a second, varying, until `until`."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    n = 0
    while time.monotonic() < until:
        burst = 40 + (n // 400 % 4) * 30
        for _ in range(burst):
            order = {"order": n, "customer": f"c-{n % 97}", "total": round(n % 50 * 1.37, 2)}
            producer.produce(
                "orders",
                key=f"c-{n % 97}".encode(),
                value=json.dumps(order).encode(),
                headers=[("source", b"web")],
            )
            if n % 3 == 0:
                producer.produce("payments", key=str(n).encode(), value=b"paid")
            n += 1
        producer.poll(0)
        time.sleep(0.1)
    producer.flush(10)


def drain(bootstrap: str, until: float) -> None:
    """A consumer group reading the orders, so bytes out has something to show."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "billing", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["orders"])
    try:
        while time.monotonic() < until:
            consumer.consume(500, timeout=0.2)
    finally:
        consumer.close()


def security_and_a_move(bootstrap: str) -> None:
    """Some ACLs and SCRAM users; and a throttled reassignment of a 3 MB partition
    that stays under way while the pages are taken."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    T, P, Op, A = ka.ResourceType, ka.ResourcePatternType, ka.AclOperation, ka.AclPermissionType
    acls = [
        ka.AclBinding(T.TOPIC, "orders", P.LITERAL, "User:billing", "*", Op.READ, A.ALLOW),
        ka.AclBinding(T.GROUP, "billing", P.LITERAL, "User:billing", "*", Op.READ, A.ALLOW),
        ka.AclBinding(T.TOPIC, "pay", P.PREFIXED, "User:shop", "*", Op.WRITE, A.ALLOW),
        ka.AclBinding(T.TOPIC, "orders", P.LITERAL, "User:intern", "10.0.0.7", Op.WRITE, A.DENY),
    ]
    for f in admin.create_acls(acls).values():
        f.result(10)
    users = [
        ka.UserScramCredentialUpsertion(user, ka.ScramCredentialInfo(mechanism, 8192), b"secret")
        for user, mechanism in (("billing", ka.ScramMechanism.SCRAM_SHA_256),
                                ("shop", ka.ScramMechanism.SCRAM_SHA_512))
    ]  # fmt: skip
    for f in admin.alter_user_scram_credentials(users).values():
        f.result(10)
    admin.create_topics([NewTopic("archive", 1, replica_assignment=[[1]])])["archive"].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(3000):
        producer.produce("archive", json.dumps({"n": i, "pad": "x" * 1000}).encode())
    producer.flush(30)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as plan:
        json.dump({"version": 1, "partitions": [
            {"topic": "archive", "partition": 0, "replicas": [2, 3]}]}, plan)  # fmt: skip
        plan.flush()
        subprocess.run(
            [sys.executable, "-m", "moldau", "reassign-partitions", "--bootstrap-server",
             bootstrap, "--execute", "--reassignment-json-file", plan.name, "--throttle", "20000"],
            check=True, capture_output=True,
        )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/ui"))
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        serve_args = ["--brokers", "3", "--ui-port", "0", "--metrics-port", "0"]
        with BrokerProcess(Path(tmp) / "data", SECURITY, serve_args=serve_args) as broker:
            assert wait_for(lambda: broker.console_url, timeout=10)
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            futures = admin.create_topics(
                [
                    NewTopic("orders", 6, 3, config={"retention.ms": "86400000"}),
                    NewTopic("payments", 3, 2),
                ]
            )
            for f in futures.values():
                f.result(10)
            # Screenshots while the load still runs: the charts end where it is.
            until = time.monotonic() + args.seconds + 15
            load = [
                threading.Thread(target=fn, args=(broker.bootstrap, until)) for fn in (feed, drain)
            ]
            for t in load:
                t.start()
            time.sleep(args.seconds)
            security_and_a_move(broker.bootstrap)
            with chromium() as browser:
                page = browser.new_page(
                    base_url=broker.console_url, viewport={"width": 1280, "height": 800}
                )
                for name, path in PAGES.items():
                    page.goto(path)
                    page.wait_for_selector("main table")
                    if name == "topic":
                        # The configs set on the topic: the forty defaults make a long page.
                        page.check("#only-set")
                    if name == "messages":
                        page.select_option("#browse [name=format]", "json")
                        page.locator("#browse [name=limit]").fill("8")
                        page.locator("#browse").get_by_role("button").click()
                        page.wait_for_selector("#records tbody tr")
                    page.wait_for_timeout(500)  # let the last poll's drawing settle
                    page.screenshot(path=str(args.out / f"{name}.png"), full_page=True)
                    print(f"wrote {args.out / name}.png")
            for t in load:
                t.join()


if __name__ == "__main__":
    main()
