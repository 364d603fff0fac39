"""The console's pure parts: the message browser's read window, bounded history
and rates, the cluster view's counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from moldau.ui.browse import window
from moldau.ui.history import History, Rate
from moldau.ui.json import UiError, int_param
from moldau.ui.view import ClusterView, PartitionInfo

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
