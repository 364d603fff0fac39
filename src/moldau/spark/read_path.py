"""Which way a Spark task reads its range: by fetching record batches itself
(moldau.spark.fetch_reader, the default) or through confluent-kafka
(moldau.spark.reader), which the option `fetchPath=client` asks for and which
serves what the fetching path cannot: TLS and SASL, and record batches older than
message format v2. The switch is said in the log once per worker: for settings once
per reason, for records once per partition (and reason), naming it and the offset
the client path took over from.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import pyarrow as pa

from moldau.spark import reader
from moldau.spark.fetch_reader import NeedsClientPath, client_path_reason, read_range_fetching
from moldau.spark.offsets import OffsetRange

log = logging.getLogger(__name__)

_said: set[str] = set()


def _say_once(key: str, message: str, *args: object) -> None:
    if key not in _said:
        _said.add(key)
        log.warning(message, *args)


def read_range(
    client_config: Mapping[str, str],
    r: OffsetRange,
    *,
    fetch_path: str,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    def client_path(rr: OffsetRange) -> Iterator[pa.RecordBatch]:
        return reader.read_range(
            client_config,
            rr,
            include_headers=include_headers,
            fail_on_data_loss=fail_on_data_loss,
            poll_timeout_ms=poll_timeout_ms,
        )

    if fetch_path == "client":
        yield from client_path(r)
        return
    reason = client_path_reason(client_config)
    if reason is not None:
        _say_once(
            f"settings: {reason}",
            "reading through confluent-kafka (the client path): the fetching path does not "
            "serve %s",
            reason,
        )
        yield from client_path(r)
        return
    try:
        yield from read_range_fetching(
            client_config,
            r,
            include_headers=include_headers,
            fail_on_data_loss=fail_on_data_loss,
            poll_timeout_ms=poll_timeout_ms,
        )
    except NeedsClientPath as e:
        _say_once(
            f"{r.topic}-{r.partition} {e.reason}",
            "reading %s-%s through confluent-kafka (the client path) from offset %s: the "
            "fetching path does not read %s",
            r.topic,
            r.partition,
            e.position,
            e.reason,
        )
        yield from client_path(OffsetRange(r.topic, r.partition, e.position, r.end))
