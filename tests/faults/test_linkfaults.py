"""The netem fault's logic: which way a host's link is slowed down, and how it heals.

The host is scripted (canned answers to each command); the real thing runs in
tests/faults/test_impairer_live.py on a netns lab.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from mqlab.analysis import faults
from mqlab.archive.faultlog import netem_label
from mqlab.errors import FleetError
from mqlab.faults import link as linkfaults
from mqlab.faults.link import VIA_NFQUEUE, VIA_TC, LinkFault
from mqlab.hosts.base import Attached, Result
from mqlab.hosts.local import LocalHost

ROUTE = "10.213.0.11 dev eth0 src 10.213.0.10 uid 0 \\    cache"
NO_NETEM = "Error: Specified qdisc kind is unknown.\n"


class ScriptedImpairer(Attached):
    def __init__(self, lines: list[str]):
        super().__init__()
        self.lines = list(lines)
        self._eof = True  # everything it will ever say is already there
        self.stdin_closed = False
        self.killed = False

    def send(self, line: str) -> bool:
        return True

    def close_stdin(self) -> None:
        self.stdin_closed = True

    def poll(self) -> int | None:
        return 0 if self.stdin_closed else None

    def kill(self) -> None:
        self.killed = True


class ScriptedHost(LocalHost):
    """Answers each command from ``answers`` (first matching prefix); records them."""

    def __init__(self, answers: dict[str, Result], impairer: list[str] | None = None):
        super().__init__("broker-0", "10.213.0.10", Path("/nonexistent"))
        self.root = PurePosixPath("/tmp/mqlab-host")
        self.answers = answers
        self.commands: list[str] = []
        self.put: list[tuple[Path, str]] = []
        self.attached: list[list[str]] = []
        self.impairer = ScriptedImpairer(impairer or [])

    def run(self, cmd: Any, *, timeout_s: float = 60.0, env: Any = None, check: bool = True):
        line = cmd if isinstance(cmd, str) else " ".join(cmd)
        self.commands.append(line)
        for prefix, res in self.answers.items():
            if line.startswith(prefix):
                if check and res.rc != 0:
                    raise FleetError(res.err)
                return res
        return Result(0, "", "")

    def mkdir(self, path: Any) -> None:
        self.commands.append(f"mkdir -p {path}")

    def put_file(self, local: Path, remote: Any) -> None:
        self.put.append((local, str(remote)))

    def attach(self, cmd: list[str], *, env: Any = None, cwd: Any = None, stderr: Any = None):
        self.attached.append(cmd)
        return self.impairer


def link(host: ScriptedHost, delay: float = 50, jitter: float = 10, loss: float = 2) -> LinkFault:
    return LinkFault(host, 0, "10.213.0.11", delay, jitter, loss)


def test_netem_parameters_name_only_what_is_set() -> None:
    assert linkfaults.netem_args(50, 10, 2) == ["netem", "delay", "50ms", "10ms", "loss", "2%"]
    assert linkfaults.netem_args(50, 0, 0) == ["netem", "delay", "50ms"]
    assert linkfaults.netem_args(0, 0, 0.5) == ["netem", "loss", "0.5%"]


def test_the_device_is_the_one_the_host_routes_the_peer_through() -> None:
    assert linkfaults.device_of(ROUTE) == "eth0"
    with pytest.raises(FleetError, match="no device in the route"):
        linkfaults.device_of("unreachable 10.0.0.1")


def test_a_kernel_with_netem_gets_tc_and_the_heal_deletes_the_qdisc() -> None:
    host = ScriptedHost({"ip -o route get": Result(0, ROUTE, "")})
    f = link(host)
    f.apply()
    assert (f.via, f.dev) == (VIA_TC, "eth0")
    assert "tc qdisc replace dev eth0 root netem delay 50ms 10ms loss 2%" in host.commands
    assert not host.attached
    assert f.heal() == {}
    assert host.commands[-1] == "tc qdisc del dev eth0 root"


def test_without_netem_the_impairer_is_shipped_run_and_stopped_with_its_counts() -> None:
    counts = {"packets": 900, "dropped": 18, "delayed": 882, "enobufs": 0}
    host = ScriptedHost(
        {
            "ip -o route get": Result(0, ROUTE, ""),
            "tc qdisc replace": Result(2, "", NO_NETEM),
        },
        impairer=["ready", json.dumps(counts)],
    )
    f = link(host)
    f.apply()
    assert f.via == VIA_NFQUEUE
    assert host.put == [(linkfaults.impairer_zip(), "/tmp/mqlab-host/mqlab-impair.pyz")]
    [cmd] = host.attached
    assert cmd == [
        "python3",
        "/tmp/mqlab-host/mqlab-impair.pyz",
        "--dev",
        "eth0",
        "--queue",
        str(linkfaults.QUEUE_NUM),
        "--delay-ms",
        "50",
        "--jitter-ms",
        "10",
        "--loss-pct",
        "2",
    ]
    assert f.heal() == counts
    assert host.impairer.stdin_closed
    assert host.commands[-1] == "python3 /tmp/mqlab-host/mqlab-impair.pyz --remove-only"


def test_an_impairer_that_does_not_start_is_a_one_line_error_and_leaves_no_rule() -> None:
    host = ScriptedHost(
        {
            "ip -o route get": Result(0, ROUTE, ""),
            "tc qdisc replace": Result(2, "", NO_NETEM),
            "tail": Result(0, "impair: iptables not found: install Debian's iptables", ""),
        },
        impairer=[],
    )
    with pytest.raises(FleetError, match="impairer did not start .*iptables not found"):
        link(host).apply()
    assert "python3 /tmp/mqlab-host/mqlab-impair.pyz --remove-only" in host.commands


def test_another_tc_error_is_reported_not_worked_around() -> None:
    host = ScriptedHost(
        {
            "ip -o route get": Result(0, ROUTE, ""),
            "tc qdisc replace": Result(2, "", "RTNETLINK answers: Operation not permitted"),
        }
    )
    with pytest.raises(FleetError, match="Operation not permitted"):
        link(host).apply()
    assert not host.attached


def test_a_rule_that_cannot_be_removed_fails_the_heal_naming_the_fix() -> None:
    host = ScriptedHost(
        {
            "ip -o route get": Result(0, ROUTE, ""),
            "tc qdisc replace": Result(2, "", NO_NETEM),
            "python3 /tmp/mqlab-host/mqlab-impair.pyz --remove-only": Result(1, "", "boom"),
        },
        impairer=["ready", "{}"],
    )
    f = link(host)
    f.apply()
    with pytest.raises(FleetError, match="remove it by hand: python3 .* --remove-only"):
        f.heal()


def test_the_label_says_what_the_link_suffers_and_how() -> None:
    entry = {"action": "netem", "node": 1, "delay_ms": 50, "jitter_ms": 10, "loss_pct": 2}
    assert netem_label(entry) == "netem: node 1, delay 50 ms ± 10 ms, loss 2 %"
    entry = {"action": "netem", "node": 0, "loss_pct": 5, "via": VIA_NFQUEUE}
    assert netem_label(entry) == "netem (nfqueue impairer): node 0, loss 5 %"


def test_a_netem_window_lasts_until_its_end_on_that_node() -> None:
    log = [
        {"action": "netem", "node": 1, "delay_ms": 40, "at_ms": 1_000},
        {"action": "kill_node", "node": 1, "at_ms": 2_000},
        {"action": "netem", "node": 2, "loss_pct": 5, "at_ms": 2_500},
        {"action": "netem_end", "node": 1, "at_ms": 3_000},
        {"action": "restart_node", "node": 1, "at_ms": 4_000},
    ]
    got = [(w["label"], w["start_ms"], w["end_ms"]) for w in faults.windows(log)]
    assert got == [
        ("netem: node 1, delay 40 ms", 1_000, 3_000),
        ("kill node 1", 2_000, 4_000),
        ("netem: node 2, loss 5 %", 2_500, None),  # the run ended before its heal
    ]
