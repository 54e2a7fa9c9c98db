"""Partitions without root or network: which blackhole routes each kind puts on which host
(hand-computed), and the add/heal bookkeeping against a stand-in `ip` that keeps a
route table per host in a file (real shell, real scripts; no kernel route is touched)."""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mqlab.errors import FleetError
from mqlab.faults import partitions
from mqlab.faults.partitions import Cut, Route
from mqlab.hosts.base import Result
from mqlab.hosts.local import LocalHost


@dataclass(frozen=True)
class H:
    name: str
    address: str


# a lab of the quickstart's shape, at documentation addresses (192.0.2.0/24, TEST-NET-1)
B0, B1, B2 = H("broker-0", "192.0.2.10"), H("broker-1", "192.0.2.11"), H("broker-2", "192.0.2.12")
S0, R0, R1 = (
    H("sender-0", "192.0.2.13"),
    H("receiver-0", "192.0.2.14"),
    H("receiver-1", "192.0.2.15"),
)
BROKERS, CLIENTS = [B0, B1, B2], [S0, R0, R1]


def R(host: str, last: int) -> Route:
    return Route(host, f"192.0.2.{last}")


# -- planning -----------------------------------------------------------------------------------
def test_node_from_brokers_cuts_that_node_from_each_other_broker_both_ways() -> None:
    assert partitions.plan("node_from_brokers", BROKERS, CLIENTS, 1) == (
        R("broker-0", 11),
        R("broker-1", 10),
        R("broker-1", 12),
        R("broker-2", 11),
    )


def test_leader_from_brokers_cuts_the_leaders_host_from_the_other_brokers_only() -> None:
    # the leader (node 2, found at run time) keeps its clients: the split-brain case
    assert partitions.plan("leader_from_brokers", BROKERS, CLIENTS, 2) == (
        R("broker-0", 12),
        R("broker-1", 12),
        R("broker-2", 10),
        R("broker-2", 11),
    )


def test_clients_from_leader_cuts_every_client_host_from_the_leaders_host() -> None:
    assert partitions.plan("clients_from_leader", BROKERS, CLIENTS, 2) == (
        R("broker-2", 13),
        R("broker-2", 14),
        R("broker-2", 15),
        R("receiver-0", 12),
        R("receiver-1", 12),
        R("sender-0", 12),
    )


def test_majority_minority_cuts_the_node_from_the_other_brokers_and_the_clients() -> None:
    routes = partitions.plan("majority_minority", BROKERS, CLIENTS, 0)
    assert routes == (
        R("broker-0", 11),
        R("broker-0", 12),
        R("broker-0", 13),
        R("broker-0", 14),
        R("broker-0", 15),
        R("broker-1", 10),
        R("broker-2", 10),
        R("receiver-0", 10),
        R("receiver-1", 10),
        R("sender-0", 10),
    )


def test_a_host_on_both_sides_is_not_cut_from_itself() -> None:
    # an inventory whose sender runs on broker-2's machine (same address)
    shared = H("sender-0", B2.address)
    assert partitions.plan("clients_from_leader", BROKERS, [shared, R0], 2) == (
        R("broker-2", 14),
        R("receiver-0", 12),
    )


def test_a_node_out_of_range_an_unknown_kind_and_host_names_are_refused() -> None:
    with pytest.raises(FleetError, match=r"node 3 does not exist \(nodes 0\.\.2\)"):
        partitions.plan("node_from_brokers", BROKERS, CLIENTS, 3)
    with pytest.raises(FleetError, match="unknown partition 'everything'"):
        partitions.plan("everything", BROKERS, CLIENTS, 0)
    named = [B0, H("broker-1", "b1.example"), B2]
    with pytest.raises(FleetError, match="'b1.example' is not an IP address"):
        partitions.plan("node_from_brokers", named, CLIENTS, 0)


def test_labels_name_the_kind_and_node() -> None:
    assert partitions.describe("node_from_brokers", 1) == "partition: node 1 from brokers"
    assert (
        partitions.describe("clients_from_leader", 2) == "partition: clients from leader (node 2)"
    )
    assert partitions.describe("majority_minority", 0) == "partition: node 0 in the minority"
    assert (
        partitions.describe("leader_from_brokers", 1) == "partition: leader (node 1) from brokers"
    )


def test_route_commands_carry_the_tag_and_a_host_prefix() -> None:
    assert partitions.route_command("add", "192.0.2.11") == [
        "ip",
        "route",
        "add",
        "blackhole",
        "192.0.2.11/32",
        "proto",
        "213",
    ]
    assert partitions.route_command("del", "2001:db8::1")[4] == "2001:db8::1/128"


# -- applying and healing, against a stand-in `ip` ---------------------------------------------
FAKE_IP = """#!{python}
# `ip route add|del blackhole A/N proto P` and `ip -4|-6 route show type blackhole proto P`
# on a table kept in $FAKE_ROUTES (a JSON list of [type, address, proto])
import json, os, sys
path = os.environ["FAKE_ROUTES"]
table = json.load(open(path)) if os.path.exists(path) else []
args = sys.argv[1:]
if args[0] in ("-4", "-6"):
    args = args[1:]
if args[:2] == ["route", "show"]:
    for kind, addr, proto in table:
        if kind == args[args.index("type") + 1] and str(proto) == args[args.index("proto") + 1]:
            print(f"{{kind}} {{addr}} ")
    sys.exit(0)
verb, kind, prefix, _p, proto = args[1:]
entry = [kind, prefix.split("/")[0], int(proto)]
if verb == "add":
    if any(e[1] == entry[1] for e in table):
        sys.exit("RTNETLINK answers: File exists")
    table.append(entry)
elif verb == "del":
    if entry not in table:
        sys.exit("RTNETLINK answers: No such process")
    table.remove(entry)
json.dump(table, open(path, "w"))
"""


class FakeHost(LocalHost):
    """This machine, with `ip` replaced by the stand-in and its own route table file;
    ``unreachable`` makes the next that many commands fail as a lost connection would."""

    def __init__(self, name: str, address: str, tmp: Path):
        super().__init__(name, address, tmp)
        self.table = tmp / f"{name}.routes.json"
        self.bin = tmp / "bin"
        self.unreachable = 0
        self.commands: list[str] = []

    def run(
        self,
        cmd: list[str] | str,
        *,
        timeout_s: float = 60.0,
        env: dict[str, str] | None = None,
        check: bool = True,
    ) -> Result:
        self.commands.append(cmd if isinstance(cmd, str) else " ".join(cmd))
        if self.unreachable:
            self.unreachable -= 1
            raise FleetError(f"{self.name}: cannot connect over SSH")
        path = f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}"
        return super().run(
            cmd,
            timeout_s=timeout_s,
            env={"PATH": path, "FAKE_ROUTES": str(self.table)},
            check=check,
        )

    def routes(self) -> list[list[object]]:
        return json.loads(self.table.read_text()) if self.table.exists() else []


@pytest.fixture
def lab(tmp_path: Path) -> dict[str, FakeHost]:
    (tmp_path / "bin").mkdir()
    ip = tmp_path / "bin" / "ip"
    ip.write_text(FAKE_IP.format(python=sys.executable))
    ip.chmod(ip.stat().st_mode | stat.S_IXUSR)
    return {h.name: FakeHost(h.name, h.address, tmp_path) for h in [*BROKERS, *CLIENTS]}


def cut(lab: dict[str, FakeHost], kind: str = "node_from_brokers", node: int = 1) -> Cut:
    brokers = [lab[h.name] for h in BROKERS]
    clients = [lab[h.name] for h in CLIENTS]
    return Cut(kind, node, partitions.plan(kind, brokers, clients, node), lab)


def tables(lab: dict[str, FakeHost]) -> dict[str, list[list[object]]]:
    return {name: h.routes() for name, h in lab.items() if h.routes()}


def test_apply_puts_each_route_on_its_host_in_one_command_and_heal_removes_them(
    lab: dict[str, FakeHost],
) -> None:
    c = cut(lab)
    c.apply()
    assert tables(lab) == {
        "broker-0": [["blackhole", "192.0.2.11", 213]],
        "broker-1": [["blackhole", "192.0.2.10", 213], ["blackhole", "192.0.2.12", 213]],
        "broker-2": [["blackhole", "192.0.2.11", 213]],
    }
    assert c.in_place == set(c.routes)
    assert len(lab["broker-1"].commands) == 1  # both of its routes at once
    assert lab["sender-0"].commands == []  # the clients are not touched
    assert c.heal() == {}
    assert tables(lab) == {} and c.in_place == set()


def test_a_route_already_there_stops_the_apply_and_heal_leaves_it_alone(
    lab: dict[str, FakeHost],
) -> None:
    # broker-1 already holds a tagged route to broker-2 (a killed run's): not ours to delete
    lab["broker-1"].table.write_text(json.dumps([["blackhole", "192.0.2.12", 213]]))
    c = cut(lab)
    with pytest.raises(FleetError) as err:
        c.apply()
    msg = str(err.value)
    assert msg.startswith("broker-1: cannot add a blackhole route to 192.0.2.12 (RTNETLINK")
    assert msg.count("cannot add") == 1  # only broker-1 failed
    assert "File exists" in msg and "ip route del blackhole 192.0.2.12/32 proto 213" in msg
    assert "\n" not in msg
    # every host tried at once: broker-0 and broker-2 got theirs, broker-1 its first one
    assert c.in_place == {R("broker-0", 11), R("broker-1", 10), R("broker-2", 11)}
    assert c.heal() == {}
    assert tables(lab) == {"broker-1": [["blackhole", "192.0.2.12", 213]]}


def test_a_lost_connection_while_adding_counts_as_added_and_heal_tolerates_absence(
    lab: dict[str, FakeHost],
) -> None:
    lab["broker-1"].unreachable = 1
    c = cut(lab)
    with pytest.raises(FleetError, match="cannot connect"):
        c.apply()
    # unknown outcome on broker-1: both of its routes are treated as in place
    assert c.in_place == set(c.routes)
    assert tables(lab) == {
        "broker-0": [["blackhole", "192.0.2.11", 213]],
        "broker-2": [["blackhole", "192.0.2.11", 213]],
    }
    assert c.heal() == {}
    assert c.in_place == set() and tables(lab) == {}


def test_a_host_unreachable_until_another_is_healed_is_retried(lab: dict[str, FakeHost]) -> None:
    c = cut(lab)
    c.apply()
    lab["broker-0"].unreachable = 1  # its first heal attempt fails, the second succeeds
    assert c.heal() == {}
    assert tables(lab) == {} and len(lab["broker-0"].commands) == 3


def test_a_host_that_stays_unreachable_is_reported_with_how_to_remove_its_routes(
    lab: dict[str, FakeHost],
) -> None:
    c = cut(lab)
    c.apply()
    lab["broker-2"].unreachable = 100
    problems = c.heal()
    assert set(problems) == {"broker-2"} and "cannot connect" in problems["broker-2"]
    assert c.in_place == {R("broker-2", 11)}
    assert tables(lab) == {"broker-2": [["blackhole", "192.0.2.11", 213]]}
    msg = partitions.unhealed_message(c, problems)
    assert msg.startswith("partition: node 1 from brokers: not healed (broker-2: ")
    assert "routes left: broker-2 -> 192.0.2.11" in msg and "proto 213" in msg
    assert "mqlab lab down" in msg and "\n" not in msg


def test_every_host_that_fails_is_named_in_one_line(lab: dict[str, FakeHost]) -> None:
    for name in ("broker-0", "broker-2"):
        lab[name].table.write_text(json.dumps([["blackhole", "192.0.2.11", 213]]))
    c = cut(lab)
    with pytest.raises(FleetError) as err:
        c.apply()
    msg = str(err.value)
    assert msg.startswith("broker-0: cannot add") and "; broker-2: cannot add" in msg, msg
    assert "broker-1" not in msg.split("(")[0] and "\n" not in msg
    assert c.in_place == {R("broker-1", 10), R("broker-1", 12)}
    assert c.heal() == {}
    assert tables(lab) == {
        "broker-0": [["blackhole", "192.0.2.11", 213]],
        "broker-2": [["blackhole", "192.0.2.11", 213]],
    }


def test_a_run_logs_each_heal_and_fails_naming_the_routes_a_heal_left(
    lab: dict[str, FakeHost],
) -> None:

    from mqlab.archive.faultlog import FaultEntry
    from mqlab.faults import schedule
    from mqlab.faults.target import Target

    log: list[FaultEntry] = []

    def target(cuts: dict[int, Any]) -> Target:
        return Target(None, None, list, True, "netns", log, lambda _t: None, cuts=cuts)  # type: ignore[arg-type]

    healed, stuck = cut(lab), cut(lab, "clients_from_leader", 2)
    again = Cut("majority_minority", 0, (R("sender-0", 10),), lab)  # routes of its own
    for c in (healed, stuck, again):
        c.apply()
    cuts = {0: healed, 1: stuck}
    lab["sender-0"].unreachable = 100
    schedule.heal_open(target(cuts))  # logs, does not raise
    assert cuts == {}
    first, second = (e.to_json() for e in log)
    assert {k: first[k] for k in ("action", "partition", "node")} == {
        "action": "heal",
        "partition": "node_from_brokers",
        "node": 1,
    }
    assert "error" not in first
    assert second["action"] == "heal" and second["routes_left"] == [["sender-0", "192.0.2.12"]]
    assert str(second["error"]).startswith("partition: clients from leader (node 2): not healed")
    assert str(second["error"]).count("sender-0: cannot connect over SSH") == 1
    assert {r[1] for r in tables(lab)["sender-0"]} == {"192.0.2.12", "192.0.2.10"}
    # the scheduled heal of a run raises, so that the run fails and says so
    with pytest.raises(FleetError, match=r"node 0 in the minority: not healed.*sender-0 -> "):
        schedule.heal(target({5: again}), 5)
    lab["sender-0"].unreachable = 0
    assert stuck.heal() == {} and again.heal() == {} and tables(lab) == {}


def test_a_heal_from_another_thread_waits_for_an_apply_still_running(
    lab: dict[str, FakeHost],
) -> None:
    """A run that stops while its fault thread adds the routes heals from its own thread:
    a route already on its host but not yet known to the cut (its command still
    returning) must not be left behind (a flaky netns test found it, 2026-11-30)."""
    slow = lab["broker-0"]
    added = threading.Event()
    real_run = slow.run

    def run_slowly(cmd: list[str] | str, **kw: Any) -> Result:
        res = real_run(cmd, **kw)
        if "route add" in (cmd if isinstance(cmd, str) else " ".join(cmd)):
            added.set()  # on the host now; the cut hears of it only after this
            time.sleep(0.5)
        return res

    slow.run = run_slowly  # type: ignore[method-assign]
    c = cut(lab, "majority_minority", 0)
    applying = threading.Thread(target=c.apply)
    applying.start()
    assert added.wait(10)
    assert slow.routes() and not any(r.host == "broker-0" for r in c.in_place)
    assert c.heal() == {}  # waited for the apply: every route it added is gone
    applying.join(10)
    assert tables(lab) == {} and c.in_place == set()
