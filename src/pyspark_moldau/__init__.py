"""Lets PySpark find the "moldau" format with no registration call: it looks for
top-level modules named pyspark_* that expose a DefaultSource."""

from moldau.spark.source import MoldauDataSource as DefaultSource

__all__ = ["DefaultSource"]
