"""Which way a Spark task writes its rows: by building record batches and producing
them itself (moldau.spark.batch_writer, the default) or through confluent-kafka
(moldau.spark.writer), which the option `writePath=client` asks for and which
serves what the batch path does not: TLS and SASL, settings of the producer it
does not honour (a partitioner of librdkafka's, acks other than all), and brokers
without Produce v3 (record batches v2). The switch is
said in the log once per worker and reason (moldau.spark.read_path does the same
for reads). Exactly-once writes go through moldau.spark.exactly_once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa

from moldau.spark.batch_writer import CODECS, BatchWriter
from moldau.spark.fetch_client import UnsupportedBroker
from moldau.spark.fetch_reader import client_path_reason
from moldau.spark.options import WriteOptions
from moldau.spark.writer import WriteColumns, write_batches

log = logging.getLogger(__name__)

#: Producer settings the batch path honours, or ignores because they only tune
#: librdkafka's own batching (the batch path sends each Arrow batch whole).
SERVED = frozenset(
    {
        "bootstrap.servers",
        "client.id",
        "request.timeout.ms",
        "socket.timeout.ms",
        "delivery.timeout.ms",
        "message.timeout.ms",
        "enable.idempotence",
        "linger.ms",
        "batch.size",
        "batch.num.messages",
        "queue.buffering.max.messages",
        "queue.buffering.max.kbytes",
        "security.protocol",
        # librdkafka's logging (the data source sets log_level): nothing to log here.
        "log_level",
        "debug",
        # Retries go on until delivery.timeout.ms here, with a backoff of its own.
        "retries",
        "retry.backoff.ms",
        # The level of the codec compression.type names (Kafka's, then librdkafka's).
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "compression.level",
    }
)
#: Values of settings the batch path serves only so.
_ONLY = {
    # The client path's producer is idempotent, which librdkafka allows with acks=all only.
    "acks": ("all", "-1"),
    "compression.type": tuple(CODECS),
    "compression.codec": tuple(CODECS),
    "partitioner": ("murmur2_random",),
}

_said: set[str] = set()


def _say_once(reason: str) -> None:
    if reason not in _said:
        _said.add(reason)
        log.warning("writing through confluent-kafka (the client path): %s", reason)


def batch_path_refusal(options: WriteOptions) -> str | None:
    """Why a write needs the client path, or None."""
    config = options.client_config
    reason = client_path_reason(config)
    if reason is not None:
        return f"the batch path does not serve {reason}"
    for key in sorted(config):
        allowed = _ONLY.get(key)
        if allowed is not None:
            if config[key].strip().lower() not in allowed:
                return f"the batch path does not serve the setting {key}={config[key]}"
        elif key not in SERVED:
            return f"the batch path does not serve the setting {key}"
    if config.get("enable.idempotence", "true").strip().lower() == "false":
        return "the batch path is always idempotent (enable.idempotence=false)"
    return None


def write_rows(
    options: WriteOptions, columns: WriteColumns, batches: Iterator[pa.RecordBatch]
) -> int:
    """A task's at-least-once write: its rows' count."""
    if options.write_path == "client":
        return write_batches(options, columns, batches)
    refusal = batch_path_refusal(options)
    if refusal is not None:
        _say_once(refusal)
        return write_batches(options, columns, batches)
    try:
        writer = BatchWriter(options.client_config, options.topic)
    except UnsupportedBroker as e:
        _say_once(f"the batch path cannot write to {e}")
        return write_batches(options, columns, batches)
    try:
        for batch in batches:
            writer.write(batch)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return writer.count
