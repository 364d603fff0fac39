"""Small tmpfs mounts for tests of full and read-only disks (needs root, as CI has;
elsewhere the tests that use them skip, and the unit tests inject the same errors)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


class Tmpfs:
    def __init__(self, path: Path, size_kib: int) -> None:
        self.path = path
        self.size_kib = size_kib
        path.mkdir(parents=True, exist_ok=True)
        _mount("-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "tmpfs", str(path))

    def resize(self, size_kib: int) -> None:
        """Grow (or shrink) it in place: space comes back."""
        self.size_kib = size_kib
        _mount("-o", f"remount,size={size_kib}k", str(self.path))

    def limit_files(self, spare: int) -> None:
        """Allow only `spare` more files (inodes) than exist now: creating files
        fails with ENOSPC while writing into existing ones still works."""
        st = os.statvfs(self.path)
        _mount("-o", f"remount,nr_inodes={st.f_files - st.f_ffree + spare}", str(self.path))

    def unlimit_files(self) -> None:
        _mount("-o", "remount,nr_inodes=1000000", str(self.path))

    def read_only(self, on: bool = True) -> None:
        """Remount read-only (EROFS on every write). Linux refuses while a file on it
        is open for writing, so only between broker runs."""
        _mount("-o", "remount,ro" if on else "remount,rw", str(self.path))

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"mount {' '.join(args)}: {done.stderr.strip()}")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[type[Tmpfs]]:
    """Mounts tmpfs file systems (`tmpfs(path, size_kib)`) and unmounts them after
    the test, whatever happened."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Tmpfs] = []

    class Tracked(Tmpfs):
        def __init__(self, path: Path, size_kib: int) -> None:
            try:
                super().__init__(path, size_kib)
            except OSError as e:
                pytest.skip(f"cannot mount a tmpfs here: {e}")
            mounted.append(self)

    try:
        yield Tracked
    finally:
        for m in reversed(mounted):
            m.unmount()
