"""pyspark is an optional extra: the broker and the command never import it."""

from __future__ import annotations

import subprocess
import sys


def test_the_broker_and_the_cli_do_not_import_pyspark() -> None:
    code = (
        "import sys\n"
        "import moldau.server.broker, moldau.cli.main\n"
        "moldau.cli.main.build_parser()\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyarrow')], "
        "sorted(m for m in sys.modules if m.startswith(('pyspark', 'pyarrow')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
