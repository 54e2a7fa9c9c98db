"""The fault vocabulary and the check before a run starts (mqlab/faults/schedule.py)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from mqlab.archive.faultlog import FAULT_ACTIONS
from mqlab.errors import FleetError
from mqlab.faults import schedule
from mqlab.faults.target import Where
from mqlab.scenario.model import TAKES, Fault

LOCAL, NETNS, AWS = Where(False, "local"), Where(True, "netns"), Where(True, "aws")


def fault(action: str, **kw: object) -> SimpleNamespace:
    return SimpleNamespace(action=action, node=0, at_s=1.0, **kw)


def test_every_action_a_scenario_may_name_has_one_kind() -> None:
    choices = {f.name: f.metadata for f in dataclasses.fields(Fault)}["action"]["choices"]
    assert sorted(schedule.ACTIONS) == sorted(FAULT_ACTIONS) == sorted(choices) == sorted(TAKES)


def test_process_faults_strike_anywhere() -> None:
    schedule.check([fault("kill_node"), fault("crash_all"), fault("pause_node")], LOCAL)


def test_faults_between_hosts_need_hosts_of_their_own() -> None:
    for action in ("partition", "netem"):
        with pytest.raises(FleetError, match="needs hosts of their own"):
            schedule.check([fault(action)], LOCAL)
        schedule.check([fault(action)], NETNS)


def test_a_power_cut_needs_a_kernel_that_is_not_this_machines() -> None:
    with pytest.raises(FleetError, match="power_loss reboots a host's kernel"):
        schedule.check([fault("power_loss")], NETNS)
    schedule.check([fault("power_loss_all")], AWS)


def test_an_unknown_action_is_named_with_its_index() -> None:
    with pytest.raises(FleetError, match=r"faults\[1\].action = 'reboot' is no fault"):
        schedule.check([fault("kill_node"), fault("reboot")], AWS)


def test_the_schedule_says_when_it_last_did_something(monkeypatch: pytest.MonkeyPatch) -> None:
    """``last_done`` (what the drain waits past, mqlab/run/drain.py): None before any
    fault, then the time of the last action, a second half (a restart) included, and of
    one that failed."""
    done: list[str] = []
    target = SimpleNamespace(pending=[])

    def apply(f: SimpleNamespace, t: object) -> None:
        done.append(f.action)
        if f.action == "kill_node":
            target.pending.append((5.0, "restart", 0))
        if f.action == "partition":
            raise FleetError("cannot")

    monkeypatch.setattr(schedule, "apply", apply)
    monkeypatch.setattr(schedule, "end", lambda action, node, t: done.append(action))
    clock = iter(range(100, 200))
    monkeypatch.setattr(schedule, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    cut = fault("partition")
    cut.at_s = 8.0
    s = schedule.Schedule([fault("kill_node"), cut], target)
    s.due(0.5)
    assert s.last_done is None and done == []
    s.due(1.0)
    assert done == ["kill_node"] and s.last_done == 100
    s.due(4.0)
    assert s.last_done == 100
    s.due(5.0)
    assert done == ["kill_node", "restart"] and s.last_done == 101
    with pytest.raises(FleetError):
        s.due(8.0)
    assert done[-1] == "partition" and s.last_done == 102
