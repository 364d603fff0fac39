"""A SparkSession builder whose Python workers run this interpreter.

Spark starts its Python workers, which look the data source up and run it, with
the interpreter named by PYSPARK_PYTHON, else `python3` from PATH; a virtual
environment that is not activated (`.venv/bin/python app.py`) is not on PATH, so
without it they run another Python, one that has neither pyspark nor moldau, and
`format("moldau")` fails with DATA_SOURCE_NOT_FOUND. Spark's JVM reads the
variable from the environment it starts in, so it is set here, before the
builder starts the JVM.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def session_builder() -> SparkSession.Builder:
    """`SparkSession.builder`, with PYSPARK_PYTHON set to the running interpreter
    unless it is set already. Chain settings as usual, then `getOrCreate()`; a
    session that already runs keeps the interpreter it started with."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return SparkSession.builder
