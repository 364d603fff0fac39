"""partition.metadata: the id of the topic a partition's log belongs to (Kafka's
PartitionMetadataFile), so that a log left by a deleted topic is never taken for
the log of a new topic of the same name.

    version: 0
    topic_id: <the topic id in Kafka's base64 form>
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

from moldau.protocol.uuids import uuid_from_base64, uuid_to_base64

log = logging.getLogger(__name__)

PARTITION_METADATA = "partition.metadata"
_VERSION = 0


def read_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id the file names; None if it is missing or unreadable (a crash
    may cut a first write short: the id is then written again)."""
    try:
        text = (directory / PARTITION_METADATA).read_text()
    except FileNotFoundError:
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    try:
        if int(fields["version"]) != _VERSION:
            raise ValueError(f"version {fields['version']}")
        return uuid_from_base64(fields["topic_id"].strip())
    except (KeyError, ValueError) as e:
        log.warning("ignoring %s: %s", directory / PARTITION_METADATA, e)
        return None


def write_topic_id(directory: Path, topic_id: uuid.UUID) -> None:
    """Written once per log, without an fsync: a file lost in a crash is written again
    at the next LeaderAndIsr, and a torn one reads as missing."""
    data = f"version: {_VERSION}\ntopic_id: {uuid_to_base64(topic_id)}\n".encode()
    fd = os.open(directory / PARTITION_METADATA, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
