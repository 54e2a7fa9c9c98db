"""Faults on the timeline: which spans the report shades, from a manifest's fault log."""

from __future__ import annotations

from pathlib import Path

from mqlab.report import plots


def test_each_fault_lasts_until_what_ends_it() -> None:
    log = [
        {"action": "kill_node", "node": 0, "at_ms": 1_000},
        {"action": "pause_node", "node": 2, "at_ms": 1_500, "duration_s": 1},
        {"action": "resume_node", "node": 2, "at_ms": 2_500},
        {"action": "restart_node", "node": 0, "at_ms": 4_000},
        {"action": "crash_all", "node": 0, "nodes": 3, "at_ms": 6_000},
        {"action": "restart_node", "node": 0, "at_ms": 7_000},
        {"action": "restart_node", "node": 1, "at_ms": 7_020},
        {"action": "restart_node", "node": 2, "at_ms": 7_050},
        {"action": "restart_node", "node": 1, "at_ms": 9_000},  # a scenario's lone restart
        {"action": "kill_node", "node": 1, "at_ms": 9_500},  # never restarted
        {"action": "kill_leader", "node": 2, "at_ms": 9_600},
        {"action": "restart_node", "node": 2, "at_ms": 9_900},
    ]
    assert plots.fault_windows(list(reversed(log))) == [
        (1_000, 4_000, "kill node 0"),
        (1_500, 2_500, "pause node 2"),
        (6_000, 7_050, "crash of every node"),
        (9_000, 9_000, "restart node 1"),
        (9_500, None, "kill node 1"),
        (9_600, 9_900, "kill leader (node 2)"),
    ]


def test_no_faults_no_windows_and_entries_without_a_time_are_ignored() -> None:
    assert plots.fault_windows([]) == []
    assert plots.fault_windows([{"action": "kill_node", "node": 0}]) == []


def test_the_timeline_with_faults_differs_from_the_one_without(tmp_path: Path) -> None:
    rows = [
        {
            "second_ms": 1_000 * s,
            "sent": 100,
            "confirmed": 100,
            "received": 0 if 3 <= s < 5 else 100,
            "failed": 0,
            "backlog": 0,
            "sender_lag_ms": 0,
            **{
                f"{m}_{f}": 1_000
                for m in ("processing_us", "send_msg_us", "send_call_us")
                for f in ("p50", "p99", "count")
            },
        }
        for s in range(10)
    ]
    for col, _label in plots.RATE_SERIES:
        for r in rows:
            r.setdefault(col, 0)
    plain, shaded = tmp_path / "plain.png", tmp_path / "shaded.png"
    plots.plot_timeline(rows, plain, 0, 0, "t")
    plots.plot_timeline(
        rows, shaded, 0, 0, "t", faults=[{"action": "pause_node", "node": 1, "at_ms": 3_000}]
    )
    assert plain.stat().st_size > 0 and shaded.stat().st_size > 0
    assert plain.read_bytes() != shaded.read_bytes()


def test_a_partition_lasts_until_its_heal_and_overlapping_ones_pair_by_kind_and_node() -> None:
    log = [
        {"action": "partition", "partition": "node_from_brokers", "node": 1, "at_ms": 1_000},
        {"action": "partition", "partition": "clients_from_leader", "node": 2, "at_ms": 1_500},
        {"action": "heal", "partition": "clients_from_leader", "node": 2, "at_ms": 2_000},
        {"action": "heal", "partition": "node_from_brokers", "node": 1, "at_ms": 5_000},
        {"action": "kill_node", "node": 1, "at_ms": 5_500},
        {"action": "partition", "partition": "majority_minority", "node": 0, "at_ms": 6_000},
        {"action": "restart_node", "node": 1, "at_ms": 6_500},
        {"action": "heal", "at_ms": 7_000},  # names no partition: the oldest still in place
        {"action": "heal", "partition": "node_from_brokers", "node": 0, "at_ms": 8_000},
        {"action": "partition", "partition": "node_from_brokers", "node": 2, "at_ms": 9_000},
    ]
    assert plots.fault_windows(list(reversed(log))) == [
        (1_000, 5_000, "partition: node 1 from brokers"),
        (1_500, 2_000, "partition: clients from leader (node 2)"),
        (5_500, 6_500, "kill node 1"),
        (6_000, 7_000, "partition: node 0 in the minority"),
        (8_000, 8_000, "heal"),  # nothing left to heal: an instant
        (9_000, None, "partition: node 2 from brokers"),  # the run ended before its heal
    ]
