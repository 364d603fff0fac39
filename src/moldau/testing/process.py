"""A Moldau broker as a real OS process, for tests (ours, and users' tests of
their own Kafka applications): start, stop with SIGTERM, kill -9, restart."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from moldau.server.embedded import METADATA_DIR
from moldau.testing.browser import console_url
from moldau.testing.isolation import IsolationGroup
from moldau.testing.sasl import SaslListener, SaslUsers, write_scram_users_offline

if TYPE_CHECKING:  # cryptography is a test extra: only for tests with TLS
    from moldau.testing.certs import Certificates

_LISTENING = re.compile(r"listening on [^\s:]+:(\d+)")
_LISTENER = re.compile(r"listener (\S+) \(\S+\) on \S+:(\d+)")


class BrokerProcess(SaslListener):
    def __init__(
        self,
        data_dir: Path,
        overrides: Mapping[str, str] | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        log_path: Path | None = None,
        isolation: IsolationGroup | None = None,
        tls: Certificates | None = None,
        client_auth: str = "none",
        sasl: SaslUsers | None = None,
        serve_args: Sequence[str] = (),
    ) -> None:
        """`tls`: also listen with TLS (an SSL listener, its certificates from that
        CA, ssl.client.auth=`client_auth`) next to the PLAINTEXT one; its address is
        `ssl_bootstrap`. `sasl`: also a SASL_SSL listener (with `tls`, else
        SASL_PLAINTEXT) taking those users, at `sasl_bootstrap`; without
        zookeeper.connect their SCRAM credentials are written to the broker's
        embedded store before its first start. `serve_args`: more flags for `moldau
        serve` (`--ui-port 0`: the console's address is then `console_url`)."""
        self.data_dir = Path(data_dir)
        # A cgroup the process starts in, so that tests can cut it off the network.
        self.isolation = isolation
        self.overrides = dict(overrides or {})
        self.tls = tls
        self.sasl = sasl
        listeners = [f"PLAINTEXT://{host}:{port}"]
        props: dict[str, str] = {}
        if tls is not None:
            props |= tls.broker_properties(client_auth)
            listeners.append(f"SSL://{host}:0")
        if sasl is not None:
            props |= sasl.broker_properties(SaslUsers.listener(tls is not None))
            listeners.append(f"{SaslUsers.listener(tls is not None)}://{host}:0")
        if props:
            props |= self.overrides
            props.setdefault("listeners", ",".join(listeners))
            self.overrides = props
        # On ZooKeeper the cluster writes the users, once for all its brokers.
        self._users_to_write = sasl is not None and "zookeeper.connect" not in self.overrides
        # Each listener's bound port, by name (from the broker's start-up lines).
        self.listener_ports: dict[str, int] = {}
        self.requested_port = port
        self.host = host
        self.port = port
        self.log_path = log_path or self.data_dir.parent / f"{self.data_dir.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()  # set once the launched process listens
        self._lines: list[str] = []
        self.serve_args = list(serve_args)
        self.console_url: str | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ssl_bootstrap(self) -> str:
        """The SSL listener's address."""
        return f"{self.host}:{self.listener_ports['SSL']}"

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL listener's address (SASL_SSL with `tls`, else SASL_PLAINTEXT)."""
        return f"{self.host}:{self.listener_ports[SaslUsers.listener(self.tls is not None)]}"

    @property
    def metadata_dir(self) -> Path:
        """Where the broker keeps its embedded metadata store (without ZooKeeper)."""
        log_dirs = self.overrides.get("log.dirs")
        first = Path(log_dirs.split(",")[0]) if log_dirs else self.data_dir
        return first / METADATA_DIR

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        """Start and wait until it accepts connections. A restart keeps its port."""
        return self.launch().wait_started(timeout)

    def launch(self) -> BrokerProcess:
        """Start the process without waiting for it to accept connections
        (`wait_started` does): brokers launched together start side by side."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"broker process {self.proc.pid} is already running")
        if self._users_to_write:
            assert self.sasl is not None
            write_scram_users_offline(self.metadata_dir, self.sasl)
            self._users_to_write = False
        # `moldau serve` without hypothesis, as a user's broker runs (moldau.testing.serve).
        cmd = [sys.executable, "-m", "moldau.testing.serve", "serve"]
        if "listeners" not in self.overrides:  # else they name every port
            cmd += ["--host", self.host, "--port", str(self.port or self.requested_port)]
        if self.listener_ports and "listeners" in self.overrides:
            # A restart keeps every listener's port, as --port keeps the first one's.
            self.overrides["listeners"] = ",".join(
                f"{name}://{self.host}:{port}" for name, port in self.listener_ports.items()
            )
        if "log.dirs" not in self.overrides:  # several log dirs: they name the data dir
            cmd += ["--data-dir", str(self.data_dir)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        cmd += self.serve_args
        # Each start has its own event and lines: the reader of a process just
        # stopped may still be at its end of file, which sets its own event, not
        # this start's (a shared one let a restart return before the new listened).
        ready = threading.Event()
        lines: list[str] = []
        self._lines = lines
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(self.log_path, "ab")  # noqa: SIM115 (closed by the reader thread)
        if self.isolation is not None:
            # Into its group before it opens any socket (a socket keeps the group it
            # was made in); exec keeps the pid.
            cmd = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.isolation.procs), *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file)
        threading.Thread(
            target=self._read_stdout, args=(self.proc, log_file, ready, lines), daemon=True
        ).start()
        self._ready = ready
        return self

    def wait_started(self, timeout: float = 30.0) -> BrokerProcess:
        """Wait until the process `launch` started accepts connections; kill it and
        raise if it does not within `timeout`."""
        assert self.proc is not None, "not launched"
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.kill()
            self.proc.wait(10)
            raise RuntimeError(f"broker did not start; see {self.log_path}")
        return self

    def _read_stdout(
        self,
        proc: subprocess.Popen[bytes],
        log_file: object,
        ready: threading.Event,
        lines: list[str],
    ) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            lines.append(line)
            self.console_url = console_url(line) or self.console_url
            listener = _LISTENER.search(line)
            if listener:
                self.listener_ports[listener.group(1)] = int(listener.group(2))
            m = _LISTENING.search(line)
            if m:
                self.port = int(m.group(1))
                ready.set()
        ready.set()
        proc.stdout.close()
        log_file.close()  # type: ignore[attr-defined]

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Leave in its log what it was waiting for, then kill it.
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1)
            self.kill()
            raise

    def kill(self) -> None:
        """kill -9: no chance to flush or close anything."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def restart(self, timeout: float = 30.0) -> BrokerProcess:
        self.stop()
        return self.start(timeout)

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def __enter__(self) -> BrokerProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def wait_for(predicate: object, timeout: float = 10.0, interval: float = 0.05) -> bool:
    """Poll `predicate()` until true or `timeout` seconds pass (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(interval)
    return False
