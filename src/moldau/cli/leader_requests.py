"""Requests each partition's leader must answer (ListOffsets for `get-offsets`,
DeleteRecords for `delete-records`), asked again as Kafka's admin client asks again:
a partition whose leader moved, is being elected or could not be reached goes to the
leader fresh metadata names, until the tool's timeout. Other errors are answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from moldau.cli.admin_call import Address, CallError
from moldau.protocol.errors import ErrorCode

Partition = tuple[str, int]

#: The errors that say "ask the current leader", not "this cannot be done".
RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.request_timed_out,
    }
)
_PAUSE_S = 0.2


@dataclass(frozen=True)
class Answer:
    """A leader's answer for one partition: `value` (an offset), or `error` (text)."""

    value: int = -1
    error: str | None = None
    retriable: bool = False


def error_answer(code: int) -> Answer:
    error = ErrorCode(code)
    return Answer(error=error.name.upper(), retriable=error in RETRIABLE)


def ask_leaders(
    metadata: Callable[[], Any],
    send: Callable[[Address, list[Partition]], dict[Partition, Answer]],
    partitions: Sequence[Partition],
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
    known: Any = None,
) -> dict[Partition, Answer]:
    """Each partition's answer from its leader (`metadata()`: librdkafka's Metadata;
    `send`: one request to one broker for some of its partitions; `known`: Metadata
    the caller already has, used for the first round instead of asking again)."""
    answers: dict[Partition, Answer] = {}
    pending = list(partitions)
    deadline = clock() + timeout_s
    while True:
        md, known = (known, None) if known is not None else (metadata(), None)
        by_leader: dict[Address, list[Partition]] = {}
        for tp in pending:
            t = md.topics.get(tp[0])
            p = t.partitions.get(tp[1]) if t is not None and t.error is None else None
            broker = md.brokers.get(p.leader) if p is not None else None
            if p is None:
                answers[tp] = error_answer(ErrorCode.unknown_topic_or_partition)
            elif broker is None:
                answers[tp] = error_answer(ErrorCode.leader_not_available)
            else:
                by_leader.setdefault((broker.host, broker.port), []).append(tp)
        for address, asked in by_leader.items():
            try:
                answered = send(address, asked)
            except CallError as e:
                reason = f"cannot reach broker at {address[0]}:{address[1]}: {e.reason}"
                answered = {tp: Answer(error=reason, retriable=True) for tp in asked}
            for tp in asked:
                answers[tp] = answered.get(tp, Answer(error="no answer", retriable=True))
        pending = [tp for tp in pending if answers[tp].retriable]
        if not pending or clock() >= deadline:
            return answers
        pause(_PAUSE_S)
