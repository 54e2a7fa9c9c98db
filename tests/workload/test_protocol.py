"""The worker protocol (mqlab/workload/protocol.py): each command and event goes over the
wire as the lines the coordinator and workers have always exchanged, and comes back."""

from __future__ import annotations

import json

from mqlab.workload import protocol as p


def test_commands_are_the_lines_they_always_were_and_parse_back() -> None:
    lines = {
        p.Go(1700000000123): "go 1700000000123",
        p.Measure(1700000005000): "measure 1700000005000",
        p.ReceiversStop(): "receivers-stop",
        p.Stop(): "stop",
    }
    for cmd, line in lines.items():
        assert p.command_line(cmd) == line
        assert p.parse_command(line + "\n") == cmd
    assert p.parse_command("go") == p.Go()
    assert p.parse_command("") is None and p.parse_command("measure soon") is None
    assert p.parse_command("reboot") is None


def test_events_are_json_lines_with_their_kind_and_parse_back() -> None:
    events = [
        p.Started(42, "/usr", "/opt/mqlab"),
        p.Ready("compiled-lanes"),
        p.Ready(None, "lanes"),
        p.Ready(),
        p.Measuring(1700000005000),
        p.Progress({"sent": 10, "acked": 9}),
        p.Done(3, {"received": 7}),
    ]
    for ev in events:
        line = p.event_line(ev)
        assert p.parse_event(line) == ev
    assert json.loads(p.event_line(p.Ready())) == {"event": "ready"}  # no paths
    assert json.loads(p.event_line(p.Ready(None, "python"))) == {
        "event": "ready",
        "receive_path": "python",
    }
    assert json.loads(p.event_line(p.Done(0, {"sent": 1}))) == {
        "event": "done",
        "exit_code": 0,
        "totals": {"sent": 1},
    }
    assert p.parse_event("Traceback (most recent call last):") is None
    assert p.parse_event('{"event": "unknown"}') is None
    assert p.parse_event('{"event": "measuring", "at_ms": "soon"}') is None
