"""Kafka's string form of a UUID (its Uuid.toString): 22 characters of URL-safe
base64, no padding. Topic ids and cluster ids are written this way in ZooKeeper and
in a log's partition.metadata."""

from __future__ import annotations

import base64
import uuid

ZERO_UUID = uuid.UUID(int=0)


def uuid_to_base64(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def uuid_from_base64(s: str) -> uuid.UUID:
    """ValueError if `s` is not one."""
    try:
        raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (ValueError, TypeError) as e:  # binascii.Error is a ValueError
        raise ValueError(f"not a Kafka UUID: {s!r}") from e
    if len(raw) != 16:
        raise ValueError(f"not a Kafka UUID: {s!r}")
    return uuid.UUID(bytes=raw)
