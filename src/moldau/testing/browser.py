"""The web console under test: `moldau ui` as a real process, and a headless
Chromium (Debian's, driven by Playwright; nothing is downloaded) whose pages
record every console error, uncaught exception and failed request, so a test can
fail on any of them."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
_CONSOLE = re.compile(r"console at (http://\S+)")


def console_url(line: str) -> str | None:
    """The address in `moldau ui`'s or `moldau serve --ui-port`'s start-up line."""
    m = _CONSOLE.search(line)
    return m.group(1) if m else None


class ConsoleProcess:
    """`moldau ui --bootstrap-server ... --port 0` as a process; `url` once started."""

    def __init__(self, bootstrap: str, log_path: Path, args: Sequence[str] = ()) -> None:
        self.cmd = [sys.executable, "-m", "moldau", "ui", "--bootstrap-server", bootstrap]
        self.cmd += ["--port", "0", *args]
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self.url = ""

    def start(self, timeout: float = 30.0) -> ConsoleProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=log)
        ready = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(ready,), daemon=True)
        self._reader.start()
        if not ready.wait(timeout) or not self.url:
            self.kill()
            raise RuntimeError(f"moldau ui did not start; see {self.log_path}")
        return self

    def _read(self, ready: threading.Event) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            url = console_url(raw.decode(errors="replace"))
            if url:
                self.url = url
                ready.set()
        ready.set()
        self.proc.stdout.close()

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code (kill -9 if it takes longer)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            finally:
                self.kill()  # nothing left to do once it has exited
        return self.proc.returncode if self.proc is not None else 0

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._join_reader()

    def _join_reader(self) -> None:
        """The reader closes the pipe at its end of file, which follows the exit."""
        if self._reader is not None:
            self._reader.join(10)

    def __enter__(self) -> ConsoleProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


class PageProblems:
    """What went wrong in a page: console errors, uncaught exceptions, failed
    requests. `expect(text)` allows the errors containing `text` (a test of bad
    input makes the API answer 4xx, which Chromium reports on the console)."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.allowed: list[str] = []

    def watch(self, page: Any) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.problems.append(f"uncaught: {e}"))
        page.on("requestfailed", self._request_failed)
        page.on("response", self._response)

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.problems.append(f"console: {message.text} ({message.location.get('url', '')})")

    def _request_failed(self, request: Any) -> None:
        self.problems.append(f"request failed: {request.method} {request.url}: {request.failure}")

    def _response(self, response: Any) -> None:
        if response.status >= 400:
            self.problems.append(
                f"HTTP {response.status}: {response.request.method} {response.url}"
            )

    def expect(self, text: str) -> None:
        self.allowed.append(text)

    def unexpected(self) -> list[str]:
        return [p for p in self.problems if not any(a in p for a in self.allowed)]


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Debian Chromium under Playwright, closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()
