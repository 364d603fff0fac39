"""LogManager: every partition log of a broker, across its log directories.

It loads logs at start-up (recovering them if the last shutdown was not clean),
creates and deletes them, applies retention, and writes the checkpoints. It runs
no background task itself: the broker calls `cleanup_logs`, `flush_due_logs`,
`checkpoint` and `delete_expired_files` on its own schedule.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from moldau.clock import Clock
from moldau.protocol.errors import KafkaStorageError
from moldau.storage.checkpoint import OffsetCheckpointFile, fsync_dir, write_atomically
from moldau.storage.log import Log, remove_log_dir
from moldau.storage.log_config import LogConfig
from moldau.storage.partition_name import TopicPartition

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
META_PROPERTIES = "meta.properties"
DELETE_DIR_SUFFIX = "-delete"


class LogManager:
    def __init__(self, log_dirs: Iterable[Path], clock: Clock, broker_id: int) -> None:
        self.log_dirs = [Path(d).resolve() for d in log_dirs]
        self.clock = clock
        self.broker_id = broker_id
        self.logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        # (log, offset) pairs whose segments below `offset` were rolled and await fsync.
        self.pending_flushes: list[tuple[Log, int]] = []
        # partition -> first offset the log cleaner has not compacted yet
        self.cleaner_checkpoints: dict[TopicPartition, int] = {}
        self._doomed_dirs: list[tuple[int, Path]] = []

    # -- start-up and shutdown ----------------------------------------------------------

    def startup(self, config_for: Callable[[str], LogConfig], cluster_id: str) -> None:
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._check_meta_properties(log_dir, cluster_id)
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
            start_offsets = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
            self.cleaner_checkpoints.update(
                self._read_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT)
            )
            for path in sorted(log_dir.iterdir()):
                if not path.is_dir():
                    continue
                if path.name.endswith(DELETE_DIR_SUFFIX):
                    remove_log_dir(path)
                    continue
                try:
                    tp = TopicPartition.parse_dir_name(path.name)
                except ValueError:
                    continue
                opened = Log.open(
                    path,
                    tp,
                    config_for(tp.topic),
                    self.clock,
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=start_offsets.get(tp, 0),
                    had_clean_shutdown=clean,
                    on_roll=self._on_roll,
                )
                self.logs[tp] = opened
                self._dir_of[tp] = log_dir
            if not clean and self.logs:
                log.info("%s: recovered logs after an unclean shutdown", log_dir)
            # From now on a crash is unclean until the next clean shutdown.
            marker.unlink(missing_ok=True)
        self.checkpoint()

    def _check_meta_properties(self, log_dir: Path, cluster_id: str) -> None:
        path = log_dir / META_PROPERTIES
        if path.exists():
            props = dict(
                line.split("=", 1)
                for line in path.read_text().splitlines()
                if "=" in line and not line.startswith("#")
            )
            if int(props.get("broker.id", self.broker_id)) != self.broker_id:
                raise KafkaStorageError(
                    f"{path} belongs to broker.id {props['broker.id']}, not {self.broker_id}"
                )
            if props.get("cluster.id", cluster_id) != cluster_id:
                raise KafkaStorageError(
                    f"{path} belongs to cluster {props['cluster.id']}, not {cluster_id}"
                )
            return
        write_atomically(
            path, f"version=0\nbroker.id={self.broker_id}\ncluster.id={cluster_id}\n".encode()
        )

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(path).read()
        except ValueError as e:
            log.warning("ignoring %s: %s", path, e)
            return {}

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean marker."""
        for lg in self.logs.values():
            lg.flush()
            lg.close()
        self.checkpoint()
        for _, path in self._doomed_dirs:
            remove_log_dir(path)
        for log_dir in self.log_dirs:
            write_atomically(log_dir / CLEAN_SHUTDOWN_FILE, b"")

    # -- logs ----------------------------------------------------------------------------

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self.logs.get(tp)

    def get_or_create_log(self, tp: TopicPartition, config: LogConfig) -> Log:
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        log_dir = self._next_log_dir()
        created = Log.open(
            log_dir / tp.dir_name, tp, config, self.clock, had_clean_shutdown=True,
            on_roll=self._on_roll,
        )  # fmt: skip
        fsync_dir(log_dir)
        self.logs[tp] = created
        self._dir_of[tp] = log_dir
        return created

    def _next_log_dir(self) -> Path:
        """The log dir holding the fewest partitions, as Kafka picks."""
        counts = {d: 0 for d in self.log_dirs}
        for d in self._dir_of.values():
            counts[d] += 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def delete_log(self, tp: TopicPartition) -> None:
        """Remove a partition's log: its directory is renamed at once (so a restart
        never loads it again) and removed after file.delete.delay.ms."""
        lg = self.logs.pop(tp, None)
        log_dir = self._dir_of.pop(tp, None)
        if lg is None or log_dir is None:
            return
        lg.close()
        self.cleaner_checkpoints.pop(tp, None)
        doomed = log_dir / f"{tp.dir_name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        os.replace(lg.dir, doomed)
        fsync_dir(log_dir)
        self._doomed_dirs.append(
            (self.clock.milliseconds() + lg.config.file_delete_delay_ms, doomed)
        )
        self.pending_flushes = [(x, o) for x, o in self.pending_flushes if x is not lg]

    def _on_roll(self, lg: Log, offset: int) -> None:
        self.pending_flushes.append((lg, offset))

    # -- periodic work (the broker schedules these) -------------------------------------

    def cleanup_logs(self, high_watermark: Callable[[TopicPartition], int]) -> int:
        """Retention for every log; returns the number of segments deleted."""
        return sum(lg.delete_old_segments(high_watermark(tp)) for tp, lg in list(self.logs.items()))

    def delete_expired_files(self) -> None:
        now = self.clock.milliseconds()
        for lg in self.logs.values():
            lg.delete_expired_files(now)
        keep = []
        for due, path in self._doomed_dirs:
            if due <= now:
                remove_log_dir(path)
            else:
                keep.append((due, path))
        self._doomed_dirs = keep

    def logs_due_for_flush(self) -> list[tuple[Log, int | None]]:
        """Logs to fsync now: rolled segments, and logs past flush.ms."""
        due: list[tuple[Log, int | None]] = list(self.pending_flushes)
        self.pending_flushes = []
        now = self.clock.milliseconds()
        for lg in self.logs.values():
            if (
                now - lg.last_flush_ms >= lg.config.flush_ms
                and lg.log_end_offset > lg.recovery_point
            ):
                due.append((lg, None))
        return due

    def checkpoint(self) -> None:
        by_dir: dict[Path, list[TopicPartition]] = {d: [] for d in self.log_dirs}
        for tp, d in self._dir_of.items():
            by_dir[d].append(tp)
        for d, tps in by_dir.items():
            OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).write(
                {tp: self.logs[tp].recovery_point for tp in tps}
            )
            OffsetCheckpointFile(d / LOG_START_OFFSET_CHECKPOINT).write(
                {tp: self.logs[tp].log_start_offset for tp in tps}
            )
            OffsetCheckpointFile(d / CLEANER_OFFSET_CHECKPOINT).write(
                {tp: self.cleaner_checkpoints[tp] for tp in tps if tp in self.cleaner_checkpoints}
            )
