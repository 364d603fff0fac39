"""What only the embedded MetadataStore does (persistence of persistent nodes), and
the broker registration's wait for an old session. The semantics both backends
share are tested in tests/cluster/test_metadata_store.py, on a real ZooKeeper too."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from moldau.metadata.embedded import EmbeddedTree
from moldau.metadata.store import (
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
    """A full disk under the embedded store, failing at each write of a save in turn
    (the temp file, its fsync, the rename, the directory's fsync): the caller gets
    StorePersistError, and memory, watches and the file all stay as they were."""
    import json
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
        saved = json.loads((tmp_path / "metadata.json").read_bytes())
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
        saved = json.loads((tmp_path / "metadata.json").read_bytes())
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
                assert json.loads((tmp_path / "metadata.json").read_bytes()) == saved
                assert sorted(p.name for p in tmp_path.iterdir()) == ["metadata.json"]
        # Space comes back: the next change works, numbering where it left off.
        assert await s.create("/seq/n-", b"", sequential=True) == "/seq/n-0000000001"
        await settle()
        assert len(fired) == 1  # the children watch, once
        reopened = EmbeddedTree(tmp_path).session()
        await reopened.start()
        assert await reopened.get_children("/seq") == ["n-0000000000", "n-0000000001"]

    asyncio.run(run())
