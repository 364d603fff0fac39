"""Topic-partition identity and its directory name, `<topic>-<partition>`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dir_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @classmethod
    def parse_dir_name(cls, name: str) -> TopicPartition:
        """Topic names may contain '-': the partition is after the last one."""
        topic, sep, partition = name.rpartition("-")
        if not sep or not topic or not partition.isdigit():
            raise ValueError(f"not a partition directory name: {name!r}")
        return cls(topic, int(partition))


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """The partitions grouped by topic, in the order met: how requests list them."""
    topics: dict[str, list[int]] = {}
    for tp in partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return topics
