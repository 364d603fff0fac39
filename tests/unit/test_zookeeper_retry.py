"""How the ZooKeeper store retries a request while ZooKeeper is away."""

from __future__ import annotations

import types

import kazoo.retry
import pytest
from kazoo import exceptions as kz

from moldau.metadata.zookeeper import request_retry


class _Away:
    """ZooKeeper unreachable until `back_at` on a fake clock that the retry's sleeps
    advance: a request made meanwhile fails with a connection loss."""

    def __init__(self, back_at: float) -> None:
        self.now = 0.0
        self.back_at = back_at

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def request(self) -> str:
        if self.now < self.back_at:
            raise kz.ConnectionLoss()
        return "answer"


@pytest.fixture
def away(monkeypatch: pytest.MonkeyPatch) -> _Away:
    zk = _Away(back_at=10 * 60.0)
    # kazoo reads its deadline's clock from its module's `time`.
    monkeypatch.setattr(kazoo.retry, "time", types.SimpleNamespace(monotonic=lambda: zk.now))
    return zk


def test_a_request_waits_out_zookeeper_being_away_however_long(away: _Away) -> None:
    retry = request_retry()
    retry.sleep_func = away.sleep
    assert retry.copy()(away.request) == "answer"
    # Answered soon after ZooKeeper is back: the back-off stays short.
    assert away.back_at <= away.now <= away.back_at + 1.5


@pytest.mark.parametrize("error", [kz.SessionExpiredError, kz.OperationTimeoutError])
def test_a_request_is_retried_through_an_expiry_or_a_timeout(
    away: _Away, error: type[Exception]
) -> None:
    answers = iter([error(), error()])

    def request() -> str:
        e = next(answers, None)
        if e is not None:
            raise e
        return "answer"

    retry = request_retry()
    retry.sleep_func = away.sleep
    assert retry.copy()(request) == "answer"


def test_a_closed_client_ends_the_retries(away: _Away) -> None:
    def request() -> str:
        raise kz.ConnectionClosedError("Connection has been closed")

    retry = request_retry()
    retry.sleep_func = away.sleep
    with pytest.raises(kz.ConnectionClosedError):
        retry.copy()(request)
