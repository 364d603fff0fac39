"""What only the embedded MetadataStore does (persistence of persistent nodes), and
the broker registration's wait for an old session. The semantics both backends
share are tested in tests/cluster/test_metadata_store.py, on a real ZooKeeper too."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

import pytest

from moldau.metadata.embedded import EmbeddedTree
from moldau.metadata.store import (
    EventType,
    NodeExistsError,
)


async def settle() -> None:
    """Let watch callbacks (delivered with call_soon) run."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_persistent_nodes_survive_reopen_and_ephemeral_ones_do_not(tmp_path: Path) -> None:
    async def run() -> None:
        s = EmbeddedTree(tmp_path).session()
        await s.start()
        await s.create("/keep", b"data")
        await s.set("/keep", b"data2")
        await s.create("/gone", b"", ephemeral=True)
        first = await s.create("/seq-", b"", sequential=True)
        s2 = EmbeddedTree(tmp_path).session()
        await s2.start()
        data, stat = await s2.get("/keep")
        assert (data, stat.version) == (b"data2", 1)
        assert await s2.exists("/gone") is None
        second = await s2.create("/seq-", b"", sequential=True)
        assert (first, second) == ("/seq-0000000000", "/seq-0000000001")

    asyncio.run(run())


def test_a_broker_waits_out_an_old_registration_of_its_id_then_registers() -> None:
    from moldau.metadata import znodes as z
    from moldau.metadata.client import MetadataClient

    reg = z.BrokerRegistration(1, (z.EndPoint("PLAINTEXT", "localhost", 9092),))

    async def run() -> None:
        tree = EmbeddedTree(None)
        old, new, other = tree.session(), tree.session(), tree.session()
        for s in (old, new, other):
            await s.start()
        await MetadataClient(old).create_top_level_paths()
        await MetadataClient(old).register_broker(reg, 0)
        # The old session is still alive for the whole wait: a clear refusal.
        with pytest.raises(NodeExistsError, match="registered by another live session"):
            await MetadataClient(other).register_broker(reg, 0, wait_s=0.2)
        # The old session ends during the wait: the new one registers.
        asyncio.get_running_loop().call_later(0.1, lambda: asyncio.ensure_future(old.close()))
        epoch = await MetadataClient(new).register_broker(reg, 0, wait_s=5)
        stat = await new.exists("/brokers/ids/1")
        assert stat is not None and stat.ephemeral_owner == new.session_id
        assert epoch == stat.czxid

    asyncio.run(run())


def test_a_change_the_disk_refuses_is_an_error_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk under the embedded store, failing at each step of a journal append
    in turn (the write, half done, or the fsync): the caller gets StorePersistError,
    and memory, watches and the journal all stay as they were."""
    from collections.abc import Awaitable, Callable

    from moldau.metadata.store import CreateOp, DeleteOp, SetDataOp, StorePersistError
    from tests.faults import failing_os

    async def run() -> None:
        s = EmbeddedTree(tmp_path).session()
        await s.start()
        await s.create("/a", b"1")
        await s.create("/seq", b"")
        await s.create("/seq/n-", b"", sequential=True)
        await s.create("/c", b"")
        fired: list[object] = []
        await s.get("/a", fired.append)
        await s.get_children("/seq", fired.append)
        changes: list[Callable[[], Awaitable[object]]] = [
            lambda: s.set("/a", b"2"),
            lambda: s.create("/b", b"x"),
            lambda: s.create("/seq/n-", b"", sequential=True),
            lambda: s.multi(
                [SetDataOp("/a", b"3"), CreateOp("/seq/n-", b"", sequential=True), DeleteOp("/c")]
            ),
            lambda: s.delete("/a"),
        ]
        with failing_os(monkeypatch) as probe:
            await s.set("/c", b"")
        journal = tmp_path / "metadata.journal"
        saved = journal.read_bytes()
        for change in changes:
            for n in range(len(probe.calls)):
                with failing_os(monkeypatch, fail_at=n), pytest.raises(StorePersistError):
                    await change()
                await settle()
                assert fired == []
                data, stat = await s.get("/a")
                assert (data, stat.version) == (b"1", 0)
                assert await s.exists("/b") is None and await s.exists("/c") is not None
                assert await s.get_children("/seq") == ["n-0000000000"]
                assert journal.read_bytes() == saved
                assert sorted(p.name for p in tmp_path.iterdir()) == ["metadata.journal"]
        # Space comes back: the next change works, numbering where it left off.
        assert await s.create("/seq/n-", b"", sequential=True) == "/seq/n-0000000001"
        await settle()
        assert len(fired) == 1  # the children watch, once
        reopened = EmbeddedTree(tmp_path).session()
        await reopened.start()
        assert await reopened.get_children("/seq") == ["n-0000000000", "n-0000000001"]

    asyncio.run(run())


@pytest.mark.parametrize("cut_fails_again", [False, True])
def test_a_failed_append_that_cannot_be_cut_back_refuses_changes_until_it_can(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut_fails_again: bool
) -> None:
    """A full disk fails a journal append (half of it lands) and then the cut back
    of that partial record. No change may be written behind it (the next start
    would cut it off with the partial record): changes are refused while the cut
    fails, and once it succeeds they are written, and kept."""
    from moldau.metadata.store import StorePersistError
    from tests.faults import failing_os

    async def run() -> None:
        s = EmbeddedTree(tmp_path).session()
        await s.start()
        await s.create("/a", b"1")
        with failing_os(monkeypatch, fail_at=0, sticky=True), pytest.raises(StorePersistError):
            await s.create("/failed", b"")
        if cut_fails_again:
            # Writes would succeed now, but the cut still fails: refused.
            only_cuts = frozenset({"ftruncate"})
            with (
                failing_os(monkeypatch, fail_at=0, sticky=True, only=only_cuts),
                pytest.raises(StorePersistError),
            ):
                await s.create("/refused", b"")
            assert await s.exists("/refused") is None
        await s.create("/b", b"2")  # acknowledged
        reopened = EmbeddedTree(tmp_path).session()
        await reopened.start()
        assert [(await reopened.get(p))[0] for p in ("/a", "/b")] == [b"1", b"2"]
        assert await reopened.exists("/failed") is None
        assert await reopened.exists("/refused") is None

    asyncio.run(run())


def test_a_torn_journal_tail_is_cut_and_the_rest_kept(tmp_path: Path) -> None:
    async def run() -> None:
        s = EmbeddedTree(tmp_path).session()
        await s.start()
        for i in range(5):
            await s.create(f"/n{i}", b"%d" % i)
        journal = tmp_path / "metadata.journal"
        whole = journal.read_bytes()
        # A crash mid-append: half a record, then one whose checksum is wrong.
        with journal.open("ab") as f:
            f.write(whole[: len(whole) // 5 // 2])
        reopened = EmbeddedTree(tmp_path).session()
        await reopened.start()
        assert [(await reopened.get(f"/n{i}"))[0] for i in range(5)] == [
            b"%d" % i for i in range(5)
        ]
        assert journal.read_bytes() == whole
        await reopened.create("/after", b"")
        corrupt = bytearray(journal.read_bytes())
        corrupt[-1] ^= 0xFF
        journal.write_bytes(bytes(corrupt))
        again = EmbeddedTree(tmp_path).session()
        await again.start()
        assert await again.exists("/after") is None
        assert (await again.get("/n4"))[0] == b"4"

    asyncio.run(run())


def test_the_journal_is_folded_into_a_snapshot(tmp_path: Path) -> None:
    async def run() -> None:
        s = EmbeddedTree(tmp_path, snapshot_every=10).session()
        await s.start()
        await s.create("/p", b"")
        for i in range(25):
            await s.create("/p/n-", b"%d" % i, sequential=True)
        await s.delete("/p/n-0000000003")
        assert (tmp_path / "metadata.json").exists()
        # Only the records since the last snapshot are left in the journal.
        assert (tmp_path / "metadata.journal").stat().st_size < 2000
        reopened = EmbeddedTree(tmp_path).session()
        await reopened.start()
        children = await reopened.get_children("/p")
        assert len(children) == 24 and "n-0000000003" not in children
        assert await reopened.create("/p/n-", b"", sequential=True) == "/p/n-0000000025"

    asyncio.run(run())


def test_acknowledged_writes_survive_kill_9_mid_write(tmp_path: Path) -> None:
    """A process writes node after node and says which were acknowledged; killed
    with SIGKILL at some moment, its journal gives back every one of them."""
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from moldau.metadata.embedded import EmbeddedTree\n"
        "async def main():\n"
        "    s = EmbeddedTree(Path(sys.argv[1]), snapshot_every=50).session()\n"
        "    await s.start()\n"
        "    i = 0\n"
        "    while True:\n"
        "        await s.create(f'/n{i}', b'x' * 100)\n"
        "        print(i, flush=True)\n"
        "        i += 1\n"
        "asyncio.run(main())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        acknowledged = -1
        deadline = time.monotonic() + 30
        while acknowledged < 300 and time.monotonic() < deadline:
            acknowledged = int(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc.stdout.close()
    assert acknowledged >= 300

    async def check() -> None:
        s = EmbeddedTree(tmp_path).session()
        await s.start()
        missing = [i for i in range(acknowledged + 1) if await s.exists(f"/n{i}") is None]
        assert missing == []

    asyncio.run(check())


def test_a_fired_watch_is_not_kept_and_one_watch_fires_once() -> None:
    """A broker sets a watch of its own on each topic it learns: once fired and
    dropped by its owner, nothing of it stays (memory stays bounded while topics come
    and go); the same watch set twice on a path fires once, as in ZooKeeper."""

    async def run() -> None:
        s = EmbeddedTree(None).session()
        await s.start()
        await s.create("/topic", b"")
        events: list[object] = []

        def watch(event: object) -> None:
            events.append(event)

        await s.get("/topic", watch)
        await s.get("/topic", watch)
        await s.set("/topic", b"changed")
        await settle()
        assert len(events) == 1
        gone = weakref.ref(watch)
        del watch
        gc.collect()
        assert gone() is None

    asyncio.run(run())


def test_a_watch_set_again_after_a_disconnection_fires_as_zookeepers_set_watches() -> None:
    """What kazoo's forgotten watches fire when set again on the resumed session,
    against the last zxid the client had seen (ZooKeeper's SetWatches rule)."""
    from kazoo.protocol.states import ZnodeStat

    from moldau.metadata.zookeeper import rearmed_event

    def stat(mzxid: int, pzxid: int) -> ZnodeStat:
        return ZnodeStat(1, mzxid, 0, 0, 0, 0, 0, 0, 0, 0, pzxid)

    seen = 10
    assert rearmed_event("data", stat(9, 99), seen) is None
    assert rearmed_event("data", stat(11, 0), seen) == EventType.CHANGED
    assert rearmed_event("data", None, seen) == EventType.DELETED
    assert rearmed_event("exist", None, seen) is None
    assert rearmed_event("exist", stat(11, 11), seen) == EventType.CREATED
    assert rearmed_event("child", stat(99, 10), seen) is None
    assert rearmed_event("child", stat(0, 12), seen) == EventType.CHILD
    assert rearmed_event("child", None, seen) == EventType.DELETED
