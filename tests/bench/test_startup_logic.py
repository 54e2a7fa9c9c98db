"""bench/startup.py: the phases and ratios it prints."""

from __future__ import annotations

import pytest

from bench.startup import GOALS_S, Startup, format_results, phases, server_of
from mqlab.errors import ScenarioError


def test_phases_run_from_one_progress_message_to_the_next() -> None:
    events = [(0.05, "starting node 0"), (0.5, "waiting for health")]
    assert phases(events, 2.0) == [
        ("preparing (ports, configuration, data directories)", 0.05),
        ("starting node 0", pytest.approx(0.45)),
        ("waiting for health", 1.5),
    ]


def test_repeated_waiting_messages_are_one_phase() -> None:
    events = [
        (0.1, "starting node 0"),
        (0.2, "waiting for node 0 to boot (0 s)"),
        (5.2, "waiting for node 0 to boot (5 s)"),
        (10.2, "waiting for node 0 to boot (10 s)"),
        (12.0, "starting node 1"),
    ]
    got = phases(events, 13.0)
    assert [m for m, _ in got] == [
        "preparing (ports, configuration, data directories)",
        "starting node 0",
        "waiting for node 0 to boot",
        "starting node 1",
    ]
    assert got[2][1] == pytest.approx(11.8)
    assert sum(s for _, s in got) == pytest.approx(13.0)


def test_no_progress_message_is_one_phase() -> None:
    assert phases([], 1.5) == [("preparing (ports, configuration, data directories)", 1.5)]


def test_ratio_is_measured_over_goal_and_the_verdict_follows() -> None:
    fast = Startup("nats", healthy_s=0.5, stop_s=0.1)
    slow = Startup("redis", healthy_s=3.0, stop_s=0.4)
    assert fast.ratio == 0.5 / GOALS_S["nats"] and slow.ratio == 1.5
    table = format_results([fast, slow], show_phases=False)
    lines = table.splitlines()
    assert "0.25" in lines[2] and "met" in lines[2] and "NOT" not in lines[2]
    assert "1.50" in lines[3] and "NOT met" in lines[3]


def test_a_broker_at_a_profile_starts_the_servers_as_the_profile_asks() -> None:
    """``rocketmq@rocketmq-async``: RocketMQ's controller layout, against RocketMQ's goal;
    a profile of another broker is one clear error."""
    assert server_of("rocketmq") == ("rocketmq", {})
    assert server_of("rocketmq@rocketmq-sync") == ("rocketmq", {})
    assert server_of("rocketmq@rocketmq-async") == (
        "rocketmq",
        {"replication": "async", "flush": "async"},
    )
    assert Startup("rocketmq@rocketmq-async").goal_s == GOALS_S["rocketmq"]
    with pytest.raises(ScenarioError, match="not rocketmq"):
        server_of("rocketmq@kafka-isr")
    table = format_results([Startup("rocketmq@rocketmq-syncflush", 20.0, 5.0)], False)
    assert table.splitlines()[2].startswith("rocketmq@rocketmq-syncflush ")
