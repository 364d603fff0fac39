"""Node.js programs of tests/js (KafkaJS) run against a broker, with the packages
its package-lock.json pins (a source checkout only: tests/js is not part of the package).

scripts/test.sh installs Node.js and runs `npm ci`; a test run without it runs `npm ci`
on first use.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

JS_DIR = Path(__file__).resolve().parents[3] / "tests" / "js"
_INSTALLED = JS_DIR / "node_modules"


def node_unavailable() -> str | None:
    """Why tests/js cannot be installed or run here, or None."""
    if not (JS_DIR / "package-lock.json").is_file():
        return f"{JS_DIR}/package-lock.json is missing (not a source checkout)"
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def ensure_installed() -> Path:
    """Runs `npm ci` in tests/js unless node_modules is newer than the lock file."""
    why = node_unavailable()
    if why is not None:
        raise RuntimeError(f"tests/js cannot run: {why}; scripts/test.sh installs Node.js")
    lock = JS_DIR / "package-lock.json"
    if _INSTALLED.is_dir() and lock.stat().st_mtime <= _INSTALLED.stat().st_mtime:
        return JS_DIR
    subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=JS_DIR, check=True, timeout=300
    )
    # npm ci leaves node_modules' own time as it was when it only replaced packages.
    _INSTALLED.touch()
    return JS_DIR


def run(script: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """Runs tests/js/SCRIPT with its arguments to its end (installing first if need be)."""
    ensure_installed()
    return subprocess.run(
        ["node", str(JS_DIR / script), *args],
        cwd=JS_DIR,
        check=False,  # the caller reads the status and the output
        capture_output=True,
        text=True,
        timeout=timeout,
    )
