"""Runs that must be marked, on real local clusters: senders that cannot hold their fixed
rate (client_bound), and a receiver that cannot keep up (receivers_behind). The run table,
`mqlab ls` and the report say so; a run within reach has neither mark (test_run.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.analysis import saturation
from mqlab.archive.formats import read_json
from mqlab.archive.layout import list_runs
from tests.conftest import SharedLab
from tests.fixtures import reference
from tests.run.test_run import check_archive, mqlab, run_scenario

pytestmark = pytest.mark.integration

BEYOND_REACH = """
name = "beyond-reach"
profile = "redis-wait1"
[cluster]
nodes = 3
[workload]
message_bytes = 256
send_batch_min = 1
send_batch_max = 1
mode = "fixed_rate"
rate_per_s = 50000.0
duration_s = 5
warmup_s = 1
drain_timeout_s = 10
[clients]
sender_nodes = 1
receiver_nodes = 1
threads = 1
processes_per_node = 1
"""


def test_senders_that_cannot_hold_their_fixed_rate_mark_the_run_client_bound(
    tmp_path: Path, shared_lab: SharedLab
) -> None:
    # one thread, one synchronous WAIT-replicated send at a time: far below 50,000/s
    shared_lab.cluster("redis")
    run, proc = run_scenario(BEYOND_REACH, tmp_path, shared_lab, "beyond")
    results = tmp_path / "results"
    summary = check_archive(run.path)
    sat = summary["saturation"]
    # the lag the summary judged, from the raw counts.csv rows of the measured period
    warm = read_json(run.path / "manifest.json")["measure"]["warmup_end_ms"]
    period = reference.period(run.path, "sender", warm)
    lag = max(
        r["lag_ms"]
        for r in reference.counts(run.path, "sender")
        if period.start_ms - 999 <= r["start_ms"] - r["start_ms"] % 1000 < period.end_ms
    )
    assert sat["sender_lag_ms"] == lag > saturation.LAG_LIMIT_MS, sat
    assert sat["client_bound"] is True
    assert (
        f"fixed-rate senders fell {lag / 1000:.1f} s behind their schedule"
        in (sat["client_bound_why"])
    )
    assert "client-bound" in proc.stdout  # the run table
    ls = mqlab("ls", "--results", str(results), env_state=shared_lab.root)
    assert ls.returncode == 0 and "client-bound" in ls.stdout, ls.stdout
    rep = mqlab("report", str(run.path), env_state=shared_lab.root)
    assert rep.returncode == 0, rep.stderr
    report = (run.path / "report.md").read_text()
    assert "Marked **client-bound**" in report and "**Client-bound:** " in report


SLOW_RECEIVER = """
name = "slow-receiver"
profile = "nats-one-by-one"
[cluster]
nodes = 3
[workload]
message_bytes = 128
send_batch_min = 10
send_batch_max = 10
receive_batch_max = 1
duration_s = 6
warmup_s = 1
drain_timeout_s = 3
[clients]
sender_nodes = 1
receiver_nodes = 1
threads = 1
processes_per_node = 1
"""
# NATS R3 with no read-ahead: one fetch round trip and one ack round trip per message,
# the receiver of issue 13's example (359 msgs/s against 755 sent)
ONE_BY_ONE = """
format_version = 1
broker = "nats"
description = "nats-r3 without read-ahead (prefetch 0): one fetch per receive"
[settings]
replicas = 3
storage = "file"
ack_wait_s = 30.0
ack_sync = true
prefetch = 0
"""


def test_a_receiver_that_cannot_keep_up_marks_the_run_receivers_behind(
    tmp_path: Path, shared_lab: SharedLab
) -> None:
    shared_lab.cluster("nats")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "nats-one-by-one.toml").write_text(ONE_BY_ONE)
    scenario = tmp_path / "slow.toml"
    scenario.write_text(SLOW_RECEIVER)
    results = tmp_path / "results"
    proc = mqlab("run", str(scenario), "--results", str(results), env_state=shared_lab.root)
    [run] = list_runs(results)
    summary = read_json(run.path / "summary.json")
    sat = summary["saturation"]
    assert sat["receivers_behind"] is True, (sat, proc.stderr[-2000:])
    # the backlog the summary judged, from the raw counts.csv files
    warm = read_json(run.path / "manifest.json")["measure"]["warmup_end_ms"]
    period = reference.period(run.path, "sender", warm)
    rows = [
        r
        for r in reference.timeline(run.path)
        if period.start_ms - 999 <= r["second_ms"] < period.end_ms
    ]
    b = sat["backlog"]
    assert (b["start"], b["end"]) == (rows[0]["backlog"], rows[-1]["backlog"])
    trend = reference.backlog_trend(rows)
    assert b["per_s"] == pytest.approx(trend, abs=0.06)
    limit = 0.05 * sum(r["confirmed"] for r in rows) / len(rows)
    assert trend > limit > 0
    assert sat["receivers_behind_why"].startswith(
        f"the backlog grew by {b['per_s']:,.0f} messages a second through the measured period"
    )
    assert summary["delivery"]["lost"] == 0  # behind, not losing: what is left is undrained
    assert "receivers behind" in proc.stdout
    rep = mqlab("report", str(run.path), env_state=shared_lab.root)
    assert rep.returncode == 0, rep.stderr
    assert "**Receivers behind:** the backlog grew" in (run.path / "report.md").read_text()
