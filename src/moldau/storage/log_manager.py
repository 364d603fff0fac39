"""LogManager: every partition log of a broker, across its log directories.

It loads logs at start-up (recovering them if the last shutdown was not clean),
creates and deletes them, applies retention, expires idle producer ids, and writes
the checkpoints. It runs no background task itself: the broker calls `cleanup_logs`,
`flush_due_logs`, `checkpoint`, `delete_expired_files` and `remove_expired_producers`
on its own schedule.

An I/O error in a log directory takes that directory offline (see
log_dir_failure.py): its logs are dropped by `handle_log_dir_failure` without another
write, no new log is placed there, and its checkpoints and clean-shutdown marker are
no longer written, so the next start recovers it from what is on disk.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from uuid import UUID

from moldau.clock import Clock
from moldau.protocol.errors import KafkaError, KafkaStorageError
from moldau.storage.checkpoint import (
    OffsetCheckpointFile,
    Snapshot,
    SnapshotWriter,
    can_sync_filesystem,
    fsync_dir,
    sync_filesystem,
    write_atomically,
)
from moldau.storage.log import Log, remove_log_dir
from moldau.storage.log_config import LogConfig
from moldau.storage.log_dir_failure import LogDirFailureChannel
from moldau.storage.partition_name import TopicPartition
from moldau.storage.producer_state import PRODUCER_ID_EXPIRATION_MS

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]
# Per directory: recovery points, log starts, cleaner offsets, logs whose topic id
# is to be written, logs whose leader-epoch checkpoint a truncation changed.
DirCheckpoints = dict[Path, tuple[Offsets, Offsets, Offsets, list[Log], list[Log]]]

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
META_PROPERTIES = "meta.properties"
DELETE_DIR_SUFFIX = "-delete"
# A log found to belong to another topic of the same name (a deleted one) is set
# aside under this suffix, as Kafka does, for an operator to look at; never loaded.
STRAY_DIR_SUFFIX = "-stray"
# A clean shutdown of more logs than this syncs their file systems once (syncfs)
# rather than each log's files.
SYNC_FILESYSTEM_ABOVE_LOGS = 100


class LogManager:
    def __init__(
        self,
        log_dirs: Iterable[Path],
        clock: Clock,
        broker_id: int,
        failure_channel: LogDirFailureChannel | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.log_dirs = [Path(d).resolve() for d in log_dirs]
        self.clock = clock
        self.broker_id = broker_id
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.failure_channel = failure_channel or LogDirFailureChannel()
        self.logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        # Log dirs where logs were created and not yet fsynced (sync_created_logs).
        self._unsynced_dirs: set[Path] = set()
        # Checkpoints are written from worker threads, and once more at shutdown.
        self._checkpoints = SnapshotWriter()
        # (log, offset) pairs whose segments below `offset` were rolled and await fsync.
        self.pending_flushes: list[tuple[Log, int]] = []
        # partition -> first offset the log cleaner has not compacted yet
        self.cleaner_checkpoints: dict[TopicPartition, int] = {}
        # Deleted logs: (when to remove, renamed directory, the retired log whose
        # files stay open until then, for reads already handed out).
        self._doomed_dirs: list[tuple[int, Path, Log]] = []
        # Retired logs (of offline directories, or set aside as strays): their files
        # are closed at shutdown.
        self._retired_logs: list[Log] = []

    # -- start-up and shutdown ----------------------------------------------------------

    @property
    def live_log_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if not self.failure_channel.is_offline(d)]

    @contextlib.contextmanager
    def io(self, log_dir: Path, action: str) -> Iterator[None]:
        """Storage I/O in `log_dir` outside any one log (see Log._io): checkpoints,
        directory renames."""
        self.failure_channel.check(log_dir)
        try:
            yield
        except OSError as e:
            raise self.failure_channel.fail(log_dir, action, e) from e

    def io_or_offline(self, log_dir: Path, action: str, work: Callable[[], object]) -> None:
        """Runs `work` as `io` would, for work whose failure only takes the directory
        offline (which is logged with its cause) while the caller goes on with the other
        directories. On a directory already offline it does nothing (a context manager
        could not skip its body: it failed with "generator didn't yield")."""
        if self.failure_channel.is_offline(log_dir):
            return
        with contextlib.suppress(KafkaStorageError), self.io(log_dir, action):
            work()

    def startup(
        self,
        config_for: Callable[[str], LogConfig],
        cluster_id: str,
        recovery_threads_per_dir: int = 1,
    ) -> None:
        """Load every log directory, each on its own thread and its logs on
        `recovery_threads_per_dir` threads (Kafka's num.recovery.threads.per.data.dir).
        One that fails to load goes offline and the others are served (as Kafka's
        loadLogs); none left is an error. The broker calls this on a worker thread
        before anything else touches the logs."""
        threads = max(1, recovery_threads_per_dir)
        with ThreadPoolExecutor(len(self.log_dirs), thread_name_prefix="log-dir") as pool:
            loads = [
                (d, pool.submit(self._load_dir, d, config_for, cluster_id, threads))
                for d in self.log_dirs
            ]
        for log_dir, load in loads:
            try:
                with self.io(log_dir, "loading"):
                    loaded, cleaned = load.result()
            except KafkaStorageError:
                if not self.failure_channel.is_offline(log_dir):
                    raise  # not an I/O error: e.g. another broker's meta.properties
                self.handle_log_dir_failure(log_dir)
                continue
            for lg in loaded:
                self.logs[lg.tp] = lg
                self._dir_of[lg.tp] = log_dir
            self.cleaner_checkpoints.update(cleaned)
        if not self.live_log_dirs:
            raise KafkaStorageError(self.all_dirs_failed_message())
        self.checkpoint()

    def all_dirs_failed_message(self) -> str:
        reasons = "; ".join(
            f"{d}: {self.failure_channel.reason(d) or 'offline'}" for d in self.log_dirs
        )
        return f"every log directory has failed ({reasons})"

    def _load_dir(
        self,
        log_dir: Path,
        config_for: Callable[[str], LogConfig],
        cluster_id: str,
        threads: int,
    ) -> tuple[list[Log], Offsets]:
        """The logs of one directory and its cleaner checkpoint (on a worker thread:
        it changes nothing of this manager's state)."""
        with self.io(log_dir, "loading"):
            log_dir.mkdir(parents=True, exist_ok=True)
            self._check_meta_properties(log_dir, cluster_id)
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
            start_offsets = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
            cleaned = self._read_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT)
            with os.scandir(log_dir) as entries:
                # d_type from the listing: no stat per entry.
                names = sorted(e.name for e in entries if e.is_dir())
        partitions = []
        for name in names:
            if name.endswith(DELETE_DIR_SUFFIX):
                with self.io(log_dir, "removing a deleted log"):
                    remove_log_dir(log_dir / name)
                continue
            with contextlib.suppress(ValueError):  # not a partition's directory
                partitions.append(TopicPartition.parse_dir_name(name))

        def open_log(tp: TopicPartition) -> Log:
            with self.io(log_dir, f"loading the log of {tp}"):
                opened = Log.open(
                    log_dir / tp.dir_name,
                    tp,
                    config_for(tp.topic),
                    self.clock,
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=start_offsets.get(tp, 0),
                    had_clean_shutdown=clean,
                    on_roll=self._on_roll,
                    failure_channel=self.failure_channel,
                )
            # Producers that expired while the broker was down are not kept (Kafka
            # leaves them out of the snapshot it loads).
            opened.producer_state.remove_expired_producers(
                self.clock.milliseconds(), self.producer_id_expiration_ms
            )
            return opened

        if threads == 1 or len(partitions) < 2:
            loaded = []
            try:
                for tp in partitions:
                    loaded.append(open_log(tp))
            except BaseException:
                for lg in loaded:
                    lg.close_handlers()
                raise
        else:
            with ThreadPoolExecutor(threads, thread_name_prefix="log-recovery") as pool:
                futures = [pool.submit(open_log, tp) for tp in partitions]
            errors = [e for f in futures if (e := f.exception()) is not None]
            if errors:
                for f in futures:
                    if f.exception() is None:
                        f.result().close_handlers()
                raise errors[0]
            loaded = [f.result() for f in futures]
        if not clean and loaded:
            log.info("%s: recovered logs after an unclean shutdown", log_dir)
        with self.io(log_dir, "loading"):
            # From now on a crash is unclean until the next clean shutdown.
            marker.unlink(missing_ok=True)
            fsync_dir(log_dir)
        return loaded, cleaned

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
        """Flush and close every log, write the checkpoints, then the clean marker
        (in the directories that are still online). With many logs, and where
        syncfs reports write-back errors (Linux 5.8 and later), files are written
        without an fsync each and every log directory's file system is then synced
        at once: 10,000 logs would otherwise cost 30,000 fsyncs. With few, each is
        fsynced: a file system sync also waits for whatever else is writing to that
        disk. Runs on a worker thread (the broker's own work has stopped)."""
        at_once = can_sync_filesystem() and len(self.logs) > SYNC_FILESYSTEM_ABOVE_LOGS
        for lg in self.logs.values():
            try:
                if not at_once:
                    lg.flush()
                lg.close(sync=not at_once)
            except KafkaStorageError as e:
                log.error("shutdown: %s", e)
        if at_once:
            for log_dir in self.live_log_dirs:
                self.io_or_offline(
                    log_dir, "syncing the logs at shutdown", partial(sync_filesystem, log_dir)
                )
            for tp, lg in self.logs.items():
                if not self.failure_channel.is_offline(self._dir_of[tp]):
                    lg.synced()
        for lg in [*self.logs.values(), *self._retired_logs]:
            lg.close_handlers()  # those that could not close cleanly
        self.checkpoint()
        for _, path, lg in self._doomed_dirs:
            lg.close_handlers()
            self.io_or_offline(path.parent, "removing a deleted log", partial(remove_log_dir, path))
        for log_dir in self.live_log_dirs:
            self.io_or_offline(
                log_dir,
                "writing the clean shutdown marker",
                partial(write_atomically, log_dir / CLEAN_SHUTDOWN_FILE, b""),
            )

    def halt(self) -> None:
        """Close every file as a killed process leaves them: no flush, checkpoint or
        clean marker, so the next start recovers (in-process clusters' kill)."""
        for lg in [*self.logs.values(), *self._retired_logs]:
            lg.close_handlers()
        for _, _, lg in self._doomed_dirs:
            lg.close_handlers()

    def handle_log_dir_failure(self, log_dir: Path) -> list[TopicPartition]:
        """Drop the logs of an offline directory: no more I/O through them, nothing
        written (their files are closed at shutdown); returns their partitions."""
        gone = [tp for tp, d in self._dir_of.items() if d == log_dir]
        for tp in gone:
            del self._dir_of[tp]
            lg = self.logs.pop(tp, None)
            if lg is not None:
                lg.retire()
                self._retired_logs.append(lg)
                self.pending_flushes = [(x, o) for x, o in self.pending_flushes if x is not lg]
            self.cleaner_checkpoints.pop(tp, None)
        for doomed in [d for d in self._doomed_dirs if d[1].parent == log_dir]:
            self._doomed_dirs.remove(doomed)
            self._retired_logs.append(doomed[2])
        if gone:
            log.error("stopped serving %d partitions in offline log dir %s", len(gone), log_dir)
        return gone

    # -- logs ----------------------------------------------------------------------------

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self.logs.get(tp)

    def get_or_create_log(
        self,
        tp: TopicPartition,
        config: LogConfig,
        is_new: bool = True,
        topic_id: UUID | None = None,
    ) -> Log:
        """The log of `tp` in topic `topic_id`, created if missing. A log that names
        another topic id belongs to a deleted topic of the same name: it is set aside
        (renamed -stray) and a new log made. A partition that is not new may have
        its log in an offline directory: it is not created afresh elsewhere (Kafka)."""
        existing = self.logs.get(tp)
        if existing is not None:
            if topic_id is None or existing.topic_id in (None, topic_id):
                if topic_id is not None and existing.topic_id is None:
                    existing.assign_topic_id(topic_id)
                return existing
            self._set_aside(tp, STRAY_DIR_SUFFIX)
            log.warning(
                "%s: the log in %s belongs to topic id %s, not %s (a deleted topic of that"
                " name): renamed -stray, starting a new log",
                tp, existing.dir.parent, existing.topic_id, topic_id,
            )  # fmt: skip
        offline = self.failure_channel.offline_dirs
        if not is_new and offline:
            raise KafkaStorageError(
                f"cannot create the log of {tp}: log directories {', '.join(map(str, offline))}"
                " are offline"
            )
        log_dir = self._next_log_dir(tp)
        with self.io(log_dir, f"creating the log of {tp}"):
            created = Log.open(
                log_dir / tp.dir_name, tp, config, self.clock, had_clean_shutdown=True,
                on_roll=self._on_roll, failure_channel=self.failure_channel,
            )  # fmt: skip
        self._unsynced_dirs.add(log_dir)
        self.logs[tp] = created
        self._dir_of[tp] = log_dir
        if topic_id is not None:
            created.assign_topic_id(topic_id)
        return created

    def sync_created_logs(self) -> None:
        """Make the directories of the logs created since the last call durable: one
        fsync per log dir for a whole LeaderAndIsr, not one per partition."""
        dirs, self._unsynced_dirs = self._unsynced_dirs, set()
        for log_dir in sorted(dirs):
            # A dir that failed since a log was created in it is skipped.
            self.io_or_offline(log_dir, "syncing new logs in", partial(fsync_dir, log_dir))

    def _next_log_dir(self, tp: TopicPartition) -> Path:
        """The live log dir holding the fewest partitions, as Kafka picks."""
        live = self.live_log_dirs
        if not live:
            raise KafkaStorageError(f"no log directory is online to create the log of {tp}")
        if len(live) == 1:
            return live[0]
        counts = Counter(self._dir_of.values())
        return min(live, key=lambda d: counts[d])

    def delete_log(self, tp: TopicPartition) -> None:
        """Remove a partition's log: its directory is renamed at once (so a restart
        never loads it again) and removed after file.delete.delay.ms. The caller
        writes the checkpoints next (`checkpoint`), so that none names it."""
        found = self._set_aside(tp, DELETE_DIR_SUFFIX)
        if found is not None:
            lg, renamed = found
            self._doomed_dirs.append(
                (self.clock.milliseconds() + lg.config.file_delete_delay_ms, renamed, lg)
            )

    def _set_aside(self, tp: TopicPartition, suffix: str) -> tuple[Log, Path] | None:
        """Stop serving a partition's log and rename its directory with `suffix`;
        the log, retired, and where it now is (None if there was none)."""
        lg = self.logs.pop(tp, None)
        log_dir = self._dir_of.pop(tp, None)
        if lg is None or log_dir is None:
            return None
        self.cleaner_checkpoints.pop(tp, None)
        self.pending_flushes = [(x, o) for x, o in self.pending_flushes if x is not lg]
        # Retired, not closed: a fetch answer being sent from its files may finish.
        lg.retire()
        renamed = log_dir / f"{tp.dir_name}.{uuid.uuid4().hex}{suffix}"
        try:
            with self.io(log_dir, f"renaming the log of {tp}"):
                os.replace(lg.dir, renamed)
                fsync_dir(log_dir)
        except KafkaStorageError:
            self._retired_logs.append(lg)
            raise
        if suffix != DELETE_DIR_SUFFIX:
            self._retired_logs.append(lg)
        return lg, renamed

    def _on_roll(self, lg: Log, offset: int) -> None:
        self.pending_flushes.append((lg, offset))

    # -- periodic work (the broker schedules these) -------------------------------------

    def cleanup_logs(self, high_watermark: Callable[[TopicPartition], int]) -> int:
        """Retention for every log; returns the number of segments deleted. A log
        whose directory fails is skipped (the failure is logged as it goes offline)."""
        deleted = 0
        for tp, lg in list(self.logs.items()):
            with contextlib.suppress(KafkaStorageError):
                deleted += lg.delete_old_segments(high_watermark(tp))
        return deleted

    def remove_expired_producers(self) -> int:
        """Forget, in every log, the producer ids whose last batch is
        producer.id.expiration.ms old (Kafka's PeriodicProducerExpirationCheck, which
        each log schedules for itself); returns how many."""
        now = self.clock.milliseconds()
        return sum(
            lg.producer_state.remove_expired_producers(now, self.producer_id_expiration_ms)
            for lg in list(self.logs.values())
        )

    def delete_expired_files(self) -> None:
        now = self.clock.milliseconds()
        for lg in list(self.logs.values()):
            with contextlib.suppress(KafkaStorageError):  # logged as the dir goes offline
                lg.delete_expired_files(now)
        keep = []
        for due, path, lg in self._doomed_dirs:
            if due <= now:
                lg.close_handlers()
                self.io_or_offline(
                    path.parent, "removing a deleted log", partial(remove_log_dir, path)
                )
            else:
                keep.append((due, path, lg))
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
        self.write_checkpoints(self.checkpoint_snapshot())

    def checkpoint_snapshot(self) -> Snapshot[DirCheckpoints]:
        """Each online directory's recovery points, log start offsets and cleaner
        offsets, as its checkpoint files will say, its logs whose topic id is still
        to be written (partition.metadata) and those whose leader-epoch checkpoint a
        truncation changed (written here, off the event loop)."""
        by_dir: dict[Path, list[TopicPartition]] = {d: [] for d in self.live_log_dirs}
        for tp, d in self._dir_of.items():
            if d in by_dir:
                by_dir[d].append(tp)
        return self._checkpoints.take(
            {
                d: (
                    {tp: self.logs[tp].recovery_point for tp in tps},
                    {tp: self.logs[tp].log_start_offset for tp in tps},
                    {tp: c for tp in tps if (c := self.cleaner_checkpoints.get(tp)) is not None},
                    [lg for tp in tps if not (lg := self.logs[tp]).topic_id_written],
                    [
                        lg
                        for tp in tps
                        if (lg := self.logs[tp]).leader_epoch_cache.truncation_pending
                    ],
                )
                for d, tps in by_dir.items()
            }
        )

    def write_checkpoints(self, snapshot: Snapshot[DirCheckpoints]) -> None:
        """Write the checkpoint files (from any thread: they fsync); a directory whose
        write fails goes offline (its previous files stay intact), the others are
        still written."""
        self._checkpoints.write(snapshot, self._write_checkpoints)

    def _write_checkpoints(self, by_dir: DirCheckpoints) -> None:
        for d, (recovery, starts, cleaned, unwritten_ids, truncated) in by_dir.items():
            for lg in unwritten_ids:
                # Offline (logged there) or deleted meanwhile: nothing to write.
                with contextlib.suppress(KafkaError):
                    lg.write_topic_id()
            for lg in truncated:
                # Before the recovery points: the fetcher appends past a cut only
                # after both (see storage/leader_epoch.py).
                with contextlib.suppress(KafkaError):
                    lg.write_leader_epochs()
            self.io_or_offline(
                d,
                "writing checkpoints",
                partial(_write_offset_checkpoints, d, recovery, starts, cleaned),
            )


def _write_offset_checkpoints(
    log_dir: Path,
    recovery: Mapping[TopicPartition, int],
    starts: Mapping[TopicPartition, int],
    cleaned: Mapping[TopicPartition, int],
) -> None:
    OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write(recovery)
    OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write(starts)
    OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).write(cleaned)
