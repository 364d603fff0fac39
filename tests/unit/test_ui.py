"""The console's pure parts: the message browser's read window, bounded history
and rates, the cluster view's counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from moldau.ui.browse import MAX_SCANNED, end_span, window
from moldau.ui.history import History, Rate, growth_rates
from moldau.ui.json import UiError, int_param
from moldau.ui.view import ClusterView, PartitionInfo, protocol_counters, throughput

HIGH = {("t", 0): 100, ("t", 1): 5}
START = {("t", 0): 40, ("t", 1): 0}


def test_window_from_the_end_reads_the_last_records_of_each_partition() -> None:
    w = window("end", 10, START, HIGH)
    assert w.starts == {("t", 0): 90, ("t", 1): 0}
    assert w.ends == HIGH


def test_window_from_the_beginning_starts_at_the_log_start() -> None:
    assert window("beginning", 10, START, HIGH).starts == START


def test_window_from_an_offset_clamps_each_partition_when_all_are_read() -> None:
    assert window("offset", 10, START, HIGH, offset=20).starts == {("t", 0): 40, ("t", 1): 5}


def test_window_refuses_an_offset_outside_a_single_partition() -> None:
    one = {("t", 0): 100}
    assert window("offset", 10, START, one, offset=100).starts == {("t", 0): 100}
    with pytest.raises(UiError, match=r"OFFSET_OUT_OF_RANGE: offset 39 .* range 40\.\.100"):
        window("offset", 10, START, one, offset=39)


def test_window_from_a_time_reads_nothing_where_no_record_is_that_late() -> None:
    w = window("timestamp", 10, START, HIGH, by_time={("t", 0): 70, ("t", 1): -1})
    assert w.starts == {("t", 0): 70, ("t", 1): 5}


def test_window_refuses_an_unknown_mode() -> None:
    with pytest.raises(UiError, match="from must be one of"):
        window("middle", 10, START, HIGH)


def test_history_keeps_a_bounded_number_of_points_and_series() -> None:
    h = History(points=3, max_series=2)
    for t in range(5):
        h.add("a", t, t * 10)
    assert h.points_of("a") == [[2, 20], [3, 30], [4, 40]]
    h.add("b", 0, 1)
    h.add("c", 0, 1)  # the oldest series goes
    assert h.series("a", "c") == [{"name": "a", "points": []}, {"name": "c", "points": [[0, 1]]}]


def test_rate_of_a_counter_starts_afresh_when_it_goes_down() -> None:
    r = Rate()
    assert r.update(0.0, 100) is None
    assert r.update(2.0, 300) == 100
    assert r.update(4.0, 50) is None  # a restarted broker's counter
    assert r.update(5.0, 60) == 10


def test_cluster_view_counts_under_replicated_and_offline_partitions() -> None:
    view = ClusterView(
        topics={
            "a": {0: PartitionInfo(1, [1, 2], [1, 2]), 1: PartitionInfo(2, [1, 2], [2])},
            "b": {0: PartitionInfo(-1, [3], [])},
        }
    )
    assert (view.under_replicated(), view.offline_partitions()) == (2, 1)


def test_int_param_says_which_parameter_is_wrong() -> None:
    assert int_param("7", "limit", 1) == 7
    with pytest.raises(UiError, match="limit must be an integer, got 'x'"):
        int_param("x", "limit")
    with pytest.raises(UiError, match="limit must be at least 1, got 0"):
        int_param(0, "limit", 1)


def test_the_console_commands_refuse_a_port_out_of_range(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from moldau.cli.main import main

    assert main(["ui", "--bootstrap-server", "localhost:9092", "--port", "70000"]) != 0
    assert "moldau ui: --port 70000 is not a valid port" in capsys.readouterr().err
    assert main(["serve", "--ui-port", "-1"]) != 0
    assert "moldau serve: --ui-port -1 is not a valid port" in capsys.readouterr().err


def test_the_console_refuses_a_security_setting_it_cannot_honour_before_serving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from moldau.cli.main import main

    conf = tmp_path / "client.properties"
    conf.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    argv = ["ui", "--bootstrap-server", "localhost:9092", "--port", "0"]
    assert main([*argv, "--command-config", str(conf)]) != 0
    err = capsys.readouterr().err
    assert err.startswith("moldau ui: --command-config: sasl.mechanism=GSSAPI is not supported")


def test_history_drops_the_series_updated_least_lately_and_on_request() -> None:
    h = History(points=3, max_series=2)
    h.add("a", 0, 1)
    h.add("b", 0, 1)
    h.add("a", 1, 2)  # a is sampled still; b stopped
    h.add("c", 1, 1)
    assert (h.has("a"), h.has("b"), h.has("c")) == (True, False, True)
    h.drop("a", "x")
    assert not h.has("a")


def test_growth_rates_leave_out_counters_that_went_down_or_are_missing() -> None:
    before = {"grew": 100.0, "restarted": 500.0, "gone": 1.0}
    after = {"grew": 300.0, "restarted": 10.0, "new": 7.0}
    assert growth_rates(before, after, 2.0) == {"grew": 100.0}
    assert growth_rates(before, after, 0.0) == {}


def test_throughput_from_the_protocol_sums_partitions_by_topic_and_cluster() -> None:
    view = ClusterView(
        sizes={("a", 0): 1000, ("a", 1): 500, ("b", 0): 10},
        high_watermarks={("a", 0): 10, ("a", 1): 5, ("b", 0): 1},
    )
    before = protocol_counters(view)
    view.sizes = {("a", 0): 3000, ("a", 1): 500, ("b", 0): 10}
    # Partition a-1's leader did not answer: neither 0 nor a spike later.
    view.high_watermarks = {("a", 0): 30, ("b", 0): 3}
    rates = throughput(growth_rates(before, protocol_counters(view), 2.0))
    assert rates == {
        ("a", "bytes_in"): 1000.0,
        ("b", "bytes_in"): 0.0,
        (None, "bytes_in"): 1000.0,
        ("a", "messages_in"): 10.0,
        ("b", "messages_in"): 1.0,
        (None, "messages_in"): 11.0,
    }


def test_throughput_from_metrics_takes_the_all_topics_counters_for_the_cluster() -> None:
    rates = {
        ("http://b1", None, "bytes_in"): 100.0,
        ("http://b2", None, "bytes_in"): 50.0,
        ("http://b1", "a", "bytes_in"): 100.0,
        ("http://b2", "a", "bytes_in"): 40.0,
    }
    assert throughput(rates) == {(None, "bytes_in"): 150.0, ("a", "bytes_in"): 140.0}


def test_window_from_the_end_with_a_filter_looks_back_as_far_as_the_scan_budget() -> None:
    assert end_span(10, 2, "") == 10
    span = end_span(10, 2, "needle")
    assert span == MAX_SCANNED // 2
    assert window("end", 10, START, HIGH, span=span).starts == START


def test_the_client_explains_timeouts_by_what_librdkafka_reported() -> None:
    from confluent_kafka import KafkaError, KafkaException

    from moldau.ui.cluster import ClusterClient

    cluster = ClusterClient("b:9092")
    try:
        timed_out = KafkaException(KafkaError(KafkaError._TIMED_OUT, "Timed out"))
        assert cluster.explain(timed_out) == "_TIMED_OUT: Timed out"
        suppressed = " (after 0ms in state CONNECT, 1 identical error(s) suppressed)"
        connect = "b:9092/bootstrap: Connect failed"
        cluster._on_error(KafkaError(KafkaError._TRANSPORT, connect + suppressed))
        assert cluster.explain(timed_out) == (
            "_TIMED_OUT: Timed out (lately: _TRANSPORT: b:9092/bootstrap: Connect failed)"
        )
        cluster.check()  # the sampler has not failed: pages still ask
        cluster.view.error = "_TIMED_OUT: Timed out"
        with pytest.raises(UiError, match="cannot reach the cluster at b:9092: _TIMED_OUT"):
            cluster.check()
        refused = "b:9092/bootstrap: SASL authentication error: bad (after 9ms in state AUTH_REQ)"
        cluster._on_error(KafkaError(KafkaError._AUTHENTICATION, refused))
        expected = "_AUTHENTICATION: b:9092/bootstrap: SASL authentication error: bad"
        assert cluster.explain(timed_out) == expected
        with pytest.raises(UiError, match=expected):
            cluster.check()
    finally:
        cluster.close()
