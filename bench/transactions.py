"""Transactions: what they cost a producer and a consumer, against the same broker
without them, in one run.

- Produce: confluent-kafka sends N records of 100 B to one partition, idempotent
  (the baseline), then transactional with 1,000, 100 and 10 records a transaction
  (begin, produce, commit); records/s and the ratio to the baseline. The aim
  (issue 25): at least 0.8x at 1,000 records a transaction.
- Commit latency: commit_transaction() of a transaction of 10 records, p50/p99.
- Consume: the records the transactional runs wrote (markers among them, and a tenth
  of the transactions aborted, so the reader has aborted ranges to skip), read by a
  read_committed consumer and by a read_uncommitted one; records/s and the ratio.
  The aim: read_committed at least 0.9x.

    .venv/bin/python bench/transactions.py [--records 200000] [--record]
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from throughput import create_topic, machine, publish, started, warm_memory

VALUE = b"x" * 100
SIZES = (1000, 100, 10)
# Room for every record of a run: neither producer waits on a full queue, whose
# back-off would slow the idempotent baseline, which never flushes on its own.
QUEUE = 1_000_000


def produce_idempotent(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "queue.buffering.max.messages": QUEUE,
        }
    )
    start = time.perf_counter()
    for _ in range(n):
        _produce(p, topic)
    if p.flush(60):
        raise SystemExit("idempotent produce did not finish")
    return n / (time.perf_counter() - start)


def _produce(p: object, topic: str) -> None:
    while True:
        try:
            p.produce(topic, VALUE, partition=0)  # type: ignore[attr-defined]
            return
        except BufferError:
            p.poll(0.05)  # type: ignore[attr-defined]


def produce_transactional(
    bootstrap: str, topic: str, n: int, per_txn: int, abort_every: int = 0
) -> tuple[float, list[float]]:
    """(records/s, commit latencies in ms); with `abort_every`, every that many-th
    transaction is aborted (its records are not counted in the rate)."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{topic}-{per_txn}",
            "linger.ms": 5,
            "queue.buffering.max.messages": QUEUE,
        }
    )
    p.init_transactions(30)
    commits: list[float] = []
    written = 0
    start = time.perf_counter()
    for txn in range(n // per_txn):
        p.begin_transaction()
        for _ in range(per_txn):
            _produce(p, topic)
        t = time.perf_counter()
        if abort_every and txn % abort_every == abort_every - 1:
            p.flush(30)  # in the log, for readers to skip (an abort drops what is unsent)
            p.abort_transaction(30)
            continue
        p.commit_transaction(30)
        commits.append((time.perf_counter() - t) * 1000)
        written += per_txn
    return written / (time.perf_counter() - start), commits


def consume_rate(bootstrap: str, topic: str, isolation: str) -> tuple[float, int]:
    """(records/s, records) reading the partition from the start to its end."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.time_ns()}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    n = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        msgs = c.consume(10_000, 1.0)
        if any(m.error() is not None and m.error().code() == -191 for m in msgs):
            n += sum(1 for m in msgs if m.error() is None)
            break
        n += len(msgs)
    elapsed = time.perf_counter() - start
    c.close()
    return n / elapsed, n


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--warm-memory", type=int, default=2, metavar="GIB")
    args = parser.parse_args()
    warm_memory(args.warm_memory)
    n = args.records
    workdir = Path(tempfile.mkdtemp(prefix="bench-txn-"))
    try:
        with started("moldau", workdir) as broker:
            bootstrap = broker.bootstrap
            base_topic = f"idem-{time.time_ns()}"
            create_topic(bootstrap, base_topic, 1)
            produce_idempotent(bootstrap, base_topic, min(n, 20_000))  # warm-up
            baseline = produce_idempotent(bootstrap, base_topic, n)
            rows = []
            latencies: list[float] = []
            for size in SIZES:
                topic = f"txn-{size}-{time.time_ns()}"
                create_topic(bootstrap, topic, 1)
                count = n if size >= 100 else n // 10
                rate, commits = produce_transactional(bootstrap, topic, count, size)
                rows.append((size, rate, rate / baseline))
                if size == 10:
                    latencies = commits
            mixed = f"txn-mixed-{time.time_ns()}"
            create_topic(bootstrap, mixed, 1)
            produce_transactional(bootstrap, mixed, n, 100, abort_every=10)
            consume_rate(bootstrap, mixed, "read_uncommitted")  # warm-up
            uncommitted, n_unc = consume_rate(bootstrap, mixed, "read_uncommitted")
            committed, n_com = consume_rate(bootstrap, mixed, "read_committed")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    lines = [
        f"## {datetime.date.today().isoformat()}: transactions (bench/transactions.py)",
        "",
        f"Machine: {machine()}. One broker, one partition, confluent-kafka, 100 B records.",
        "",
        "| produce | records/s | / idempotent |",
        "|---|---|---|",
        f"| idempotent, no transactions | {baseline:,.0f} | 1.00x |",
    ]
    for size, rate, ratio in rows:
        lines.append(f"| {size:,} records a transaction | {rate:,.0f} | {ratio:.2f}x |")
    lines += [
        "",
        f"commit_transaction() of 10 records: p50 {pct(latencies, 0.5):.1f} ms, "
        f"p99 {pct(latencies, 0.99):.1f} ms, mean {statistics.mean(latencies):.1f} ms "
        f"({len(latencies):,} commits).",
        "",
        "| consume (transactions of 100, one in ten aborted) | records/s | records | ratio |",
        "|---|---|---|---|",
        f"| read_uncommitted | {uncommitted:,.0f} | {n_unc:,} | 1.00x |",
        f"| read_committed | {committed:,.0f} | {n_com:,} | {committed / uncommitted:.2f}x |",
    ]
    publish("\n".join(lines), args.record)


if __name__ == "__main__":
    main()
