"""Cutting one process off the network, for tests: ZooKeeper, the other brokers and
the clients stop hearing from it, as when a host drops off the network, and heal
puts it back.

Each isolatable process runs in a cgroup v2 group of its own, entered before it
opens a socket; `isolate` adds an nftables table that drops every packet those
sockets send (on loopback too), `heal` removes it. Peers see timeouts, not refused
connections. Needs root, cgroup v2 and nft (scripts/test.sh installs nftables);
`isolation_available()` says why not where it cannot work.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path

_PREFIX = "moldau-"


def _cgroup2_root() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (pure or hybrid layout)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def isolation_available() -> str | None:
    """None if processes can be isolated here, else why not."""
    if os.geteuid() != 0:
        return "isolating a process needs root"
    if shutil.which("nft") is None:
        return "nft is not installed (apt-get install nftables)"
    if _cgroup2_root() is None:
        return "no cgroup v2 hierarchy is mounted"
    return None


class IsolationGroup:
    """A cgroup a process is started in, and the nftables table that cuts it off."""

    def __init__(self, name: str) -> None:
        root = _cgroup2_root()
        if root is None:
            raise RuntimeError("no cgroup v2 hierarchy is mounted")
        self.name = f"{_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
        self.path = root / self.name
        self.path.mkdir()
        # nft names a cgroup by its path below /sys/fs/cgroup, whatever the layout.
        self._nft_path = str(self.path.relative_to("/sys/fs/cgroup"))
        self._table = self.name.replace("-", "_")
        self.isolated = False

    @property
    def procs(self) -> Path:
        """Writing a pid here moves that process into the group."""
        return self.path / "cgroup.procs"

    def isolate(self) -> None:
        if self.isolated:
            return
        rules = (
            f"table inet {self._table} {{\n"
            f"  chain out {{\n"
            f"    type filter hook output priority 0;\n"
            f'    socket cgroupv2 level 1 "{self._nft_path}" drop\n'
            f"  }}\n"
            f"}}\n"
        )
        subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True, capture_output=True)
        self.isolated = True

    def heal(self) -> None:
        if not self.isolated:
            return
        subprocess.run(
            ["nft", "delete", "table", "inet", self._table], check=True, capture_output=True
        )
        self.isolated = False

    def remove(self) -> None:
        """Heal and delete the group (its processes must have ended)."""
        self.heal()
        # A process still in it keeps it; an empty group is harmless.
        with contextlib.suppress(OSError):
            self.path.rmdir()
