"""Network partitions on a netns lab, for real: blackhole routes cut hosts apart (checked by
TCP connects between the hosts' sshd ports), heal restores every path, and NATS R3 runs
through a partition with nothing lost; a run interrupted or crashing mid-partition heals it.

Needs root (network namespaces, an sshd per host). One lab (3 brokers, 1 sender, 1
receiver) serves the module and is removed at its end, checked gone.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqlab.archive.formats import read_json
from mqlab.faults import partitions
from mqlab.hosts.base import Host
from mqlab.labs.netns import lab as netns_lab
from mqlab.labs.netns import plan as netns_plan
from mqlab.labs.netns import state as netns_state
from mqlab.labs.placement import TEST_SKEW_ENV, hosts_of
from mqlab.report import plots
from mqlab.run import sweep
from mqlab.run.context import Observer, RunResult
from tests.conftest import processes_mentioning

pytestmark = [pytest.mark.integration]

HOSTS = ("broker-0", "broker-1", "broker-2", "sender-0", "receiver-0")
CONNECT_S = 3  # bound on one TCP connect between two hosts


# -- helpers ------------------------------------------------------------------------------------
def namespaces_of(name: str) -> list[str]:
    out = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True, timeout=10)
    names = [n["name"] for n in json.loads(out.stdout or "[]")]
    return [n for n in names if netns_plan.lab_of_namespace(n) == name]


def blackholes(lab: str) -> dict[str, list[str]]:
    """Every blackhole route (any tag) in each of the lab's namespaces, read from here."""
    out = {}
    for host in HOSTS:
        res = subprocess.run(
            [
                "ip",
                "-n",
                netns_plan.namespace_name(lab, host),
                "route",
                "show",
                "type",
                "blackhole",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        if res.stdout.strip():
            out[host] = [line.split()[1] for line in res.stdout.splitlines()]
    return out


def unreachable(src: Host, addresses: list[str]) -> set[str]:
    """The addresses whose sshd a TCP connect from ``src`` does not reach (each within
    CONNECT_S), tried in one command on ``src``."""
    script = (
        'for a in "$@"; do '
        f'if timeout {CONNECT_S} bash -c "exec 3<>/dev/tcp/$a/22" 2>/dev/null; '
        'then echo "ok $a"; else echo "cut $a"; fi; done'
    )
    res = src.run(["bash", "-c", script, "probe", *addresses])
    answers = dict(line.split()[::-1] for line in res.out.splitlines())
    assert set(answers) == set(addresses), res.out
    return {a for a, how in answers.items() if how == "cut"}


def reachability(hosts: dict[str, Host]) -> set[tuple[str, str]]:
    """The (from, to) pairs of distinct hosts whose connect fails."""
    name_of = {h.address: name for name, h in hosts.items()}
    out = set()
    for a in HOSTS:
        others = [hosts[b].address for b in HOSTS if b != a]
        out |= {(a, name_of[addr]) for addr in unreachable(hosts[a], others)}
    return out


def both_ways(*pairs: tuple[str, str]) -> set[tuple[str, str]]:
    return {p for a, b in pairs for p in ((a, b), (b, a))}


class Phases(Observer):
    """Records what the run says; ``fail_with`` is raised at the first progress report
    after the partition is in place (after checking that its routes are there)."""

    def __init__(self, lab: str, fail_with: BaseException | None = None) -> None:
        self.lab = lab
        self.lines: list[str] = []
        self.fail_with = fail_with
        self.cut_seen: dict[str, list[str]] = {}

    def phase(self, text: str) -> None:
        self.lines.append(text)

    def progress(self, elapsed_s: float, totals: dict[str, int], expected: int | None) -> None:
        cut = any(line.startswith("fault: partition") for line in self.lines)
        if self.fail_with is not None and cut and not self.cut_seen:
            self.cut_seen = blackholes(self.lab)
            raise self.fail_with


SCENARIO = """
format_version = 1
name = "partition-{name}"
profile = "nats-r3"
[cluster]
target = "netns"
nodes = 3
[cluster.netns]
lab = "{lab}"
[workload]
message_bytes = 512
duration_s = {duration}
warmup_s = 0
mode = "fixed_rate"
rate_per_s = 100.0
send_batch_max = 1
[clients]
sender_nodes = 1
receiver_nodes = 1
threads = 2
processes_per_node = 1
[[faults]]
at_s = 3
action = "partition"
partition = "{kind}"
node = 0
duration_s = {cut_s}
"""


def scenario(tmp: Path, lab: str, kind: str, duration: int = 12, cut_s: int = 4) -> Path:
    path = tmp / f"{kind}.toml"
    name = kind.replace("_", "-")
    path.write_text(SCENARIO.format(name=name, kind=kind, lab=lab, duration=duration, cut_s=cut_s))
    return path


# -- fixtures -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[netns_plan.Lab]:
    state = tmp_path_factory.mktemp("partitions-state")
    name = f"pt{secrets.token_hex(3)}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MQLAB_STATE_DIR", str(state))
        mp.delenv(TEST_SKEW_ENV, raising=False)
        try:
            yield netns_lab.up(name, brokers=3, senders=1, receivers=1)
        finally:
            netns_lab.down(name)
    assert namespaces_of(name) == []
    assert netns_state.find(name) is None
    assert processes_mentioning(str(state)) == []


@pytest.fixture
def hosts(lab: netns_plan.Lab) -> Iterator[dict[str, Host]]:
    brokers, senders, receivers = hosts_of(lab.inventory)
    by_name = {h.name: h for h in [*brokers, *senders, *receivers]}
    assert set(by_name) == set(HOSTS)
    try:
        yield by_name
    finally:
        for h in by_name.values():
            h.close()


# -- the mechanism ------------------------------------------------------------------------------
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("kind", "node", "cut"),
    [
        # broker-1 from broker-0 and broker-2; the clients still reach it
        ("node_from_brokers", 1, both_ways(("broker-1", "broker-0"), ("broker-1", "broker-2"))),
        # broker-1 from everyone: the other brokers and both client hosts
        (
            "majority_minority",
            1,
            both_ways(
                ("broker-1", "broker-0"),
                ("broker-1", "broker-2"),
                ("broker-1", "sender-0"),
                ("broker-1", "receiver-0"),
            ),
        ),
        # broker-2 (as if it led) from the client hosts; the brokers still reach it
        ("clients_from_leader", 2, both_ways(("broker-2", "sender-0"), ("broker-2", "receiver-0"))),
    ],
)
def test_a_cut_blocks_exactly_its_pairs_both_ways_and_heal_restores_them(
    lab: netns_plan.Lab, hosts: dict[str, Host], kind: str, node: int, cut: set[tuple[str, str]]
) -> None:
    assert blackholes(lab.name) == {}
    assert reachability(hosts) == set()  # everyone reaches everyone
    brokers = [hosts[f"broker-{i}"] for i in range(3)]
    clients = [hosts["sender-0"], hosts["receiver-0"]]
    c = partitions.Cut(kind, node, partitions.plan(kind, brokers, clients, node), hosts)
    try:
        c.apply()
        # one route on each side of every cut pair, tagged as mqlab's
        routes = {name: sorted(addrs) for name, addrs in blackholes(lab.name).items()}
        expected: dict[str, list[str]] = {}
        for a, b in sorted(cut):
            expected.setdefault(a, []).append(hosts[b].address)
        assert routes == {a: sorted(v) for a, v in expected.items()}
        assert c.in_place == set(c.routes)
        assert reachability(hosts) == cut
        # the coordinator still reaches the isolated host over SSH
        assert hosts[f"broker-{node}"].run(["true"]).rc == 0
    finally:
        problems = c.heal()
    assert problems == {} and c.in_place == set()
    assert blackholes(lab.name) == {}  # no route left, tagged or not
    assert reachability(hosts) == set()


# -- runs through a partition -------------------------------------------------------------------
def check_run(result: RunResult, kind: str) -> list[dict[str, Any]]:
    manifest = read_json(result.run_dir / "manifest.json")
    assert result.status == "complete", result.end_reason
    d = result.summary["delivery"]
    assert d["confirmed"] > 0 and d["lost"] == 0 and d["undrained"] == 0, d
    assert d["confirmed"] <= d["unique_received"] <= d["sent"], d
    faults = manifest["faults"]
    assert [(f["action"], f["partition"]) for f in faults] == [("partition", kind), ("heal", kind)]
    # cut at 3 s after the senders started, healed 4 s later (no earlier; slack for a busy
    # machine after)
    start = manifest["measure"]["start_ms"]
    assert 3_000 <= faults[0]["at_ms"] - start <= 4_500, (start, faults)
    assert 7_000 <= faults[1]["at_ms"] - start <= 9_500, (start, faults)
    assert faults[1]["node"] == faults[0]["node"] and "error" not in faults[1]
    [window] = plots.fault_windows(faults)
    assert window[:2] == (faults[0]["at_ms"], faults[1]["at_ms"])
    return list(faults)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_nats_r3_runs_through_node_0_cut_from_the_other_brokers(
    lab: netns_plan.Lab, tmp_path: Path
) -> None:
    phases = Phases(lab.name)
    [result] = sweep.execute_files(
        [scenario(tmp_path, lab.name, "node_from_brokers")], tmp_path / "results", phases
    )
    faults = check_run(result, "node_from_brokers")
    assert faults[0]["node"] == 0
    addr = {h.name: h.private_ip for h in lab.inventory.hosts}
    assert sorted(map(tuple, faults[0]["routes"])) == [
        ("broker-0", addr["broker-1"]),
        ("broker-0", addr["broker-2"]),
        ("broker-1", addr["broker-0"]),
        ("broker-2", addr["broker-0"]),
    ]
    assert plots.fault_windows(faults)[0][2] == "partition: node 0 from brokers"
    assert any(
        line.startswith("fault: partition: node 0 from brokers for 4 s") for line in phases.lines
    )
    assert blackholes(lab.name) == {}
    assert processes_mentioning(result.run_dir.name) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_nats_r3_runs_through_the_clients_cut_from_the_stream_leader(
    lab: netns_plan.Lab, tmp_path: Path
) -> None:
    [result] = sweep.execute_files(
        [scenario(tmp_path, lab.name, "clients_from_leader")], tmp_path / "results"
    )
    faults = check_run(result, "clients_from_leader")
    leader = faults[0]["node"]  # the stream's leader at that moment, whichever it was
    addr = {h.name: h.private_ip for h in lab.inventory.hosts}
    b = f"broker-{leader}"
    assert sorted(map(tuple, faults[0]["routes"])) == sorted(
        [
            (b, addr["receiver-0"]),
            (b, addr["sender-0"]),
            ("receiver-0", addr[b]),
            ("sender-0", addr[b]),
        ]
    )
    assert plots.fault_windows(faults)[0][2] == f"partition: clients from leader (node {leader})"
    assert blackholes(lab.name) == {}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("failure", ["interrupt", "crash"])
def test_a_run_that_stops_mid_partition_heals_it_on_the_way_out(
    lab: netns_plan.Lab, tmp_path: Path, failure: str
) -> None:
    error: BaseException = KeyboardInterrupt() if failure == "interrupt" else RuntimeError("bug")
    phases = Phases(lab.name, fail_with=error)
    path = scenario(tmp_path, lab.name, "majority_minority", duration=30, cut_s=60)
    if failure == "crash":  # a bug in mqlab: the run's archive is kept, the error raised
        with pytest.raises(RuntimeError, match="bug"):
            sweep.execute_files([path], tmp_path / "results", phases)
        [run_dir] = [d for d in (tmp_path / "results").iterdir() if (d / "manifest.json").is_file()]
    else:
        [result] = sweep.execute_files([path], tmp_path / "results", phases)
        assert result.end_reason == "interrupted" and result.status == "partial"
        run_dir = result.run_dir
    # the routes were there when the run stopped, and are gone now
    assert phases.cut_seen and set(phases.cut_seen) == set(HOSTS), phases.cut_seen
    assert blackholes(lab.name) == {}
    faults = read_json(run_dir / "manifest.json")["faults"]
    assert [(f["action"], f["node"]) for f in faults] == [("partition", 0), ("heal", 0)]
    assert "error" not in faults[1]
    assert any(
        line == "fault: healing the partition: node 0 in the minority" for line in phases.lines
    )
    assert processes_mentioning(run_dir.name) == []


# -- a slow link ------------------------------------------------------------------------------
NETEM = """
format_version = 1
name = "netem-primary"
profile = "postgres-sync"
[cluster]
target = "netns"
nodes = 3
[cluster.netns]
lab = "{lab}"
[workload]
message_bytes = 512
duration_s = 18
warmup_s = 0
mode = "fixed_rate"
rate_per_s = 20.0
send_batch_max = 1
[clients]
sender_nodes = 1
receiver_nodes = 1
threads = 2
processes_per_node = 1
[[faults]]
at_s = 3
action = "netem"
node = 0
delay_ms = 80
duration_s = 5
"""
# a commit's answer crosses node 0's link once more than before: at least the delay more
# per send inside the window; outside it, what a commit costs here
SLOW_US, FAST_US = 80_000, 40_000


def impair_rules(lab: str, host: str) -> list[str]:
    res = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            netns_plan.namespace_name(lab, host),
            "iptables",
            "-w",
            "-S",
            "OUTPUT",
        ],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    return [line for line in res.stdout.splitlines() if "mqlab-impair" in line]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_slow_link_on_the_postgres_primary_slows_every_commit_by_its_delay(
    lab: netns_plan.Lab, tmp_path: Path
) -> None:
    """PostgreSQL's primary is node 0; with synchronous standbys a commit's answer leaves
    node 0 after the standby's ack reached it, so 80 ms more on node 0's outbound link is
    80 ms more on every send while it lasts, and nothing before or after."""
    from mqlab.analysis import catalog
    from mqlab.faults import link as linkfaults

    path = tmp_path / "netem.toml"
    path.write_text(NETEM.format(lab=lab.name))
    [result] = sweep.execute_files([path], tmp_path / "results", Phases(lab.name))
    assert result.status == "complete", result.end_reason
    d = result.summary["delivery"]
    assert d["confirmed"] > 0 and d["lost"] == 0 and d["undrained"] == 0, d
    manifest = read_json(result.run_dir / "manifest.json")
    start, end = manifest["faults"]
    assert (start["action"], start["node"], start["delay_ms"], start["dev"]) == (
        "netem",
        0,
        80,
        "eth0",
    )
    assert start["via"] in (linkfaults.VIA_TC, linkfaults.VIA_NFQUEUE)
    assert (end["action"], end["node"]) == ("netem_end", 0) and "error" not in end
    if start["via"] == linkfaults.VIA_NFQUEUE:  # this machine: no sch_netem in the kernel
        counts = end["impairer"]
        # every packet held for its delay, but those still held at the heal (released then)
        assert counts["packets"] > 100 and counts["dropped"] == 0, counts
        assert counts["delayed"] >= 0.95 * counts["packets"], counts
    assert 5_000 <= end["at_ms"] - start["at_ms"] <= 7_500, (start, end)
    # per second, the median send: the delay more inside the window, as before outside it
    rows = catalog.read_run_table(result.run_dir, "timeline").to_pylist()
    sending = [r for r in rows if r["confirmed"]]

    def medians(lo: int, hi: int) -> list[int]:
        return [r["send_msg_us_p50"] for r in sending if lo <= r["second_ms"] < hi]

    inside = medians(start["at_ms"] + 1_000, end["at_ms"] - 1_000)
    before = medians(0, start["at_ms"] - 1_000)
    after = medians(end["at_ms"] + 2_000, 2**62)
    assert len(inside) >= 3 and before and after, rows
    assert min(inside) >= SLOW_US, inside
    assert max(before) < FAST_US and max(after) < FAST_US, (before, after)
    [cost] = result.summary["faults"]
    assert cost["label"].startswith("netem") and "delay 80 ms" in cost["label"]
    assert cost["lost"] == 0
    assert impair_rules(lab.name, "broker-0") == []  # healed: no rule left behind
    assert processes_mentioning(result.run_dir.name) == []
