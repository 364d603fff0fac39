"""The "moldau" data source: Spark's Kafka connector for PySpark, in Python.

Batch reads plan one input partition per topic partition and offset range (more
with `minPartitions` and `maxRecordsPerPartition`); streaming reads keep their
offsets in Spark's checkpoint as Spark's Kafka source does (`{"topic":
{"partition": offset}}`), so a micro-batch replayed after a restart reads exactly
the records it read before. A micro-batch is bounded by `maxOffsetsPerTrigger`
(records) and `maxBytesPerTrigger` (bytes, as the log stores them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from moldau.spark import offsets as off
from moldau.spark.exactly_once import (
    ensure_marker_topic,
    new_batch_query_id,
    slot_of_task,
    write_in_transaction,
)
from moldau.spark.metadata import OffsetReader
from moldau.spark.offsets import OffsetRange, PartitionOffsets
from moldau.spark.options import (
    InvalidOptionError,
    ReadOptions,
    TopicPartitionKey,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from moldau.spark.progress import commit_progress
from moldau.spark.schema import source_schema
from moldau.spark.writer import WriteColumns, check_write_schema

log = logging.getLogger(__name__)

#: How long the driver waits for a broker to answer while setting a write up.
_DRIVER_TIMEOUT_S = 60.0
#: How long the driver waits for the log sizes that bound a micro-batch in bytes.
_LOG_SIZES_TIMEOUT_S = 30.0


class OffsetRangePartition(InputPartition):
    """One Spark task's work: an OffsetRange."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r


class MoldauDataSource(DataSource):
    """`spark.read.format("moldau")`, `readStream`, `write`, `writeStream`.

    Its tasks read by fetching record batches themselves (or through
    confluent-kafka: moldau.spark.read_path) and write through confluent-kafka; it
    reads and writes Apache Kafka as well as Moldau."""

    @classmethod
    def name(cls) -> str:
        return "moldau"

    def schema(self) -> StructType:
        # Spark asks for the schema at load(): check the options there, as Spark's
        # connector does. Whether the read is a batch or a stream is not known yet,
        # so what is wrong for one of them only is caught when the query starts.
        try:
            options = parse_read_options(self.options, streaming=False)
        except InvalidOptionError:
            options = parse_read_options(self.options, streaming=True)
        return source_schema(options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return MoldauBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MoldauStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> MoldauWriter:
        if overwrite:
            raise InvalidOptionError(
                "Save mode Overwrite not allowed for Kafka. Allowed save modes are Append "
                "and ErrorIfExists (default)."
            )
        options = parse_write_options(self.options, streaming=False)
        columns = check_write_schema(schema, options)
        if options.exactly_once:
            ensure_marker_topic(options.client_config, options.marker_topic, _DRIVER_TIMEOUT_S)
        return MoldauWriter(options, columns)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        options = parse_write_options(self.options, streaming=True)
        columns = check_write_schema(schema, options)
        if options.exactly_once:
            ensure_marker_topic(options.client_config, options.marker_topic, _DRIVER_TIMEOUT_S)
        return MoldauStreamWriter(options, columns)


def _offset_reader(options: ReadOptions) -> OffsetReader:
    return OffsetReader(
        options.client_config,
        retries=options.fetch_offset_retries,
        retry_interval_s=options.fetch_offset_retry_interval_ms / 1000,
    )


def _partitions(options: ReadOptions, ranges: list[OffsetRange]) -> list[InputPartition]:
    split = off.split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    return [OffsetRangePartition(r) for r in split]


def _read(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, OffsetRangePartition):
        return iter(())  # PySpark's stand-in when there is nothing to read
    # Imported here, in the executors' workers only: the wire protocol (kio) takes a
    # second or more to import, which the driver's planning processes, one started for
    # each query, would pay for nothing.
    from moldau.spark.read_path import read_range

    return read_range(
        options.client_config,
        partition.range,
        fetch_path=options.fetch_path,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
    )


def _starting_offsets(
    o: ReadOptions, reader: OffsetReader
) -> tuple[list[TopicPartitionKey], PartitionOffsets, PartitionOffsets, PartitionOffsets]:
    """The partitions read, their earliest and latest offsets, and where reading starts."""
    tps = reader.partitions(o.subscription)
    earliest, latest = reader.earliest(tps), reader.latest(tps)
    start = off.resolve(
        o.starting, tps, earliest, latest, reader.by_timestamp,
        timestamp_missing=o.timestamp_strategy,
    )  # fmt: skip
    return tps, earliest, latest, start


class MoldauBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        reader = _offset_reader(o)
        try:
            tps, earliest, latest, start = _starting_offsets(o, reader)
            end = off.resolve(
                o.ending, tps, earliest, latest, reader.by_timestamp, timestamp_missing="latest"
            )
        finally:
            reader.close()
        for tp in tps:
            if start[tp] > end[tp]:
                raise InvalidOptionError(
                    f"The starting offset {start[tp]} of {tp[0]}-{tp[1]} is after its ending "
                    f"offset {end[tp]}: check startingOffsets and endingOffsets"
                )
        return _partitions(o, off.offset_ranges(start, end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class MoldauStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the subscribed partitions. New partitions, and new
    topics matching a pattern, are read from their earliest offset."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._offsets: OffsetReader | None = None
        #: With Trigger.AvailableNow: the latest offsets when the query started;
        #: the query reads up to them and no further.
        self._available_now: PartitionOffsets | None = None
        #: What was last committed to `commitToGroup`.
        self._progress: dict[str, Any] | None = None
        #: Whether the log said that maxBytesPerTrigger cannot be served.
        self._said_unbounded = False

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_offsets": None}

    def _reader(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = _offset_reader(self.options)
        return self._offsets

    def initialOffset(self) -> dict[str, Any]:
        return off.to_json(_starting_offsets(self.options, self._reader())[3])

    def getDefaultReadLimit(self) -> ReadLimit:
        # One limit only (PySpark has no composite one): maxBytesPerTrigger, when
        # maxOffsetsPerTrigger is set too, is applied from the options.
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        reader = self._reader()
        self._available_now = reader.latest(reader.partitions(self.options.subscription))

    def _latest(self) -> PartitionOffsets:
        reader = self._reader()
        if self._available_now is not None:
            return dict(self._available_now)
        return reader.latest(reader.partitions(self.options.subscription))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        # Spark asks for the next batch only once the one ending at `start` is done,
        # and with Trigger.AvailableNow it never calls commit() for the last one.
        self._commit_progress(start)
        begin = off.from_json(start)
        latest = self._latest()
        new = [tp for tp in latest if tp not in begin]
        # Where new partitions start, so that a limit shares records fairly.
        begin.update(self._reader().earliest(new))
        # ReadAllAvailable (Trigger.Once) reads everything, whatever the options say.
        end = latest
        if isinstance(limit, ReadMaxRows):
            end = off.rate_limit(begin, latest, limit.max_rows)
        max_bytes = self.options.max_bytes_per_trigger
        if isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        if max_bytes is not None and not isinstance(limit, ReadAllAvailable):
            end = off.tighter(end, self._byte_limit(begin, latest, max_bytes))
        # A partition that went back (a truncated log) is reported in partitions().
        return off.to_json(end)

    def _byte_limit(
        self, begin: PartitionOffsets, latest: PartitionOffsets, max_bytes: int
    ) -> PartitionOffsets:
        """The end of a batch of at most about `max_bytes`, from each partition's
        size on its leader; where the brokers cannot tell, no byte bound."""
        waiting = sorted(tp for tp, end in latest.items() if end > begin.get(tp, end))
        if not waiting:
            return dict(latest)
        # Only with maxBytesPerTrigger: the wire protocol, as in _read.
        from moldau.spark.fetch_client import parse_bootstrap
        from moldau.spark.fetch_reader import client_path_reason
        from moldau.spark.log_sizes import LogSizesUnavailable, log_extents

        config = self.options.client_config
        reason = client_path_reason(config)
        try:
            if reason is not None:
                raise LogSizesUnavailable(f"the driver asks them over PLAINTEXT only, not {reason}")
            extents = log_extents(
                parse_bootstrap(config.get("bootstrap.servers", "")),
                waiting,
                timeout_s=_LOG_SIZES_TIMEOUT_S,
            )
        except LogSizesUnavailable as e:
            if not self._said_unbounded:
                self._said_unbounded = True
                log.warning(
                    "maxBytesPerTrigger is not applied: the partitions' sizes (DescribeLogDirs) "
                    "are not known: %s",
                    e,
                )
            return dict(latest)
        return off.byte_limit(begin, latest, off.bytes_per_offset(extents), max_bytes)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return off.to_json(self._latest())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        o = self.options
        begin, until = off.from_json(start), off.from_json(end)
        new = sorted(tp for tp in until if tp not in begin)
        if new:
            earliest = self._reader().earliest(new)
            for tp in new:
                if earliest[tp] != 0:
                    off.report_data_loss(
                        f"Added partition {tp[0]}-{tp[1]} starts from {earliest[tp]} instead of 0",
                        o.fail_on_data_loss,
                    )
            begin.update(earliest)
        gone = sorted(tp for tp in begin if tp not in until)
        # Offsets of topics the query does not read: its checkpoint is another
        # query's (Spark cannot change a query's topics over its checkpoint).
        unread = sorted({t for t, _ in gone if not o.subscription.matches(t)})
        if unread:
            off.report_checkpoint_of_other_topics(
                unread, o.subscription.describe(), o.fail_on_data_loss
            )
        gone = [tp for tp in gone if tp[0] not in unread]
        if gone:
            off.report_data_loss(
                f"{', '.join(f'{t}-{p}' for t, p in gone)} are gone", o.fail_on_data_loss
            )
        for tp in sorted(until):
            if until[tp] < begin[tp]:
                off.report_data_loss(
                    f"Partition {tp[0]}-{tp[1]}'s offset was changed from {begin[tp]} to "
                    f"{until[tp]}",
                    o.fail_on_data_loss,
                )
        return _partitions(o, off.offset_ranges(begin, until))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_progress(end)

    def _commit_progress(self, end: dict[str, Any]) -> None:
        if self.options.commit_to_group is None or end == self._progress:
            return
        commit_progress(self.options.client_config, self.options.commit_to_group, end)
        self._progress = end

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None


class WriteResult(WriterCommitMessage):
    def __init__(self, records: int) -> None:
        self.records = records


class MoldauWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions, columns: WriteColumns) -> None:
        self.options = options
        self.columns = columns
        # Made on the driver, so that every task of this write (and its retries) shares it.
        self.query_id = new_batch_query_id()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return WriteResult(_write(self.options, self.columns, iterator, self.query_id))


class MoldauStreamWriter(DataSourceStreamArrowWriter):
    """At-least-once by default, as Spark's Kafka sink: a micro-batch Spark runs
    again after a failure is written again; with exactlyOnce, once (each task in a
    transaction: moldau.spark.exactly_once)."""

    def __init__(self, options: WriteOptions, columns: WriteColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return WriteResult(_write(self.options, self.columns, iterator, None))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # every record is already written (and committed) by its task

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # at-least-once: records written cannot be taken back; exactly-once: the
        # tasks aborted their own transactions, or their next attempts will


def _write(
    options: WriteOptions,
    columns: WriteColumns,
    batches: Iterator[pa.RecordBatch],
    batch_query_id: str | None,
) -> int:
    if options.exactly_once:
        return write_in_transaction(
            options, columns, slot_of_task(options, batch_query_id), batches
        )
    from moldau.spark.write_path import write_rows  # as in _read: executors only

    return write_rows(options, columns, batches)
