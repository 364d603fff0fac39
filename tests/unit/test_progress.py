"""cli/progress.py: a bar on a terminal's stderr, nothing anywhere else; and the perf
tools' counting, pacing (cli/perf_stats.py) and transactions (cli/perf.py) on a clock
the test turns."""

from __future__ import annotations

import io

import pytest

from moldau.cli.perf import Transactions
from moldau.cli.perf_stats import ProducerStats, ThroughputThrottler, percentiles
from moldau.cli.progress import Progress, render


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_bar_is_drawn_on_a_terminal_at_most_every_interval_and_erased_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TERM", raising=False)
    term, clock = FakeTerminal(), Clock()
    with Progress(200, "records", "sent", stream=term, clock=clock, interval_s=0.2) as bar:
        bar.update(50)
        bar.update(60)  # at the same moment: not redrawn
        clock.now = 0.3
        bar.update(100)
        drawn = term.getvalue()
    assert drawn.count("\r") == 2
    assert drawn.endswith("50.0% 100/200 sent")
    assert "records [" in drawn
    assert term.getvalue().endswith("\r\x1b[K")  # erased: the tool's output starts clean


def test_no_bar_when_stderr_is_not_a_terminal_or_the_terminal_is_dumb(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    piped = io.StringIO()
    with Progress(10, stream=piped) as bar:
        bar.update(5)
    assert piped.getvalue() == ""
    monkeypatch.setenv("TERM", "dumb")
    term = FakeTerminal()
    with Progress(10, stream=term) as bar:
        bar.update(5)
    assert term.getvalue() == ""


def test_render_fits_the_width_and_never_passes_the_total() -> None:
    line = render(150, 100, 40, "bytes", "B")
    assert len(line) <= 40 and "100.0% 100/100 B" in line and "#" * 10 in line
    assert render(0, 0, 40).strip().startswith("[")
    narrow = render(5, 10, 12, "a-long-label")
    assert len(narrow) <= 12


def test_the_producer_stats_print_a_window_each_interval_and_kafkas_totals() -> None:
    lines: list[str] = []
    now = [0]
    stats = ProducerStats(1000, lines.append, lambda: now[0], reporting_interval_ms=5000)
    for i in range(1000):
        now[0] = i * 10  # a record every 10 ms, 1..1000 ms latency
        stats.record(i + 1, 100, now[0])
    # Windows closed at 5 s (records 0..500) and 10 s would be the next.
    assert lines == [
        "501 records sent, 100.2 records/sec (0.01 MB/sec), 251.0 ms avg latency, "
        "501.0 ms max latency."
    ]
    now[0] = 10_000
    assert stats.total_line() == (
        "1000 records sent, 100.0 records/sec (0.01 MB/sec), 500.50 ms avg latency, "
        "1000.00 ms max latency, 501 ms 50th, 951 ms 95th, 991 ms 99th, 1000 ms 99.9th."
    )
    assert percentiles([], (0.5,)) == [0]


def test_the_throttler_sleeps_off_the_deficit_only_when_ahead_of_the_target() -> None:
    slept: list[float] = []
    t = ThroughputThrottler(100, start_ms=0, sleep=slept.append)
    assert not t.should_throttle(50, 1000)  # 50/s: behind 100/s
    assert t.should_throttle(150, 1000)
    t.throttle()  # 10 ms owed: slept at once
    assert slept == [pytest.approx(0.01)]
    fast = ThroughputThrottler(1000, start_ms=0, sleep=slept.append)
    fast.throttle()  # 1 ms owed: too little to sleep precisely, carried over
    assert len(slept) == 1
    fast.throttle()
    assert slept[-1] == pytest.approx(0.002)
    assert not ThroughputThrottler(-1, start_ms=0).should_throttle(10**9, 1)


def test_a_line_printed_through_the_bar_is_never_mixed_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TERM", raising=False)
    term, out, clock = FakeTerminal(), io.StringIO(), Clock()
    with Progress(10, stream=term, clock=clock) as bar:
        bar.update(3)
        bar.print("3 records sent, 1.0 records/sec", stream=out)
        shown = term.getvalue()
    assert out.getvalue() == "3 records sent, 1.0 records/sec\n"
    # Erased before the line, drawn again after it.
    first, rest = shown.split("\r\x1b[K", 1)
    assert "3/10" in first and "3/10" in rest
    piped_out = io.StringIO()
    with Progress(10, stream=io.StringIO()) as quiet:
        quiet.print("a line", stream=piped_out)
    assert piped_out.getvalue() == "a line\n"


class FakeProducer:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def init_transactions(self, timeout: float) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def commit_transaction(self) -> None:
        self.calls.append("commit")


def test_perf_produce_commits_a_transaction_once_it_is_old_enough_and_at_the_end() -> None:
    producer, now = FakeProducer(), [0]
    txn = Transactions(producer, 100, clock_ms=lambda: now[0])
    for ms in range(0, 250, 10):  # a record every 10 ms
        now[0] = ms
        txn.begin_if_none()
        producer.calls.append("send")
        txn.sent(ms)
    txn.commit()
    txn.commit()  # nothing open: nothing to commit
    # Begun at 0 and committed with the record of 100 ms; again 110-210; 220-240 last.
    assert producer.calls == (
        ["init", "begin"] + ["send"] * 11 + ["commit", "begin"] + ["send"] * 11
        + ["commit", "begin"] + ["send"] * 3 + ["commit"]
    )  # fmt: skip
    silent = Transactions(None, 100)
    silent.begin_if_none()
    silent.sent(10_000)
    silent.commit()  # not transactional: no calls, no error
