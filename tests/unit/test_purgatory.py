"""The purgatory keeps Kafka's contract: on_complete exactly once, expiration by an
injected timer, no missed wake-up between the first try and the watch."""

from __future__ import annotations

from moldau.clock import FakeClock
from moldau.replication.purgatory import DelayedOperation, DelayedOperationPurgatory, ManualTimer


class Waiter(DelayedOperation):
    def __init__(self, delay_ms: int, ready: list[bool]) -> None:
        super().__init__(delay_ms)
        self.ready = ready
        self.completions = 0
        self.expired = False
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        if self.ready[0]:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1

    def on_expiration(self) -> None:
        self.expired = True


def purgatory() -> tuple[DelayedOperationPurgatory[str, Waiter], ManualTimer]:
    timer = ManualTimer(FakeClock())
    return DelayedOperationPurgatory("test", timer), timer


def test_completes_immediately_without_watching_when_ready() -> None:
    p, timer = purgatory()
    op = Waiter(1000, [True])
    assert p.try_complete_else_watch(op, ["k"])
    assert op.completions == 1 and p.watched() == 0 and timer.pending == 0


def test_completes_once_when_its_key_is_checked_after_the_condition_holds() -> None:
    p, timer = purgatory()
    ready = [False]
    op = Waiter(1000, ready)
    assert not p.try_complete_else_watch(op, ["a", "b"])
    assert p.check_and_complete("a") == 0
    ready[0] = True
    assert p.check_and_complete("a") == 1
    assert p.check_and_complete("b") == 0
    timer.advance(5000)
    assert op.completions == 1 and not op.expired


def test_expires_after_its_delay_exactly_once() -> None:
    p, timer = purgatory()
    op = Waiter(1000, [False])
    p.try_complete_else_watch(op, ["k"])
    timer.advance(999)
    assert op.completions == 0
    timer.advance(1)
    assert op.completions == 1 and op.expired
    timer.advance(5000)
    assert op.completions == 1


def test_a_condition_met_during_watching_is_not_missed() -> None:
    p, _ = purgatory()
    ready = [False]

    class Racing(Waiter):
        def try_complete(self) -> bool:
            # The condition becomes true right after the first (failed) try.
            result = super().try_complete()
            ready[0] = True
            return result

    op = Racing(1000, ready)
    assert p.try_complete_else_watch(op, ["k"])
    assert op.tries == 2 and op.completions == 1


def test_completed_operations_do_not_pile_up_under_keys_nobody_checks() -> None:
    p, _ = purgatory()
    ready = [False]
    for i in range(3000):
        p.try_complete_else_watch(Waiter(10_000, ready), ["hot", f"idle-{i}"])
    ready[0] = True
    assert p.check_and_complete("hot") == 3000
    p.try_complete_else_watch(Waiter(10_000, [False]), ["another"])
    assert p.watched() == 1
    assert len(p._watchers) < 1500
