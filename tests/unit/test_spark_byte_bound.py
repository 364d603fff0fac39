"""maxBytesPerTrigger where the brokers cannot tell the partitions' sizes: the
micro-batch is bounded as if the option were not set, and the log says so once."""

from __future__ import annotations

import logging

import pytest

from moldau.spark.options import parse_read_options

pytest.importorskip("pyspark")


def test_without_log_sizes_a_batch_has_no_byte_bound_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from moldau.spark.source import MoldauStreamReader

    options = {
        "kafka.bootstrap.servers": "h:1",
        # The driver asks DescribeLogDirs over PLAINTEXT only: never reaches h:1.
        "kafka.security.protocol": "SSL",
        "subscribe": "t",
        "maxBytesPerTrigger": "10",
    }
    reader = MoldauStreamReader(parse_read_options(options, streaming=True))
    begin, latest = {("t", 0): 5, ("t", 1): 0}, {("t", 0): 900, ("t", 1): 7}
    with caplog.at_level(logging.WARNING, logger="moldau.spark.source"):
        assert reader._byte_limit(begin, latest, 10) == latest
        assert reader._byte_limit(begin, latest, 10) == latest
    said = [r.getMessage() for r in caplog.records if "maxBytesPerTrigger" in r.getMessage()]
    assert len(said) == 1 and "SSL" in said[0], said
    # Nothing waiting: nothing to ask.
    assert reader._byte_limit(latest, latest, 10) == latest
