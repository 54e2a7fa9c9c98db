"""Faults under load on a real local NATS JetStream R3 cluster: a paused node (SIGSTOP,
then SIGCONT) and a crash of every node at once (SIGKILL, then restart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.archive.formats import read_json
from mqlab.brokers.nats.cluster import NatsCluster
from mqlab.hosts import process
from mqlab.report import markdown, plots
from tests.conftest import run_under_faults

pytestmark = pytest.mark.integration


def _state(pid: int) -> str:
    """The scheduler state letter of ``pid`` (``T``: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _stopped(pid: int, want: bool, timeout_s: float = 5.0) -> bool:
    """Whether ``pid`` is (``want``) or is not stopped within ``timeout_s``: a signal
    takes effect when the kernel next schedules the process, not at once."""
    import time

    deadline = time.monotonic() + timeout_s
    while (_state(pid) == "T") != want:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.timeout(120)
def test_pause_freezes_a_node_and_crash_all_kills_every_node(
    tmp_path: Path, state_dir: Path
) -> None:
    cluster = NatsCluster(tmp_path / "nats", 3)
    cluster.start()
    try:
        paused = cluster.procs[1]
        cluster.pause_node(1)
        assert _stopped(paused.pid, True)
        assert all(_state(cluster.procs[i].pid) != "T" for i in (0, 2))
        cluster.resume_node(1)
        assert _stopped(paused.pid, False)
        before = dict(cluster.procs)
        cluster.crash_all()
        assert not any(process.is_alive(r) for r in before.values())
        for i in range(3):
            cluster.restart_node(i)
        assert all(cluster.alive())
        assert {r.pid for r in cluster.procs.values()}.isdisjoint(r.pid for r in before.values())
    finally:
        cluster.stop()


FAULTS = [
    {"at_s": 1, "action": "kill_leader", "restart_after_s": 1},
    {"at_s": 3, "action": "pause_node", "node": 1, "duration_s": 3},
    {"at_s": 7, "action": "crash_all", "restart_after_s": 1},
]


@pytest.mark.timeout(240)
def test_a_run_through_a_pause_and_a_crash_of_every_node_loses_nothing(
    tmp_path: Path, state_dir: Path
) -> None:
    result = run_under_faults(
        tmp_path, "nats-faults", "nats-r3", FAULTS, duration_s=14, rate_per_s=None, warmup_s=0
    )
    assert result.status == "complete", result.end_reason
    manifest = read_json(result.run_dir / "manifest.json")
    actions = [(f["action"], f["node"]) for f in manifest["faults"]]
    assert actions[0][0] == "kill_leader" and actions[1] == ("restart_node", actions[0][1])
    actions = actions[2:]
    assert actions == [
        ("pause_node", 1),
        ("resume_node", 1),
        ("crash_all", 0),
        ("restart_node", 0),
        ("restart_node", 1),
        ("restart_node", 2),
    ], actions
    at = [f["at_ms"] for f in manifest["faults"]][2:]
    assert 2_500 <= at[1] - at[0] <= 4_000 and 500 <= at[3] - at[2] <= 2_500, at
    summary = read_json(result.run_dir / "summary.json")
    d = summary["delivery"]
    # what each fault cost, one row per fault, in summary.json and the faults table
    costs = summary["faults"]
    assert [c["action"] for c in costs] == ["kill_leader", "pause_node", "crash_all"]
    assert all(c["end_ms"] is not None and c["start_ms"] < c["end_ms"] for c in costs)
    # the messages sent while each fault lasted (the senders' per-second seq marks)
    assert sum(c["sent"] for c in costs) > 0 and all(c["sent"] is not None for c in costs)
    assert [c["lost"] for c in costs] == [0, 0, 0], costs
    # outages are whole seconds of this run's timeline, never past the senders' last try
    from mqlab.analysis import catalog

    timeline = catalog.read_run_table(result.run_dir, "timeline").to_pylist()
    tried = [r["second_ms"] for r in timeline if r["confirmed"] or r["failed"]]
    for c in costs:
        last_try_s = (max(tried) - c["start_ms"] // 1000 * 1000) // 1000 + 1
        assert 0 <= c["unavailable_send_s"] <= last_try_s, (c, last_try_s)
        assert 0 <= c["unavailable_receive_s"] <= len(timeline), c
    # a process crash keeps the page cache: every confirmed message is still there
    assert d["confirmed"] > 0 and d["lost"] == 0 and d["undrained"] == 0, d
    assert d["confirmed"] <= d["unique_received"] <= d["sent"], d
    # the report shades both faults on the timeline
    windows = plots.fault_windows(manifest["faults"])
    assert [w[2] for w in windows] == [
        f"kill leader (node {manifest['faults'][0]['node']})",
        "pause node 1",
        "crash of every node",
    ]
    assert all(w[1] is not None for w in windows)
    report = markdown.report_run(result.run_dir)
    assert (result.run_dir / plots.TIMELINE_PNG).stat().st_size > 0 and report.is_file()


def _jsz_leader(cluster: NatsCluster, stream: str) -> set[str]:
    """The stream's leader as each node's monitoring endpoint reports it (not the driver)."""
    import json
    import urllib.request

    seen = set()
    for i in range(cluster.nodes):
        url = f"http://127.0.0.1:{cluster.ports['http'][i]}/jsz?accounts=true&streams=true"
        with urllib.request.urlopen(url, timeout=2) as r:
            data = json.loads(r.read())
        for acc in data.get("account_details") or []:
            for st in acc.get("stream_detail") or []:
                if st.get("name") == stream and (st.get("cluster") or {}).get("leader"):
                    seen.add(st["cluster"]["leader"])
    return seen


@pytest.mark.timeout(120)
def test_kill_leader_kills_the_node_leading_the_stream(tmp_path: Path, state_dir: Path) -> None:
    import time

    from mqlab.brokers.nats import node as natsconf
    from mqlab.brokers.nats.driver import NatsDriver, Settings

    cluster = NatsCluster(tmp_path / "nats", 3)
    cluster.start()
    driver = NatsDriver(Settings(), cluster.endpoints(), "leadertest")
    try:
        driver.setup()
        leader = cluster.leader(driver)
        assert _jsz_leader(cluster, driver.stream) == {natsconf.server_name(leader)}
        cluster.kill_node(leader)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the two others elect a new leader
            try:
                moved = cluster.leader(driver)
            except Exception:  # noqa: BLE001 - no leader during the election
                moved = leader
            if moved != leader:
                break
            time.sleep(0.5)
        assert moved != leader
    finally:
        driver.close()
        cluster.stop()
