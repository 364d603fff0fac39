"""Who appends a batch to a leader's log (Kafka's AppendOrigin): it decides which
checks the batch gets."""

from __future__ import annotations

from enum import Enum


class AppendOrigin(Enum):
    # A producer's batch: every check, sequence numbers included.
    CLIENT = "client"
    # The broker's own coordinators (offsets committed in a transaction, the
    # transaction log): the producer's epoch is checked, its sequence is not (the
    # records carry none), and only they may write control batches.
    COORDINATOR = "coordinator"
