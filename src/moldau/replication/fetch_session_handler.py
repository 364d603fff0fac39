"""The fetcher's half of an incremental fetch session (KIP-227; Kafka's
FetchSessionHandler): which partitions the next Fetch to one leader names.

The first Fetch is full (epoch 0) and, if the leader has room, opens a session.
After that each Fetch names only the partitions whose fetch state (offset, epochs,
log start, size) changed since the last one, and forgets those no longer fetched.
An error, lost connection or unknown session makes the next Fetch full again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from moldau.protocol.errors import ErrorCode
from moldau.replication.fetcher import FollowerFetchPartition
from moldau.storage.partition_name import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0


def next_epoch(epoch: int) -> int:
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass(frozen=True, slots=True)
class SessionFetch:
    """What one Fetch says about its session."""

    session_id: int
    epoch: int
    to_send: list[FollowerFetchPartition]
    to_forget: list[TopicPartition]

    @property
    def is_full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FetchSessionHandler:
    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # what the leader holds for us, as of the last Fetch built
        self.partitions: dict[TopicPartition, FollowerFetchPartition] = {}

    def build(self, wanted: Sequence[FollowerFetchPartition]) -> SessionFetch:
        nxt = {p.tp: p for p in wanted}
        if self.epoch == INITIAL_EPOCH:
            fetch = SessionFetch(self.session_id, INITIAL_EPOCH, list(wanted), [])
        else:
            changed = [p for p in wanted if self.partitions.get(p.tp) != p]
            gone = [tp for tp in self.partitions if tp not in nxt]
            fetch = SessionFetch(self.session_id, self.epoch, changed, gone)
        self.partitions = nxt
        return fetch

    def handle_response(self, fetch: SessionFetch, error: int, session_id: int) -> bool:
        """Moves the session on after an answer; False if the answer is not usable."""
        if error != ErrorCode.none:
            if error == ErrorCode.fetch_session_id_not_found:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH  # a full Fetch next, closing the session we had
            return False
        if session_id == INVALID_SESSION_ID:
            # No room for a session, or the leader closed it: full Fetches.
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif fetch.is_full:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The Fetch got no answer: what the leader holds is unknown, start afresh."""
        self.epoch = INITIAL_EPOCH
