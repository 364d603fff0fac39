"""The README's spark-submit recipes (its section "On a Spark cluster") run as
written: each ```sh block's commands, with this machine's paths, master and
brokers in place of the README's.

Two things stand in for what a test machine lacks. PyPI's packages: each venv a
recipe makes gets, through a .pth file, links to the installed packages it is to
have (for the --py-files recipe exactly the closure of those its pip command
names, so that a dependency the README forgets fails the job), and pip finds them
installed (the wheel's build still fetches its build tools, setuptools and wheel,
from the index, as pip does). Worker machines: the workers run on this one, with
no PYTHONPATH, so an executor finds moldau where the recipe put it or not at all.

A recipe's set-up (wheel, venvs, zip) starts in the background when the module
does and runs while the other tests do; its spark-submit runs in the test."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement

from tests.spark.test_readme import readme_blocks, users_environment

SECTION = "### On a Spark cluster"
#: The README's placeholders.
MASTER = "spark://spark-master:7077"
BROKERS = "broker1:9092"
_VENV = re.compile(r"-m venv (\S+)$")


def commands(block: str) -> list[str]:
    """A sh block's commands: continued lines joined, comments and blank lines out."""
    lines = block.replace("\\\n", " ").splitlines()
    return [" ".join(line.split()) for line in lines if line.strip() and line.lstrip()[0] != "#"]


def localized(command: str, root: Path) -> str:
    """The command with the README's /opt/... and /tmp/... paths under `root`."""
    return re.sub(r"(?<![\w.])/(opt|tmp)/", f"{root}/\\1/", command)


def requirements_closure(requirements: Iterable[str]) -> set[str]:
    """The distributions `requirements` need, installed here, with their own needs."""
    todo = [Requirement(r).name for r in requirements]
    seen: set[str] = set()
    while todo:
        name = importlib.metadata.distribution(todo.pop()).metadata["Name"]
        if name in seen:
            continue
        seen.add(name)
        for text in importlib.metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def package_view(distributions: Iterable[str], into: Path) -> Path:
    """A directory of links to the installed files of `distributions`."""
    site = Path(sysconfig.get_paths()["purelib"])
    into.mkdir(parents=True)
    for name in distributions:
        files = importlib.metadata.distribution(name).files or []
        for top in {Path(f).parts[0] for f in files} - {"..", "__pycache__"}:
            if not (into / top).exists():
                (into / top).symlink_to(site / top)
    return into


@dataclass
class Recipe:
    """One ```sh block: its set-up, running in the background, and its spark-submit."""

    setup: subprocess.Popen[bytes]
    submit: str
    log: Path
    venvs: list[Path] = field(default_factory=list)
    #: The requirements its pip commands name.
    packages: list[str] = field(default_factory=list)

    def wait_setup(self, timeout: float) -> None:
        code = self.setup.wait(timeout)
        assert code == 0, self.log.read_text(errors="replace")[-3000:]


class Recipes:
    """The README's recipes after the demo's block, set up under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "opt" / "src").mkdir(parents=True)
        (root / "opt" / "src" / "moldau").symlink_to(Path(__file__).resolve().parents[2])
        (root / "tmp").mkdir()
        self.env = users_environment(root)
        # python3.11 as the README names it: this venv's, whose pip can build the wheel.
        (root / "bin" / "python3.11").symlink_to(sys.executable)
        import pyspark

        spark_bin = Path(pyspark.__file__).parent / "bin"
        self.env["PATH"] = os.pathsep.join([str(spark_bin), self.env["PATH"]])
        self.env.pop("PIP_FIND_LINKS", None)
        sections = readme_blocks(SECTION, "sh")
        assert len(sections) == 3, "the demo's block, then the two recipes"
        self.job = readme_blocks(SECTION, "python")[0]
        (root / "orders_job.py").write_text(self.job)
        self.recipes = [self._start(i, block) for i, block in enumerate(sections[1:])]

    def _start(self, i: int, block: str) -> Recipe:
        cmds = [localized(c, self.root) for c in commands(block)]
        [submit] = [c for c in cmds if c.startswith("spark-submit ")]
        setup = cmds[: cmds.index(submit)]
        script, venvs, packages = ["set -e -x"], [], []
        for command in setup:
            script.append(command)
            if found := _VENV.search(command):
                venv = Path(found.group(1))
                venvs.append(venv)
                [install] = [c for c in setup if c.startswith(f"{venv}/bin/pip install ")]
                args = shlex.split(install.split(" install ", 1)[1])
                wanted = [a for a in args if a[0] != "-" and not a.startswith(str(self.root))]
                packages += wanted
                script.append(self._deps_link(i, venv, wanted))
        log = self.root / f"recipe-{i}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", "-c", "\n".join(script)],
                cwd=self.root, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        return Recipe(proc, submit, log, venvs, packages)

    def _deps_link(self, i: int, venv: Path, wanted: list[str]) -> str:
        """The shell command that gives `venv` the packages `wanted` (moldau's
        wheel aside: that one its pip installs)."""
        needed: set[str] = set()
        for arg in wanted:
            req = Requirement(arg)
            if req.name == "moldau":
                needed |= requirements_closure(
                    r for r in importlib.metadata.requires("moldau") or []
                    if Requirement(r).marker is None
                    or any(Requirement(r).marker.evaluate({"extra": e}) for e in req.extras)  # type: ignore[union-attr]
                )  # fmt: skip
            else:
                needed |= requirements_closure([arg])
        view = package_view(needed - {"moldau"}, self.root / f"deps-{i}")
        site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
        return f"echo {shlex.quote(str(view))} > {shlex.quote(str(site / '_test_deps.pth'))}"

    def submit(self, master: str, bootstrap: str) -> list[subprocess.Popen[str]]:
        """Starts every recipe's spark-submit, once its set-up has finished."""
        procs = []
        for i, recipe in enumerate(self.recipes):
            recipe.wait_setup(240)
            command = recipe.submit.replace(MASTER, master).replace(BROKERS, bootstrap)
            with open(self.root / f"submit-{i}.log", "w") as out:
                procs.append(
                    subprocess.Popen(
                        ["bash", "-c", command],
                        cwd=self.root,
                        env=self.env,
                        text=True,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        return procs

    def stop(self) -> None:
        """Kills what is still running of the set-ups (their process groups)."""
        for recipe in self.recipes:
            if recipe.setup.poll() is None:
                os.killpg(recipe.setup.pid, signal.SIGKILL)
                recipe.setup.wait()


def stop_group(proc: subprocess.Popen[str]) -> None:
    """Kills a spark-submit still running, with its JVM and Python driver."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
