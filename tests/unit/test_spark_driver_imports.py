"""What the data source's driver side imports. Spark starts a Python process for
each streaming query's source and imports the data source there; the wire protocol
(kio, a second or more to import) serves only the executors' reads and writes."""

from __future__ import annotations

import subprocess
import sys


def test_the_data_source_imports_the_wire_protocol_only_to_read_or_write() -> None:
    code = (
        "import sys\n"
        "import pyspark_moldau\n"
        "options = {'kafka.bootstrap.servers': 'h:1', 'subscribe': 't'}\n"
        "source = pyspark_moldau.DefaultSource(options)\n"
        "source.streamReader(source.schema())\n"
        "assert 'kio' not in sys.modules, [m for m in sys.modules if m.startswith('moldau')]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
