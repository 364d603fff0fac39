"""The Spark sink's schema check (moldau.spark.writer.check_write_schema) goes by
the columns' types, not their nullability, as Spark's connector does."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from moldau.spark.options import InvalidOptionError, WriteOptions
from moldau.spark.writer import WriteColumns, check_write_schema


def test_a_headers_column_of_non_null_entries_is_a_headers_column() -> None:
    # What array(named_struct('key', 'k', 'value', ...)) makes in Spark SQL.
    entry = StructType(
        [StructField("key", StringType(), False), StructField("value", BinaryType(), True)]
    )
    schema = StructType(
        [
            StructField("value", BinaryType(), False),
            StructField("headers", ArrayType(entry, containsNull=False), False),
        ]
    )
    got = check_write_schema(schema, WriteOptions({"bootstrap.servers": "h:1"}, "t"))
    assert got == WriteColumns(key=False, topic=False, partition=False, headers=True)


def test_a_headers_column_of_another_type_is_refused() -> None:
    entry = StructType([StructField("key", StringType()), StructField("value", IntegerType())])
    schema = StructType(
        [StructField("value", BinaryType()), StructField("headers", ArrayType(entry))]
    )
    with pytest.raises(InvalidOptionError, match="headers attribute type"):
        check_write_schema(schema, WriteOptions({"bootstrap.servers": "h:1"}, "t"))
