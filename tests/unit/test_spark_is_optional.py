"""What each side imports. pyspark is an optional extra: the broker and the command
never import it. The data source's driver side never imports the wire protocol."""

from __future__ import annotations

import subprocess
import sys


def run_python(code: str) -> None:
    """Runs `code` in a new interpreter, whose modules are only those it imports."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_broker_and_the_cli_do_not_import_pyspark() -> None:
    run_python(
        "import sys\n"
        "import moldau.server.broker, moldau.cli.main\n"
        "moldau.cli.main.build_parser()\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyarrow')], "
        "sorted(m for m in sys.modules if m.startswith(('pyspark', 'pyarrow')))\n"
    )


def test_the_data_source_imports_the_wire_protocol_only_to_read_or_write() -> None:
    """Spark starts a Python process for each streaming query's source on the driver;
    the wire protocol (kio, a second or more to import) serves only the tasks."""
    run_python(
        "import sys\n"
        "import pyspark_moldau\n"
        "options = {'kafka.bootstrap.servers': 'h:1', 'subscribe': 't'}\n"
        "source = pyspark_moldau.DefaultSource(options)\n"
        "source.streamReader(source.schema())\n"
        "assert 'kio' not in sys.modules, [m for m in sys.modules if m.startswith('moldau')]\n"
    )
