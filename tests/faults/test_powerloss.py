"""Power loss on real hosts: the reboot is sent to every host together, and a host counts
as back only once it answers from a new kernel (a new boot id).

Scripted hosts: rebooting a real host is for real hosts only (target "ssh" or "aws"); the
scenario refuses it where the kernel is this machine's (tests/scenario/test_scenario.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqlab.analysis import faults
from mqlab.errors import FleetError
from mqlab.faults import powerloss
from mqlab.hosts.base import Result
from mqlab.hosts.local import LocalHost


class Rebooting(LocalHost):
    """Answers ``cat boot_id`` with its boot id; after the SysRq call, it is down for
    ``down_polls`` questions, then answers with a new boot id (unless it ``ignores`` it)."""

    def __init__(self, name: str, down_polls: int = 2, ignores: bool = False):
        super().__init__(name, "192.0.2.1", Path("/nonexistent"))
        self.boot = f"{name}-boot-1"
        self.down_polls = down_polls
        self.ignores = ignores
        self.rebooting = False
        self.calls: list[str] = []
        self.closed = 0

    def run(self, cmd: Any, *, timeout_s: float = 60.0, env: Any = None, check: bool = True):
        line = cmd if isinstance(cmd, str) else " ".join(cmd)
        self.calls.append(line)
        if line == f"cat {powerloss.BOOT_ID}":
            if self.rebooting:
                if self.down_polls > 0:
                    self.down_polls -= 1
                    raise FleetError(f"{self.name}: cannot connect over SSH")
                self.rebooting = False
                self.boot = f"{self.name}-boot-2"
            return Result(0, self.boot + "\n", "")
        if "sysrq-trigger" in line:
            self.rebooting = not self.ignores
            raise FleetError(f"{self.name}: connection lost")  # the kernel is gone
        return Result(0, "", "")

    def close(self) -> None:
        self.closed += 1


def test_every_host_gets_the_unsynced_reboot_and_its_old_boot_id_is_kept() -> None:
    hosts = [Rebooting("broker-0"), Rebooting("broker-1")]
    before = powerloss.cut_power(hosts)
    assert before == {"broker-0": "broker-0-boot-1", "broker-1": "broker-1-boot-1"}
    for h in hosts:
        assert h.calls[-1] == "sh -c " + powerloss.REBOOT_NOW
        assert h.rebooting and h.closed == 1  # the dead connection is dropped


def test_hosts_are_back_once_they_answer_from_a_new_kernel() -> None:
    hosts = [Rebooting("broker-0", down_polls=1), Rebooting("broker-1", down_polls=3)]
    before = powerloss.cut_power(hosts)
    sleeps: list[float] = []
    powerloss.wait_back(hosts, before, timeout_s=60, poll_s=5, sleep=sleeps.append)
    assert [h.boot for h in hosts] == ["broker-0-boot-2", "broker-1-boot-2"]
    assert sleeps == [5, 5, 5]  # broker-1 was down for three polls


def test_a_host_that_does_not_reboot_is_named_with_the_likely_cause() -> None:
    host = Rebooting("broker-0", ignores=True)  # kernel.sysrq forbids it, say
    before = powerloss.cut_power([host])
    with pytest.raises(FleetError, match=r"broker-0 did not reboot .*kernel\.sysrq"):
        powerloss.wait_back([host], before, timeout_s=0, sleep=lambda _s: None)


def test_a_host_that_stays_down_is_named_with_what_to_do() -> None:
    host = Rebooting("broker-2", down_polls=10**6)
    before = powerloss.cut_power([host])
    with pytest.raises(FleetError, match="broker-2 not back 0 s after the power cut"):
        powerloss.wait_back([host], before, timeout_s=0, sleep=lambda _s: None)


def test_power_loss_windows_last_until_the_nodes_are_restarted() -> None:
    log = [
        {"action": "power_loss", "node": 1, "at_ms": 1_000},
        {"action": "restart_node", "node": 1, "at_ms": 60_000},
        {"action": "power_loss_all", "node": 0, "nodes": 3, "at_ms": 70_000},
        *({"action": "restart_node", "node": i, "at_ms": 130_000 + i} for i in range(3)),
    ]
    got = [(w["label"], w["start_ms"], w["end_ms"]) for w in faults.windows(log)]
    assert got == [
        ("power loss on node 1's host", 1_000, 60_000),
        ("power loss on every host", 70_000, 130_002),
    ]
